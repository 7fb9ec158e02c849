"""The compute-time model of one worker.

    compute = cost(b) * noise * slowdown(t) + delay   (b > 0)
    compute = 0                                       (b = 0: the worker sits the step out)

``cost`` is the worker's cost model (:mod:`hetsim.costs`: affine, ``overhead_s + per_sample_s *
b``, unless the scenario names another), ``noise`` a mean-1 multiplicative factor, ``delay`` an
additive injected time (the paper's sleep), ``slowdown(t)`` the factor of a slowdown episode in
force when the compute starts (1 outside episodes). A worker may also fail: while it is down it takes no work.

Each worker draws from streams of its own, one per purpose (noise, delay, slowdown episodes,
failures). Noise and delay give one number each per step, whether or not the worker got
samples, so the draws of a step never depend on the split: any two engines (and any two
policies) see the same random numbers. Episodes and failures are drawn lazily along the time
axis (:class:`Timeline`), in a fixed order, so they too are the same whatever queries them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from hetsim.costs import CostModel
from hetsim.distributions import Constant, Distribution
from hetsim.params import FrozenPlugIn, Param


class Slowdown(FrozenPlugIn):
    """Episodes that multiply compute time by ``factor``. The gap from the end of one episode
    (or from time 0) to the start of the next is exponential with mean ``every_s``, and an
    episode lasts an exponential time with mean ``duration_s``, so a worker is slowed a share
    ``duration_s / (every_s + duration_s)`` of the time. Workers naming the same ``group``
    share one sequence of episodes (a busy host)."""

    name: ClassVar[str] = "slowdown"
    params = (
        Param("every_s", low=0.0, low_open=True, doc="mean gap between episodes (end to start)"),
        Param("duration_s", low=0.0, low_open=True, doc="mean length of an episode"),
        Param("factor", low=1.0, doc="compute time multiplier during an episode"),
        Param("group", "string", default=None, doc="workers naming one group share their episodes"),
    )
    every_s: float
    duration_s: float
    factor: float
    group: str | None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.param_values().items() if v is not None}


class Failure(FrozenPlugIn):
    """Up times are exponential with mean ``mtbf_s``, repairs exponential with mean ``repair_s``."""

    name: ClassVar[str] = "failure"
    params = (
        Param("mtbf_s", low=0.0, low_open=True, doc="mean time between failures (up time)"),
        Param("repair_s", low=0.0, low_open=True, doc="mean repair time"),
    )
    mtbf_s: float
    repair_s: float

    def to_dict(self) -> dict[str, Any]:
        return self.param_values()


class Timeline:
    """Alternating off/on periods along the time axis, drawn lazily from one stream.

    Off periods (normal operation) are Exp(``off_mean_s``), on periods (an episode, a failure)
    Exp(``on_mean_s``), drawn in that order, so the timeline is the same however it is queried.
    """

    def __init__(self, rng: np.random.Generator, off_mean_s: float, on_mean_s: float) -> None:
        self._rng, self._off, self._on = rng, off_mean_s, on_mean_s
        self.changes: list[float] = []  # start of on-period 1, its end, start of on-period 2, ...

    def _extend(self, t: float) -> None:
        last = self.changes[-1] if self.changes else 0.0
        while last <= t:
            start = last + self._rng.exponential(self._off)
            last = start + self._rng.exponential(self._on)
            self.changes += [start, last]

    def active(self, t: float) -> bool:
        """Whether ``t`` lies inside an on-period."""
        self._extend(t)
        return bisect.bisect_right(self.changes, t) % 2 == 1

    def next_change(self, t: float) -> float:
        """The first change of state after ``t``."""
        self._extend(t)
        return self.changes[bisect.bisect_right(self.changes, t)]


@dataclass(frozen=True)
class WorkerSpec:
    """One worker (a ``[[workers]]`` entry with ``count = 1``)."""

    name: str
    cost: CostModel
    noise: Distribution = field(default_factory=lambda: Constant(1.0))
    delay: Distribution = field(default_factory=lambda: Constant(0.0))
    max_batch: int | None = None
    slowdown: Slowdown | None = None
    failure: Failure | None = None

    def compute_s(self, local_batch: int, noise: float, delay: float, factor: float = 1.0) -> float:
        """Compute time for ``local_batch`` samples given this step's draws and slowdown factor."""
        if local_batch <= 0:
            return 0.0
        return float(self.cost.time_s(local_batch)) * noise * factor + delay

    def expected_compute_s(self, local_batch: int | float) -> float:
        if local_batch <= 0:
            return 0.0
        return float(self.cost.time_s(local_batch)) * self.noise.mean() + self.delay.mean()

    @property
    def cap(self) -> float:
        return float("inf") if self.max_batch is None else float(self.max_batch)

    def to_dict(self) -> dict[str, Any]:
        affine = self.cost.affine_terms()
        cost = {"cost": self.cost.to_dict()} if affine is None else dict(zip(("overhead_s", "per_sample_s"), affine))
        out: dict[str, Any] = {
            "name": self.name,
            **cost,
            "noise": self.noise.to_dict(),
            "delay": self.delay.to_dict(),
        }
        if self.max_batch is not None:
            out["max_batch"] = self.max_batch
        if self.slowdown is not None:
            out["slowdown"] = self.slowdown.to_dict()
        if self.failure is not None:
            out["failure"] = self.failure.to_dict()
        return out


@dataclass
class WorkerStreams:
    """The random streams and timelines of one worker, spawned from its ``SeedSequence``."""

    noise: np.random.Generator
    delay: np.random.Generator
    slowdown: Timeline | None
    failure: Timeline | None

    def factor_at(self, spec: WorkerSpec, t: float) -> float:
        if spec.slowdown is None or self.slowdown is None or not self.slowdown.active(t):
            return 1.0
        return spec.slowdown.factor

    def down_at(self, t: float) -> bool:
        return self.failure is not None and self.failure.active(t)

    def repaired_at(self, t: float) -> float:
        """When the worker, down at ``t``, comes back up."""
        if self.failure is None:
            raise ValueError("a worker that never fails is never repaired")
        return self.failure.next_change(t)

    @classmethod
    def spawn(cls, seed: int, workers: tuple[WorkerSpec, ...] | list[WorkerSpec]) -> list[WorkerStreams]:
        """Worker i's stream for purpose j (0 noise, 1 delay, 2 slowdown, 3 failure) is the
        child ``SeedSequence(seed).spawn(n)[i].spawn(4)[j]``, built directly from its spawn key
        ``(i, j)`` and only for the purposes the worker has; a slowdown group's shared timeline
        comes from its first member's stream."""

        def rng(i: int, j: int) -> np.random.Generator:
            return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(i, j))))

        streams: list[WorkerStreams] = []
        groups: dict[str, Timeline] = {}
        for i, spec in enumerate(workers):
            slowdown = None
            if spec.slowdown is not None:
                sd = spec.slowdown
                slowdown = groups.get(sd.group) if sd.group is not None else None
                if slowdown is None:
                    slowdown = Timeline(rng(i, 2), sd.every_s, sd.duration_s)
                    if sd.group is not None:
                        groups[sd.group] = slowdown
            failure = None
            if spec.failure is not None:
                failure = Timeline(rng(i, 3), spec.failure.mtbf_s, spec.failure.repair_s)
            streams.append(cls(rng(i, 0), rng(i, 1), slowdown, failure))
        return streams


def cost_groups(workers: Sequence[WorkerSpec]) -> list[tuple[CostModel, np.ndarray]]:
    """The workers' cost models, each once with the indices of the workers that have it (a
    group of identical workers shares one), so costs can be computed a group at a time."""
    groups: dict[CostModel, list[int]] = {}
    for i, w in enumerate(workers):
        groups.setdefault(w.cost, []).append(i)
    return [(model, np.array(idx, dtype=np.int64)) for model, idx in groups.items()]
