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

A worker's noise factor may be the product of its own factor and a factor shared by a group
(:class:`SharedNoise`: one draw per step from the group's stream, the same number for every
member), and either may persist (``persistence`` rho: the log of a lognormal factor is a
stationary lag-1 autoregression, :class:`FactorStream`). Both still give one number per step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from scipy import signal

from hetsim.costs import CostModel
from hetsim.distributions import Constant, Distribution
from hetsim.errors import ConfigError
from hetsim.params import FrozenPlugIn, Param

PERSISTENCE = Param(
    "persistence", default=0.0, low=0.0, high=1.0, high_open=True, doc="lag-1 autocorrelation of the log factor"
)
NOISE_PURPOSE, DELAY_PURPOSE, SLOWDOWN_PURPOSE, FAILURE_PURPOSE, SHARED_PURPOSE = range(5)


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
    persistence: float = 0.0  # of the own noise factor (lognormal only)
    shared_noise: SharedNoise | None = None
    node: str | None = None  # the machine it runs on (a network that ``uses_nodes`` needs it)

    def __post_init__(self) -> None:
        object.__setattr__(self, "persistence", check_persistence(self.noise, self.persistence))

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
    def shares_noise(self) -> bool:
        """Whether a factor common to a group multiplies this worker's compute (a constant mean-1
        factor is 1: no sharing)."""
        return self.shared_noise is not None and not self.shared_noise.dist.is_constant

    @property
    def cap(self) -> float:
        return float("inf") if self.max_batch is None else float(self.max_batch)

    def to_dict(self) -> dict[str, Any]:
        affine = self.cost.affine_terms()
        cost = {"cost": self.cost.to_dict()} if affine is None else dict(zip(("overhead_s", "per_sample_s"), affine))
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
        if self.slowdown is not None:
            out["slowdown"] = self.slowdown.to_dict()
        if self.failure is not None:
            out["failure"] = self.failure.to_dict()
        return out


class FactorStream:
    """Mean-1 factors, one per step, from one generator: independent draws of ``dist``, or with
    ``persistence`` rho > 0 (a lognormal of log-sd sigma) the stationary lag-1 autoregression

        log X_t = -sigma^2/2 + Z_t,   Z_t = rho Z_{t-1} + sigma sqrt(1 - rho^2) eps_t,

    eps_t the generator's standard normals, Z_{-1} = sigma times the first of them (so every
    X_t is lognormal(sigma) with mean 1, and corr(Z_t, Z_{t+1}) = rho). ``take(k)`` gives the
    next ``k`` factors, the same numbers however the steps are grouped into calls: the i.i.d.
    draws by the distributions' contract, the recursion because it runs element by element, in
    order (``scipy.signal.lfilter``), from the state the previous call left."""

    def __init__(self, dist: Distribution, rng: np.random.Generator, persistence: float = 0.0) -> None:
        self.dist, self.rng, self.rho = dist, rng, check_persistence(dist, persistence)
        sigma = dist.log_normal_sigma()
        if sigma is not None and self.rho > 0:
            self._mu = -0.5 * sigma * sigma
            self._b = np.array([sigma * math.sqrt(1.0 - persistence * persistence), 0.0])
            self._a = np.array([1.0, -persistence])
            self._state = np.array([persistence * (sigma * float(rng.standard_normal()))])  # rho Z_{-1}

    def take(self, k: int) -> np.ndarray:
        if self.rho == 0:
            return np.asarray(self.dist.sample(self.rng, k), dtype=float)
        log, self._state = signal.lfilter(self._b, self._a, self.rng.standard_normal(k), zi=self._state)
        return np.exp(self._mu + log)


class SharedFactor:
    """A shared-noise group's factors, read by each member at its own pace: every member's n-th
    step gets the group's n-th factor. Keeps only what the slowest member has not read yet."""

    def __init__(self, stream: FactorStream) -> None:
        self.stream = stream
        self.read: list[int] = []  # steps read by each member
        self.first = 0  # the step of ahead[0]
        self.ahead = np.empty(0)

    def join(self) -> int:
        self.read.append(0)
        return len(self.read) - 1

    def take(self, member: int, k: int) -> np.ndarray:
        start = self.read[member]
        missing = start + k - (self.first + len(self.ahead))
        if missing > 0:
            low = min(self.read)  # every member has read the steps before
            self.ahead = np.concatenate([self.ahead[low - self.first :], self.stream.take(missing)])
            self.first = low
        self.read[member] = start + k
        return self.ahead[start - self.first : start + k - self.first]


class NoiseFactors:
    """One worker's noise factors: its own, times its shared group's when it has one."""

    def __init__(self, own: FactorStream, shared: SharedFactor | None) -> None:
        self.own, self.shared = own, shared
        self.member = shared.join() if shared is not None else -1

    def take(self, k: int) -> np.ndarray:
        own = self.own.take(k)
        return own if self.shared is None else own * self.shared.take(self.member, k)


@dataclass
class WorkerStreams:
    """The random streams and timelines of one worker, spawned from its ``SeedSequence``."""

    noise: np.random.Generator
    delay: np.random.Generator
    slowdown: Timeline | None
    failure: Timeline | None
    factors: NoiseFactors  # the noise factors (from ``noise``, and a shared group's stream)

    def noise_factors(self, k: int) -> np.ndarray:
        """The worker's next ``k`` noise factors, one per step."""
        return self.factors.take(k)

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
        """Worker i's stream for purpose j (0 noise, 1 delay, 2 slowdown, 3 failure, 4 shared
        noise) is ``PCG64(SeedSequence(seed, spawn_key=(i, j)))``, made only for the purposes
        the worker has; a slowdown group's shared timeline comes from its first member's stream
        2, a shared-noise group's factors from its first member's stream 4."""

        def rng(i: int, j: int) -> np.random.Generator:
            return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(i, j))))

        streams: list[WorkerStreams] = []
        groups: dict[str, Timeline] = {}
        shared: dict[str, SharedFactor] = {}
        for i, spec in enumerate(workers):
            sn, group = spec.shared_noise, None
            if sn is not None:
                group = shared.get(sn.group)
                if group is None:  # the first member's stream
                    group = SharedFactor(FactorStream(sn.dist, rng(i, SHARED_PURPOSE), sn.persistence))
                    shared[sn.group] = group
            slowdown = None
            if spec.slowdown is not None:
                sd = spec.slowdown
                slowdown = groups.get(sd.group) if sd.group is not None else None
                if slowdown is None:
                    slowdown = Timeline(rng(i, SLOWDOWN_PURPOSE), sd.every_s, sd.duration_s)
                    if sd.group is not None:
                        groups[sd.group] = slowdown
            failure = None
            if spec.failure is not None:
                failure = Timeline(rng(i, FAILURE_PURPOSE), spec.failure.mtbf_s, spec.failure.repair_s)
            noise = rng(i, NOISE_PURPOSE)
            factors = NoiseFactors(FactorStream(spec.noise, noise, spec.persistence), group)
            streams.append(cls(noise, rng(i, DELAY_PURPOSE), slowdown, failure, factors))
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


def cost_groups(workers: Sequence[WorkerSpec]) -> list[tuple[CostModel, np.ndarray]]:
    """The workers' cost models, each once with the indices of the workers that have it (a
    group of identical workers shares one), so costs can be computed a group at a time."""
    groups: dict[CostModel, list[int]] = {}
    for i, w in enumerate(workers):
        groups.setdefault(w.cost, []).append(i)
    return [(model, np.array(idx, dtype=np.int64)) for model, idx in groups.items()]
