"""Trace (simulated, measured or imported) -> a scenario that reproduces it.

This package owns fitting the simulator's model to measurements, one policy's rows at a time
(:func:`calibrate`; a table of several policies needs ``policy``):

* per worker (:mod:`~hetsim.calibrate.worker_fit`), over its complete computes (rows with samples
  whose gradient was ``included``): the affine least-squares fit
  ``compute_s ~ overhead_s + per_sample_s * local_batch`` with OLS standard errors, and the
  cost model asked for (``model``: Affine, Hinge or Table, :mod:`~hetsim.calibrate.curves`) or
  else the one with the lowest error at batch sizes left out of its fit
  (:mod:`~hetsim.calibrate.models`); the lognormal sigma of the ratio measured / fitted; the fit
  quality (R^2, residual CV). Steps cut at the barrier (backup, K-sync) count as censored times,
  never as complete ones. A constant injected delay cannot be told apart from overhead and ends
  up in ``overhead_s``;
* the noise's structure (:mod:`~hetsim.calibrate.noise`): the share common to all workers of a
  step and its lag-1 persistence, reported (the written scenario draws independent noise);
* the network from ``comm_s``: a constant when the trace has one world size and gradient size,
  else ring alpha-beta (latency and bandwidth, non-negative least squares);
* the workload: ``global_batch`` = the median per-step sum of ``local_batch``, steps per epoch
  and epochs from the trace when it has epochs.

Reading and checking trace tables is :mod:`hetsim.model.trace`'s job: problems with the input table
raise :class:`~hetsim.core.errors.ConfigError` naming the column. Doubts about the fit come back as
warning lines in :attr:`Calibration.warnings` (never printed here).
"""

from hetsim.calibrate.core import Calibration, calibrate, fit_network, trace_policies
from hetsim.calibrate.curves import CHOICES, FITTED, AffineCurve, Curve, HingeCurve, TableCurve, model_named
from hetsim.calibrate.noise import NoiseStructure
from hetsim.calibrate.worker_fit import WorkerFit, fit_worker, worker_table

__all__ = [
    "CHOICES",
    "FITTED",
    "AffineCurve",
    "Calibration",
    "Curve",
    "HingeCurve",
    "NoiseStructure",
    "TableCurve",
    "WorkerFit",
    "calibrate",
    "fit_network",
    "fit_worker",
    "model_named",
    "trace_policies",
    "worker_table",
]
