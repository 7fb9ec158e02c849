"""Traces in other tools' formats: hetsim's trace (:mod:`hetsim.model.trace`) out to the viewers people
already use, and other tools' traces in. :mod:`hetsim.traces.chrome` writes Chrome trace-event
JSON (Perfetto, chrome://tracing), laid out by :mod:`hetsim.traces.timeline` from runs that
:mod:`hetsim.traces.sources` finds in a folder or a trace file. :mod:`hetsim.traces.torch_profiler`
reads a data-parallel job's ``torch.profiler`` traces (each rank's read by
:mod:`hetsim.traces.kineto`, the files found by :mod:`hetsim.traces.profiler_files`) with the
standard library alone: hetsim never imports torch.

The modules here sit above the results folders they read and below the command line; they import
no engine. :mod:`~hetsim.traces.timeline` and :mod:`~hetsim.traces.chrome` need only NumPy;
:mod:`~hetsim.traces.sources` reads tables with pandas.
"""
