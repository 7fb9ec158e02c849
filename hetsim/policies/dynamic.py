"""The paper's per-epoch rule (DP-SGD) and its gradient-weighted twin (EDP-SGD).

At the end of each epoch ``p_i <- (p_i / t_i) / sum_j (p_j / t_j)``, with ``t_i`` the mean
measured compute time per step of worker i over that epoch, starting from equal shares. The
fixed point is the split where every worker's compute time is the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetsim.model.partition import balanced_split, split_by_shares
from hetsim.policies.base import Policy, RunHint, StepInfo, StepRecord, WorkerHint


class Dynamic(Policy):
    """DP-SGD (the paper's rule): at each epoch's end every share is rescaled by the worker's
    measured speed, ``p_i <- (p_i / t_i) / sum_j (p_j / t_j)``; gradients averaged."""

    name = "dynamic"
    resplits = True
    autocorrelated_steps = True
    closed_form = True  # iterating its own update on expected times gives its expected trajectory

    def reset(
        self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None, run: RunHint | None = None
    ) -> None:
        super().reset(n_workers, global_batch, hints, run)
        self._shares = np.full(n_workers, 1.0 / n_workers)
        self._speed = np.zeros(n_workers)  # last p_i / t_i, kept for a worker that sat an epoch out
        self._sum_s = np.zeros(n_workers)
        self._steps = np.zeros(n_workers, dtype=np.int64)
        self._seen_batches: tuple[int, ...] | None = None
        self._worked = np.zeros(n_workers, dtype=bool)
        self._run = 0  # steps observed since the split last changed

    def shares(self) -> np.ndarray:
        return self._shares.copy()

    def fixed_point_shares(self) -> tuple[float, ...] | None:
        """The continuous split where every worker with samples has the same expected compute
        time (capped workers hold their cap): the fixed point of the update."""
        if not self.costs_known:
            return None
        b = balanced_split(self.hints, self.global_batch, self.caps)
        return tuple(float(x) for x in b / b.sum())

    def steady_steps(self, info: StepInfo) -> int:
        return info.steps_per_epoch - info.step_in_epoch  # re-split after the epoch's last step

    def observe(self, record: StepRecord) -> None:
        self._observe(record.info, record.local_batches, (record.compute_s,))

    def observe_steps(
        self, first: StepInfo, local_batches: tuple[int, ...], compute_s: np.ndarray, included: np.ndarray
    ) -> int:
        self._observe(first, local_batches, compute_s)
        return len(compute_s)  # its split changes only at epoch ends, where a block ends

    def _observe(
        self, first: StepInfo, local_batches: tuple[int, ...], rows: Sequence[Sequence[float]] | np.ndarray
    ) -> None:
        """Add each step's times, in order (so a block sums exactly as step by step would)."""
        if local_batches is not self._seen_batches:  # the split changes once per epoch at most
            self._count_steps()
            self._seen_batches = local_batches
            self._worked = np.asarray(local_batches) > 0
        last = first.steps_per_epoch - 1
        for j, times in enumerate(rows):
            self._sum_s += times  # a worker's time only counts in epochs where it had samples
            self._run += 1
            if (first.step_in_epoch + j) % first.steps_per_epoch == last:
                self._update()

    def _count_steps(self) -> None:
        """Credit the steps observed since the split last changed to the workers that had samples."""
        self._steps += self._run * self._worked
        self._run = 0

    def _update(self) -> None:
        self._count_steps()
        seen = (self._steps > 0) & (self._sum_s > 0)
        self._speed[seen] = self._ran_shares()[seen] / (self._sum_s[seen] / self._steps[seen])
        never = self._speed == 0  # down for every step so far: assume an average worker, not a dead one
        if never.any() and not never.all():
            self._speed[never] = self._speed[~never].mean()
        self._shares = self._speed / self._speed.sum()
        self._batches = split_by_shares(self._shares, self.global_batch, self.caps)
        self._sum_s[:] = 0.0
        self._steps[:] = 0

    def _ran_shares(self) -> np.ndarray:
        """The shares the times were measured at: the rule's own, or where a cap held a worker
        below its share (and the others took the excess), the split that ran (the shares credited
        a capped slow worker with samples it never ran and the others with fewer than they did:
        the rule then kept the capped worker's share above its cap, the split stuck at the
        capped equal one for epochs)."""
        batches = np.asarray(self._batches, dtype=float)
        held = (batches >= np.asarray(self.caps, dtype=float)) & (batches < self._shares * self.global_batch)
        return batches / self.global_batch if held.any() else self._shares


class DynamicEnhanced(Dynamic):
    """EDP-SGD: the split of ``dynamic``; gradients combined as ``sum_i (b_i/B) g_i``."""

    name = "dynamic-enhanced"
    weighted_gradients = True
