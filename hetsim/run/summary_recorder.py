"""A barrier run's Summary without its trace: a :class:`~hetsim.model.trace.Recorder` that keeps only
what :func:`hetsim.run.metrics.summary_of` reads, O(steps + workers) numbers, however many workers.

An engine hands it each block of steps (:meth:`hetsim.engines.base.Engine.record`); it keeps each
step's time and effective batches, sums the rest per worker, and hands each
:class:`~hetsim.run.recovery.Run` (where the slowdown factors, the workers up or the split change) to
a :class:`~hetsim.run.recovery.Recovery`, which keeps at most one episode open, so a policy that
re-splits every step under slowdown episodes (``adaptive``) keeps no more than one that never
does. Its Summary equals the one of the full trace, but for the rounding of the sums added a
block at a time (per-worker compute, waits, the plain mean's effective batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetsim.model.efficiency import effective_batches
from hetsim.model.trace import Recorder
from hetsim.policies.base import WorkerHint
from hetsim.run.metrics import BarrierTotals, barrier_step_times, run_changes
from hetsim.run.recovery import Recovery, Run


class SummaryRecorder:
    """Totals of a barrier run, fed block by block (see the module's docstring)."""

    def __init__(
        self, policy: str, n_workers: int, hints: Sequence[WorkerHint] | None = None, weighted: bool | None = None
    ) -> None:
        self.policy, self.weighted = policy, weighted  # weighted: the policy's weighted_gradients trait
        self.step_s: list[np.ndarray] = []
        self.applied: list[np.ndarray] = []
        self.plain: list[np.ndarray] = []
        self.epochs = 0
        self.samples = 0.0
        self.dropped = 0
        self.compute_s = np.zeros(n_workers)
        self.wait_s = 0.0
        self.moved = 0.0
        self.recovery = None if hints is None else Recovery(hints)  # without the speeds: no recovery figures
        self.last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the last step's factors, up, split

    def add_block(self, first: int, epoch: np.ndarray, start_s: np.ndarray, local_batch: np.ndarray,
                  compute_s: np.ndarray, wait_s: np.ndarray, included: np.ndarray, slowdown: np.ndarray,
                  up: np.ndarray | None, comm_s: float | np.ndarray) -> None:  # fmt: skip
        k, n = compute_s.shape
        batches, flags = np.broadcast_to(local_batch, (k, n)), np.broadcast_to(included, (k, n))
        self.step_s.append(barrier_step_times(compute_s, wait_s, comm_s))
        self.applied.append(effective_batches(batches, flags, True))
        self.plain.append(effective_batches(batches, flags, False))
        self.epochs = max(self.epochs, int(epoch.max()) + 1)
        self.samples += float((batches * flags).sum())
        self.dropped += int((batches * ~flags).sum())
        self.compute_s += compute_s.sum(axis=0)
        self.wait_s += float(wait_s.sum())
        everyone = np.ones(n, dtype=np.bool_)
        self._runs(first, np.broadcast_to(slowdown, (k, n)), np.broadcast_to(everyone if up is None else up, (k, n)),
                   batches)  # fmt: skip

    def _runs(self, first: int, factors: np.ndarray, up: np.ndarray, batches: np.ndarray) -> None:
        """Record a run where any of the three changes (from the step before the block on), and
        the samples the split moved."""
        rows = (factors, up, batches)
        before = [r[:1] for r in rows] if self.last is None else [r[None] for r in self.last]
        since = [np.concatenate([b, r]) for b, r in zip(before, rows)]  # from the step before the block
        starts = run_changes(*since) - 1  # in the block
        if self.last is None:
            starts = np.r_[0, starts]  # the run's first step starts a run
        self.moved += float(np.abs(np.diff(since[2], axis=0)).sum() / 2)
        if self.recovery is not None:
            for j in starts:
                self.recovery.add(Run(first + int(j), factors[j].copy(), up[j].copy(), batches[j].copy()))
        self.last = (factors[-1].copy(), up[-1].copy(), batches[-1].copy())

    def totals(self) -> BarrierTotals:
        if self.last is None:
            raise ValueError("an empty run has no summary")
        return BarrierTotals(
            policy=self.policy,
            weighted=self.weighted,
            step_s=np.concatenate(self.step_s),
            epochs=self.epochs,
            samples=self.samples,
            dropped=self.dropped,
            compute_s=self.compute_s,
            wait_s=self.wait_s,
            final_batches=tuple(int(b) for b in self.last[2]),
            moved=self.moved,
            applied=np.concatenate(self.applied),
            plain=np.concatenate(self.plain),
            recovered=None if self.recovery is None else self.recovery.figures(),
        )


class Tee:
    """A recorder that hands every block to several (a summary and a sampled trace)."""

    def __init__(self, *recorders: Recorder) -> None:
        self.recorders = recorders

    def add_block(self, first: int, epoch: np.ndarray, start_s: np.ndarray, local_batch: np.ndarray,
                  compute_s: np.ndarray, wait_s: np.ndarray, included: np.ndarray, slowdown: np.ndarray,
                  up: np.ndarray | None, comm_s: float | np.ndarray) -> None:  # fmt: skip
        for r in self.recorders:
            r.add_block(first, epoch, start_s, local_batch, compute_s, wait_s, included, slowdown, up, comm_s)
