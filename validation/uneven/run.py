"""Blocks of steps, the probe and the run folder, for ``validation run`` and a user's own script.

:func:`run_steps` runs a block of timed steps of one segment and hands the trace rows to the
writer; :func:`train_epoch` is one epoch of a policy (the epoch's shared permutation cut by each
step's split, :mod:`validation.sharding`); :func:`probe_rounds` runs the calibration probe's
splits (:mod:`validation.probe`: every rank at several local batch sizes), whose rows
``validation compare`` and ``hetsim calibrate`` fit, and from which :func:`probe_hints` gives
``proportional`` and ``optimal`` their costs. :func:`open_run` is the run folder
(:class:`~validation.record.RunWriter` on rank 0, nothing elsewhere); :func:`epoch_row` the
epoch's row of ``epochs.csv``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist

from hetsim.core.console import sigterm_as_interrupt, stop_signal
from hetsim.core.files import check_empty_folder
from hetsim.policies import StepInfo, WorkerHint
from validation.probe import fit_probe, probe_round
from validation.record import NullWriter, RunWriter
from validation.segment import StepResult
from validation.sharding import PROBE as PROBE_STREAM
from validation.sharding import epoch_permutation, local_indices
from validation.uneven.control import Controller, Writer
from validation.uneven.profiling import StepProfiler
from validation.uneven.step import LossOf, UnevenStep

PROBE_FRACTIONS = (0.0625, 0.125, 0.25, 0.5, 0.75)  # validation run's default --probe-fractions
Window = Callable[[int], tuple[np.ndarray, int]]  # block step k -> (the epoch's permutation, step in epoch)


@contextmanager
def marked_end(writer: Writer) -> Iterator[None]:
    """A script's training, its run folder's meta.json left saying how it ended where it did not
    complete: ``interrupted`` (Ctrl-C; torchrun's SIGTERM to its workers when it is stopped, read
    as Ctrl-C) or ``failed``, with ``failure``: why. ``validation run`` marks its own runs so from
    outside; a script under torchrun has no one else to."""
    with sigterm_as_interrupt():
        try:
            yield
        except KeyboardInterrupt as stopped:
            writer.write_meta("interrupted", f"stopped by {stop_signal(stopped).name}")
            raise
        except Exception as exc:
            writer.write_meta("failed", f"{type(exc).__name__}: {exc}")
            raise


def open_run(out: str | Path | None, meta: dict[str, Any], option: str = "out") -> Writer:
    """Rank 0: the writer of the run folder ``out`` (meta.json written now, status ``running``;
    :meth:`~validation.record.RunWriter.flush` rewrites the trace and the epochs' files,
    :meth:`~validation.record.RunWriter.finish` writes everything and marks it ``complete``), or
    with no ``out`` one that keeps the rows in memory and writes nothing (the probe's costs,
    :func:`probe_hints`, are still read back from it); every other rank: a writer that drops
    everything. A folder that already holds files is refused (ConfigError on ``option``), as
    ``validation run`` refuses it: two runs' rows would mix."""
    if dist.get_rank() != 0:
        return NullWriter()
    if out is None:
        return RunWriter(None, meta)
    check_run_folder(out, option)
    return RunWriter(Path(out), meta)


def check_run_folder(out: str | Path, option: str = "out") -> None:
    """ConfigError on ``option`` when ``out`` exists and is not an empty folder (a script can call
    it before its ranks meet, so that a used folder is refused before anything starts)."""
    check_empty_folder(Path(out), option, "give a new one for this run")


REFUSAL_GRACE_S = 1.0  # another rank's wait before it exits, so that rank 0's line is out first


def refuse(exc: Exception, rank: int, prog: str) -> int:
    """Bad input found before the ranks meet: ``prog: error: exc`` from rank 0 (one line) and exit
    status 2 from every rank. torchrun stops every rank once one exits with an error, so a rank
    other than 0 waits a moment first (refused at once, it could stop rank 0 before its line was
    written), then says ``rank N:`` and its reason: what only it found (a device it lacks) is not
    lost, and where rank 0 found the same, torchrun has stopped it before it speaks."""
    if rank != 0:
        time.sleep(REFUSAL_GRACE_S)
    print(f"{prog}: error: {'' if rank == 0 else f'rank {rank}: '}{exc}", file=sys.stderr, flush=True)
    return 2


def run_steps(
    ctrl: Controller,
    stepper: UnevenStep,
    epoch: int,
    n_steps: int,
    window: Window,
    loss_of: LossOf,
    fixed: Sequence[tuple[int, ...]] | None = None,
    before_step: Callable[[StepInfo], object] = lambda info: None,
    profiler: StepProfiler | None = None,
    first: int = 0,
    per_epoch: int | None = None,
) -> list[StepResult]:
    """``n_steps`` timed steps of ``ctrl``'s segment (splits from its policy, or ``fixed``), then
    the ranks' times gathered and the rows written (:meth:`Controller.end_block`). With a
    ``profiler``, each step runs inside :meth:`StepProfiler.step` (``torch.profiler`` traces).
    A block may be part of an epoch of ``per_epoch`` steps (default ``n_steps``) that starts at its
    step ``first``: the policy sees where each step stands in the whole epoch, and ``window``
    gets the step's index in the epoch."""
    rank = dist.get_rank()
    total = n_steps if per_epoch is None else per_epoch
    for k in range(first, first + n_steps):
        info = StepInfo(ctrl.step + k - first, epoch, k, total)
        before_step(info)
        perm, step_in_epoch = window(k)

        def samples(split: tuple[int, ...], perm: np.ndarray = perm, at: int = step_in_epoch) -> np.ndarray:
            return local_indices(perm, at, split, rank)

        with nullcontext() if profiler is None else profiler.step():
            ctrl.step_with(stepper, info, samples, loss_of, None if fixed is None else fixed[k - first])
    return ctrl.end_block()


def train_epoch(
    ctrl: Controller, stepper: UnevenStep, loss_of: LossOf, *, seed: int, epoch: int, n_samples: int,
    profiler: StepProfiler | None = None,
) -> list[StepResult]:  # fmt: skip
    """One epoch of ``ctrl``'s policy: ``n_samples // global batch`` steps over the epoch's
    permutation of the training set (the same on every rank), each rank its slice of every step
    (the first ones profiled by ``profiler`` while it has steps left)."""
    perm = epoch_permutation(seed, epoch, n_samples)
    batch = ctrl.broadcast_global_batch()
    return run_steps(ctrl, stepper, epoch, n_samples // batch, lambda k: (perm, k), loss_of, profiler=profiler)


def probe_rounds(
    ctrl: Controller,
    stepper: UnevenStep,
    loss_of: LossOf,
    *,
    seed: int,
    epoch: int,
    n_samples: int,
    rounds: int = 1,
    fractions: Sequence[float] = PROBE_FRACTIONS,
    before_step: Callable[[StepInfo], object] = lambda info: None,
    largest: int | None = None,
) -> list[StepResult]:
    """``rounds`` rounds of the probe's splits in ``ctrl``'s segment (name it ``"probe"``), each
    step on its own permutation of the probe's stream of the training set; ``largest``: the
    largest global batch a policy may choose, whose fractions each round runs too
    (:func:`~validation.probe.probe_round`)."""
    if rounds <= 0:
        return []
    plan = [s for _ in range(rounds) for s in probe_round(ctrl.global_batch, ctrl.world, fractions, largest)]
    first = ctrl.step

    def window(k: int) -> tuple[np.ndarray, int]:
        return epoch_permutation(seed, first + k, n_samples, PROBE_STREAM), 0

    return run_steps(ctrl, stepper, epoch, len(plan), window, loss_of, plan, before_step)


def probe_hints(writer: Writer) -> tuple[WorkerHint, ...] | None:
    """Rank 0: each rank's affine cost fitted on the probe's rows so far (None elsewhere)."""
    return fit_probe(writer.trace_frame(), dist.get_world_size())


def epoch_row(
    ctrl: Controller, epoch: int, results: Sequence[StepResult], evaluate: Callable[[], tuple[float, float]]
) -> Callable[[], dict[str, Any]]:
    """The epoch's row of epochs.csv, made when rank 0's writer asks (``evaluate()``: held-out
    loss and accuracy; the other ranks' writers never call it, so only rank 0 evaluates)."""

    def row() -> dict[str, Any]:
        test_loss, accuracy = evaluate()
        return {
            "policy": ctrl.name,
            "epoch": epoch,
            "train_loss": float(np.mean([r.loss for r in results])) if results else float("nan"),
            "test_loss": test_loss,
            "test_accuracy": accuracy,
            "elapsed_s": ctrl.elapsed_s,
            "split": "/".join(str(b) for b in results[-1].split) if results else "",
            "global_batch": int(sum(results[-1].split)) if results else ctrl.global_batch,
            "noise_scale": None,
        }

    return row
