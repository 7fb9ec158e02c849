"""Values of command-line options owned by modules below the command line: the trace modes and
the speedup metrics (:mod:`hetsim.sweep.results`'s), the scheduler timeout (:mod:`hetsim.sweep.run`'s).

They are defined here, in a module that imports nothing, and their owners import them from
here: ``hetsim.cli.main`` needs them to build its parser (choices, defaults, help text), and
importing the owners would import numpy, pandas and simpy into every command line, ``--help``
and a mistyped option included.
"""

from __future__ import annotations

TRACE_MODES = ("full", "sample", "none")  # simulate/sweep --trace
DEFAULT_SAMPLE_EVERY = 10  # simulate/sweep --sample-every
SPEEDUP_METRICS = {  # --metric (plan --objective): the Summary field compared, and whether more of it is better
    "throughput": ("throughput_sps", True),
    "time_to_target": ("time_to_target_s", False),
}
DEFAULT_CONNECT_TIMEOUT_S = 5.0  # sweep --connect-timeout-s: how long to try reaching a Dask scheduler
