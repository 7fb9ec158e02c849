"""Uneven data-parallel training as a library: what ``validation run`` trains with, for your own
torchrun script (validation/README.md, "Using the trainer in your own script";
``examples/train_your_model.py`` is a whole one).

* :func:`rank_samples`: each rank's disjoint samples of a step for any split, covering the
  global batch exactly (the epoch's shared permutation, cut in rank order);
* :func:`weighted_loss`: the loss scaled so that DDP's average is ``sum_i (b_i / B) g_i`` (a
  rank with no samples takes part at weight 0);
* :class:`UnevenStep`: this rank's model (inside DDP, or the flat all-reduce) and one timed
  step, its compute time measured outside DDP's waits (CUDA events on a GPU), a new local batch
  size warmed outside the step's time, DDP's bucket rebuild moved out of the first step, the
  memory a step frees kept in the process (:func:`keep_freed_memory`);
* :class:`Controller`: applies any hetsim policy (or a ``plan.json``, :func:`load_plan`)
  across the ranks: rank 0 decides and broadcasts the split and feeds the policy every rank's
  measured times; the trace goes to the run folder (:func:`open_run`, :func:`script_meta`),
  which ``python -m validation compare`` and ``python -m hetsim calibrate`` read;
* :func:`check_model`, :func:`check_run_folder`, :func:`refuse`: bad input (a BatchNorm model, a
  used run folder) refused before the ranks meet, in one line from rank 0 and exit status 2
  from every rank; :func:`torch_device` (the rank's device, made current; a CUDA device asked
  for on a machine without one refused) and :func:`loopback_environment` (a one-machine run's
  collectives kept on loopback);
* :func:`slowdown_delay`, :func:`rank_slowdown`, :func:`slowdown_factors`: a rank that emulates
  a slower device (testing plans on one machine), its factor of a ``--slowdown`` option, and
  every rank's (for the run folder);
* :func:`train_epoch`, :func:`probe_rounds`, :func:`epoch_row`: an epoch, the calibration
  probe, the epoch's row; :func:`held_out`, a policy's final held-out figure in a line;
* :class:`StepProfiler`: ``torch.profiler`` traces of a block's first steps (``profiler=`` of
  :func:`run_steps` and :func:`train_epoch`), which ``python -m hetsim import-trace --format
  torch-profiler`` reads.
"""

from __future__ import annotations

from validation.backend import loopback_environment, torch_device
from validation.probe import PROBE
from validation.record import script_meta
from validation.sharding import epoch_permutation, steps_per_epoch
from validation.sharding import local_indices as rank_samples
from validation.summary_text import held_out
from validation.uneven.control import Controller
from validation.uneven.memory import keep_freed_memory
from validation.uneven.plan_file import PlanChoice, PlanError, barrier_policy, load_plan, planned_policy
from validation.uneven.profiling import StepProfiler
from validation.uneven.run import (
    check_run_folder,
    epoch_row,
    marked_end,
    open_run,
    probe_hints,
    probe_rounds,
    refuse,
    run_steps,
    train_epoch,
)
from validation.uneven.step import (
    UnevenStep,
    check_model,
    rank_slowdown,
    slowdown_delay,
    slowdown_factors,
    weighted_loss,
)

__all__ = [
    "PROBE",
    "Controller",
    "PlanChoice",
    "PlanError",
    "StepProfiler",
    "UnevenStep",
    "barrier_policy",
    "check_model",
    "check_run_folder",
    "epoch_permutation",
    "epoch_row",
    "held_out",
    "keep_freed_memory",
    "load_plan",
    "loopback_environment",
    "marked_end",
    "open_run",
    "planned_policy",
    "probe_hints",
    "probe_rounds",
    "rank_slowdown",
    "rank_samples",
    "refuse",
    "run_steps",
    "script_meta",
    "slowdown_delay",
    "slowdown_factors",
    "steps_per_epoch",
    "torch_device",
    "train_epoch",
    "weighted_loss",
]
