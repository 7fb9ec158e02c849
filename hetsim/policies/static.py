"""Policies whose split is fixed before the run: ``equal``, ``proportional`` and ``optimal``, and
:func:`planned_policy`, one of them keeping a split decided elsewhere (a plan's)."""

from __future__ import annotations

from collections.abc import Sequence

from hetsim.core.errors import ConfigError
from hetsim.model.partition import min_max_split, split_by_shares
from hetsim.policies.base import UNTIL_THE_END, Policy, RunHint, StepInfo, WorkerHint


class _Static(Policy):
    closed_form = True  # what they share; steady_steps follows from overriding no split hook


class Equal(_Static):
    """Plain synchronous SGD: the same share for everyone (capped workers' excess spread evenly).
    A failed worker keeps its share, so the step waits until it is repaired."""

    name = "equal"
    excludes_failed = False


class Proportional(_Static):
    """Shares proportional to each worker's nominal throughput at the equal split,
    ``(B/n) / E[compute(B/n)]`` samples per second (what a benchmark of the card would report)."""

    name = "proportional"
    needs_costs = True
    weighted_gradients = True  # an uneven split's gradients weighted by their batches (only DP-SGD averages them)
    excludes_failed = False

    def initial_split(self) -> tuple[int, ...]:
        b = self.global_batch / self.n_workers
        speeds_sps = [b / float(h.expected_s(b)) for h in self.hints]
        return split_by_shares(speeds_sps, self.global_batch, self.caps)


class Optimal(_Static):
    """Knows the true expected costs and minimises the max of the expected compute times (the
    exact integer min-max split with caps, :func:`~hetsim.model.partition.min_max_split`). On
    deterministic workers this is the lower bound of every barrier policy; with noise it
    balances the means, which is not always the minimiser of the expected max."""

    name = "optimal"
    needs_costs = True
    weighted_gradients = True

    def reset(
        self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None, run: RunHint | None = None
    ) -> None:
        self._by_availability: dict[tuple[bool, ...], tuple[int, ...]] = {}
        super().reset(n_workers, global_batch, hints, run)

    def initial_split(self, available: tuple[bool, ...] | None = None) -> tuple[int, ...]:
        caps = self.caps if available is None else tuple(c if up else 0 for c, up in zip(self.caps, available))
        return min_max_split(self.hints, self.global_batch, caps)

    def steady_steps(self, info: StepInfo) -> int:
        return UNTIL_THE_END  # its split depends on availability only (engines re-ask when it changes)

    def split(self, info: StepInfo) -> tuple[int, ...]:
        """The min-max split over the workers that are up (cached per pattern)."""
        up = info.available
        if up is None or all(up) or sum(c for c, u in zip(self.caps, up) if u) < self.global_batch:
            return self._batches
        if up not in self._by_availability:
            self._by_availability[up] = self.initial_split(up)
        return self._by_availability[up]


def planned_policy(base: type[Policy], split: Sequence[int]) -> Policy:
    """A policy of class ``base``'s name and traits (``weighted_gradients`` above all) that keeps
    ``split``: a plan's (``hetsim plan``), made from costs that the run, or a simulation of it,
    may not have. Not registered: its split is a value, not a name. (A plan file's policy name
    is resolved where the file is read: ``policy_class(name)``.)"""
    if not (isinstance(base, type) and issubclass(base, Policy)):
        raise ConfigError("policy", f"give a Policy class (as hetsim.policies.Optimal), not {base!r}")
    traits = {"name": base.name, "weighted_gradients": base.weighted_gradients, "closed_form": base.closed_form}
    cls = type(f"Planned{base.__name__}", (_Planned,), {**traits, "planned": tuple(int(b) for b in split)})
    return cls()


class _Planned(Policy):
    """The base of :func:`planned_policy`'s classes: a fixed split given by a plan."""

    planned: tuple[int, ...] = ()

    def initial_split(self) -> tuple[int, ...]:
        if len(self.planned) != self.n_workers or sum(self.planned) != self.global_batch:
            planned = list(self.planned)
            raise ValueError(f"the plan's split {planned} is not {self.n_workers} ranks' {self.global_batch}")
        return self.planned
