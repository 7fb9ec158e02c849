"""The compute-time model of one worker.

    compute = cost(b) * noise * slowdown(t) + delay   (b > 0)
    compute = 0                                       (b = 0: the worker sits the step out)

``cost`` is the worker's cost model (:mod:`hetsim.model.costs`: affine, ``overhead_s + per_sample_s *
b``, unless the scenario names another), ``noise`` a mean-1 multiplicative factor, ``delay`` an
additive injected time (the paper's sleep), ``slowdown(t)`` the factor of a slowdown episode in
force when the compute starts (1 outside episodes). A worker may also fail: while it is down it takes no work.

Noise and delay give one number each per step, whether or not the worker got samples, so the
draws of a step never depend on the split: any two engines (and any two policies) see the same
random numbers (:mod:`hetsim.model.draws` makes them, counter-based, for all workers at once).
Episodes and failures are drawn lazily along the time axis (:class:`Timeline`), from a stream
of the worker's own, in a fixed order, so they too are the same whatever queries them.

A worker's noise factor may be the product of its own factor and a factor shared by a group
(:class:`SharedNoise`: one draw per step, the same number for every member), and either may
persist (``persistence`` rho: the log of a lognormal factor is a stationary lag-1
autoregression). Both still give one number per step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import FrozenPlugIn, Param
from hetsim.model.costs import Affine, CostModel, bad_time
from hetsim.model.distributions import Constant, Distribution

PERSISTENCE = Param(
    "persistence", default=0.0, low=0.0, high=1.0, high_open=True, doc="lag-1 autocorrelation of the log factor"
)
NOISE_PURPOSE, DELAY_PURPOSE, SLOWDOWN_PURPOSE, FAILURE_PURPOSE, SHARED_PURPOSE = range(5)  # streams' first key
H = TypeVar("H", bound=Hashable)


def check_persistence(dist: Distribution, value: Any) -> float:
    """``value`` as a persistence of a factor drawn from ``dist``: in [0, 1), and above 0 only
    for a lognormal factor (the lag-1 autocorrelation of its log). ConfigError on ``persistence``."""
    rho = float(PERSISTENCE.check(value))
    if rho > 0 and dist.log_normal_sigma() is None:
        raise ConfigError("persistence", f"needs a lognormal factor (it persists through its log), got {dist.name}")
    return rho


@dataclass(frozen=True)
class SharedNoise:
    """A mean-1 factor common to the workers naming ``group`` (a busy host): one draw per step
    from the group's own stream, multiplying each member's own noise. ``persistence`` as for a
    worker's own noise. Members must declare the same factor (the scenario factory checks)."""

    group: str
    dist: Distribution
    persistence: float = 0.0

    def __post_init__(self) -> None:
        if not math.isclose(self.dist.mean(), 1.0, rel_tol=1e-6):
            raise ConfigError("", f"a shared factor must have mean 1, this one has mean {self.dist.mean():g}")
        object.__setattr__(self, "persistence", check_persistence(self.dist, self.persistence))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"group": self.group, **self.dist.to_dict()}
        if self.persistence:
            out["persistence"] = self.persistence
        return out


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
        Param("group", "string", default=None, blank=False, doc="workers naming one group share their episodes"),
    )
    every_s: float
    duration_s: float
    factor: float
    group: str | None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.param_values().items() if v is not None}

    @property
    def slows(self) -> bool:
        """Whether an episode changes anything (a factor of 1, a sweep's "none", does not)."""
        return self.factor > 1


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
    persistence: float = 0.0  # of the own noise factor (lognormal only)
    shared_noise: SharedNoise | None = None
    node: str | None = None  # the machine it runs on (a network that ``uses_nodes`` needs it)
    unfitted: str | None = None  # why ``cost`` is a guess, not a fit (calibrate's idle workers)

    def __post_init__(self) -> None:
        object.__setattr__(self, "persistence", check_persistence(self.noise, self.persistence))

    def compute_s(self, local_batch: int, noise: float, delay: float, factor: float = 1.0) -> float:
        """Compute time for ``local_batch`` samples given this step's draws and slowdown factor."""
        if local_batch <= 0:
            return 0.0
        time_s = float(self.cost.time_s(local_batch))
        if not 0 <= time_s < math.inf:  # a plug-in's (the vector engines call check_times)
            raise bad_time(self.name, time_s, local_batch)
        return time_s * noise * factor + delay

    def expected_compute_s(self, local_batch: int | float) -> float:
        if local_batch <= 0:
            return 0.0
        return float(self.cost.time_s(local_batch)) * self.noise.mean() + self.delay.mean()

    @property
    def shares_noise(self) -> bool:
        """Whether a factor common to a group multiplies this worker's compute (a constant mean-1
        factor is 1: no sharing)."""
        return self.shared_noise is not None and not self.shared_noise.dist.is_constant

    @property
    def cap(self) -> float:
        return float("inf") if self.max_batch is None else float(self.max_batch)

    def to_dict(self) -> dict[str, Any]:
        affine = self.cost.affine_terms()  # the keys are the affine model's, not any affine model's: it must load back
        shorthand = affine is not None and self.cost == Affine(*affine)
        cost = dict(zip(("overhead_s", "per_sample_s"), affine or ())) if shorthand else {"cost": self.cost.to_dict()}
        out: dict[str, Any] = {
            "name": self.name,
            **cost,
            "noise": {**self.noise.to_dict(), **({"persistence": self.persistence} if self.persistence else {})},
            "delay": self.delay.to_dict(),
        }
        if self.shared_noise is not None:
            out["shared_noise"] = self.shared_noise.to_dict()
        if self.max_batch is not None:
            out["max_batch"] = self.max_batch
        if self.node is not None:
            out["node"] = self.node
        if self.unfitted is not None:
            out["unfitted"] = self.unfitted
        if self.slowdown is not None:
            out["slowdown"] = self.slowdown.to_dict()
        if self.failure is not None:
            out["failure"] = self.failure.to_dict()
        return out


@dataclass
class WorkerStreams:
    """One worker's slowdown and failure timelines (its per-step draws are in :mod:`hetsim.model.draws`)."""

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
    def spawn(cls, seed: int, workers: Sequence[WorkerSpec]) -> list[WorkerStreams]:
        """Worker i's timeline for purpose p (slowdown episodes, failures) is drawn from
        ``PCG64(SeedSequence(seed, spawn_key=(p, i)))``, made only for the timelines the worker
        has; a slowdown group's members share the timeline of its first member's stream."""

        def rng(p: int, i: int) -> np.random.Generator:
            return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(p, i))))

        calm = cls(None, None)  # shared by every worker without timelines (most of a large cluster)
        streams: list[WorkerStreams] = []
        groups: dict[str, Timeline] = {}
        for i, spec in enumerate(workers):
            if spec.slowdown is None and spec.failure is None:
                streams.append(calm)
                continue
            slowdown = None
            if spec.slowdown is not None:
                sd = spec.slowdown
                slowdown = groups.get(sd.group) if sd.group is not None else None
                if slowdown is None:
                    slowdown = Timeline(rng(SLOWDOWN_PURPOSE, i), sd.every_s, sd.duration_s)
                    if sd.group is not None:
                        groups[sd.group] = slowdown
            failure = None
            if spec.failure is not None:
                failure = Timeline(rng(FAILURE_PURPOSE, i), spec.failure.mtbf_s, spec.failure.repair_s)
            streams.append(cls(slowdown, failure))
        return streams


def noise_persistence(workers: Sequence[WorkerSpec]) -> float:
    """The largest lag-1 persistence of any worker's noise (its own or its shared group's): 0
    when step times are independent from step to step."""
    shared = [w.shared_noise.persistence for w in workers if w.shared_noise is not None]
    return max([w.persistence for w in workers] + shared, default=0.0)


def persistent_noise(workers: Sequence[WorkerSpec]) -> bool:
    """Whether any worker's noise persists from step to step, so that step times are
    autocorrelated (confidence intervals then need batch means)."""
    return noise_persistence(workers) > 0


def index_groups(items: Sequence[H]) -> list[tuple[H, np.ndarray]]:
    """Each distinct item once, with the (increasing) indices where it occurs. Items are grouped
    by identity first, as arrays (the workers of one ``[[workers]]`` entry share their objects,
    and comparing addresses is what keeps this cheap for 100,000 workers), then equal ones merged."""
    addresses = np.fromiter(map(id, items), dtype=np.uint64, count=len(items))
    _, first, inverse = np.unique(addresses, return_index=True, return_inverse=True)
    merged: dict[H, list[int]] = {}
    for k, i in enumerate(first):
        merged.setdefault(items[i], []).append(k)
    return [(item, np.flatnonzero(np.isin(inverse, ks))) for item, ks in merged.items()]


def cost_groups(workers: Sequence[WorkerSpec]) -> list[tuple[CostModel, np.ndarray]]:
    """The workers' cost models, each once with the indices of the workers that have it (a
    group of identical workers shares one), so costs can be computed a group at a time."""
    return index_groups([w.cost for w in workers])
