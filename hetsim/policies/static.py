"""Policies whose split is fixed before the run: ``equal``, ``proportional`` and ``optimal``."""

from __future__ import annotations

from collections.abc import Sequence

from hetsim.partition import split_by_shares, water_fill
from hetsim.policies.base import Policy, StepInfo, WorkerHint


class _Static(Policy):
    def reset(self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None) -> None:
        super().reset(n_workers, global_batch, hints)
        self._batches = self._split()

    def _split(self) -> tuple[int, ...]:
        raise NotImplementedError

    def partition(self, info: StepInfo) -> tuple[int, ...]:
        return self._batches


class Equal(_Static):
    """Plain synchronous SGD: the same share for everyone (capped workers' excess spread evenly)."""

    name = "equal"

    def _split(self) -> tuple[int, ...]:
        return split_by_shares([1.0] * self.n_workers, self.global_batch, self.caps)


class Proportional(_Static):
    """Shares proportional to each worker's nominal throughput at the equal split,
    ``(B/n) / E[compute(B/n)]`` samples per second (what a benchmark of the card would report)."""

    name = "proportional"
    needs_costs = True

    def _split(self) -> tuple[int, ...]:
        b = self.global_batch / self.n_workers
        speeds_sps = [b / (h.fixed_s + h.per_sample_s * b) for h in self.hints]
        return split_by_shares(speeds_sps, self.global_batch, self.caps)


class Optimal(_Static):
    """Knows the true expected affine costs and minimises the max of the expected compute times
    (water-filling with caps, then exact integer rounding). On deterministic workers this is the
    lower bound of every barrier policy; with noise it balances the means, which is not always
    the minimiser of the expected max."""

    name = "optimal"
    needs_costs = True

    def _split(self) -> tuple[int, ...]:
        return water_fill(
            [h.fixed_s for h in self.hints], [h.per_sample_s for h in self.hints], self.global_batch, self.caps
        )
