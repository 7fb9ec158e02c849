"""Closed-form and numerical predictions of what the simulator measures.

This module owns the analytic side of hetsim:

* order statistics of independent, non-identical random times: :func:`expected_max`
  (``int_0^inf 1 - prod_i F_i(t) dt``), :func:`expected_kth` (the k-th smallest, through the
  Poisson-binomial count of finished workers) and the exact inclusion-exclusion formula for
  exponentials, :func:`expected_max_exponential`, as a cross-check;
* :class:`ComputeTime`, the distribution of one worker's step time
  ``(overhead + per_sample * b) * noise + delay``: an exact shift when the delay is constant,
  a numerical convolution (Stieltjes sum over the noise's CDF) when both are random;
* :func:`optimal_partition`, the min-max split of expected affine costs (water-filling with
  caps, see :mod:`hetsim.partition`);
* :func:`predict`, scenario + policy -> the simulator's Summary fields in expectation: for the
  static splits and the DP rule E[max] of the compute times (for DP also its fixed point, the
  per-epoch trajectory of the split obtained by iterating the policy's own update on expected
  times, and the epochs it takes to come within 1%), for backup/K-sync the k-th order
  statistic, for async the renewal rate sum_i 1/(E[X_i] + exchange);

Policies without a closed form (``adaptive``; any policy on workers with slowdown episodes or
failures) raise :class:`NoClosedForm` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from itertools import combinations
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from scipy import integrate, optimize, stats

from hetsim.distributions import Constant, Empirical
from hetsim.errors import ConfigError
from hetsim.partition import balanced_time, split_by_shares, water_fill
from hetsim.policies import POLICIES, StepInfo, StepRecord, make_policy
from hetsim.workers import WorkerSpec

if TYPE_CHECKING:
    from hetsim.config import Scenario

STATIC_POLICIES = ("equal", "proportional", "optimal")
DP_POLICIES = ("dynamic", "dynamic-enhanced")
FIRST_K_POLICIES = ("backup", "ksync")
ASYNC_POLICIES = ("async",)
NO_CLOSED_FORM = {
    "adaptive": "its split follows online estimates of the measured times, so it depends on the random history "
    "of the run",
}
CONVERGENCE_TOL = 0.01
_CONV_GRID = 4001
_TAIL_Q = 1e-13


class TimeDistribution(Protocol):
    def mean(self) -> float: ...

    def var(self) -> float: ...

    def cdf(self, t: Any) -> Any: ...


class NoClosedForm(ValueError):
    """The policy's expected step time has no closed form; ``reason`` says why."""

    def __init__(self, policy: str, reason: str) -> None:
        self.policy, self.reason = policy, reason
        super().__init__(f"no closed form for {policy!r} because {reason}")


# ----------------------------------------------------------------------------- distributions


def _atoms(dist: TimeDistribution) -> np.ndarray | None:
    """The support points of a purely discrete distribution; None for one with a continuous part."""
    if isinstance(dist, Constant):
        return np.array([dist.value])
    if isinstance(dist, Empirical):
        return np.unique(np.asarray(dist.samples, dtype=float))
    if isinstance(dist, ComputeTime):
        return dist.atoms()
    return None


def quantile(dist: TimeDistribution, q: float) -> float:
    """The smallest t >= 0 with F(t) >= q, by bracketing and root finding on the CDF."""
    atoms = _atoms(dist)
    if atoms is not None:
        cum = np.asarray(dist.cdf(atoms), dtype=float)
        return float(atoms[min(int(np.searchsorted(cum, q - 1e-15)), len(atoms) - 1)])
    if float(dist.cdf(0.0)) >= q:
        return 0.0
    hi = max(dist.mean(), 1e-12)
    while float(dist.cdf(hi)) < q:
        hi *= 2.0
    return float(optimize.brentq(lambda t: float(dist.cdf(t)) - q, 0.0, hi, xtol=1e-15 + 1e-13 * hi))


class ComputeTime:
    """One worker's compute time for a positive local batch: ``scale * noise + delay`` with
    ``scale = overhead_s + per_sample_s * b``.

    Exact when either part is constant (a shift or a scaling of the other's CDF) or discrete (a
    finite mixture of those). When both are continuous the CDF is the convolution ``F(t) = E_N[F_D(t - scale N)]``, computed as a midpoint
    Stieltjes sum over a fine grid of the noise's CDF, from its 1e-13 quantile up to where
    ``t - scale N`` reaches the delay's lowest value (so the kink there is a grid end; error
    about 1e-8 in the CDF, far below any simulation's sampling error).
    """

    def __init__(self, scale_s: float, noise: TimeDistribution, delay: TimeDistribution) -> None:
        if scale_s < 0:
            raise ValueError(f"scale must be >= 0, got {scale_s}")
        self.scale_s, self.noise, self.delay = float(scale_s), noise, delay
        self._noise_atoms = _atoms(noise) if scale_s > 0 else np.array([0.0])
        self._delay_atoms = _atoms(delay)
        self._grid: tuple[np.ndarray, np.ndarray] | None = None  # noise range, delay's lowest value

    @classmethod
    def of(cls, spec: WorkerSpec, local_batch: float) -> "ComputeTime":
        return cls(spec.overhead_s + spec.per_sample_s * local_batch, spec.noise, spec.delay)

    def mean(self) -> float:
        return self.scale_s * self.noise.mean() + self.delay.mean()

    def var(self) -> float:
        return self.scale_s**2 * self.noise.var() + self.delay.var()

    def atoms(self) -> np.ndarray | None:
        if self._noise_atoms is None or self._delay_atoms is None:
            return None
        return np.unique(np.add.outer(self.scale_s * self._noise_atoms, self._delay_atoms).ravel())

    def cdf(self, t: Any) -> Any:
        t = np.asarray(t, dtype=float)
        if self._noise_atoms is not None and self._noise_atoms.size == 1:
            return self.delay.cdf(t - self.scale_s * self._noise_atoms[0])
        if self._delay_atoms is not None and self._delay_atoms.size == 1:
            return self.noise.cdf((t - self._delay_atoms[0]) / self.scale_s)
        if self._noise_atoms is not None:
            weights = np.diff(np.concatenate([[0.0], np.asarray(self.noise.cdf(self._noise_atoms), dtype=float)]))
            return np.tensordot(self.delay.cdf(t[..., None] - self.scale_s * self._noise_atoms), weights, axes=1)
        if self._delay_atoms is not None:
            weights = np.diff(np.concatenate([[0.0], np.asarray(self.delay.cdf(self._delay_atoms), dtype=float)]))
            return np.tensordot(self.noise.cdf((t[..., None] - self._delay_atoms) / self.scale_s), weights, axes=1)
        return self._convolve(t)

    def _convolve(self, t: np.ndarray) -> np.ndarray:
        """E_N[F_D(t - scale N)] over the noise values with t - scale N above the delay's lowest
        value (beyond, F_D is 0): a midpoint Stieltjes sum on a grid ending at that kink."""
        if self._grid is None:
            self._grid = (
                np.array([quantile(self.noise, _TAIL_Q), quantile(self.noise, 1.0 - _TAIL_Q)]),
                np.array([quantile(self.delay, _TAIL_Q)]),
            )
        (lo, hi), (delay_lo,) = self._grid
        top = np.clip((t - delay_lo) / self.scale_s, lo, hi)[..., None]
        edges = lo + (top - lo) * np.linspace(0.0, 1.0, _CONV_GRID)
        cum = np.asarray(self.noise.cdf(edges), dtype=float)
        cum[..., 0] = 0.0  # the tails beyond the grid go to its end cells, so the mass is 1
        cum[..., -1] = np.where(top[..., 0] >= hi, 1.0, cum[..., -1])
        mids = 0.5 * (edges[..., 1:] + edges[..., :-1])
        return np.sum(self.delay.cdf(t[..., None] - self.scale_s * mids) * np.diff(cum, axis=-1), axis=-1)


# ----------------------------------------------------------------------------- order statistics


def _integrate_survival(survival: Callable[[np.ndarray], np.ndarray], dists: Sequence[TimeDistribution]) -> float:
    """int_0^inf survival(t) dt for a survival function built from ``dists``' CDFs."""
    atoms = [_atoms(d) for d in dists]
    if all(a is not None for a in atoms):  # piecewise constant: an exact sum
        points = np.unique(np.concatenate([[0.0], *atoms]))
        return float(np.sum(np.diff(points) * survival(points[:-1])))
    hi = max(d.mean() + 12.0 * math.sqrt(max(d.var(), 0.0)) for d in dists)
    hi = max(hi, 1e-12)
    jumps = np.unique(np.concatenate([a for a in atoms if a is not None] or [np.empty(0)]))
    jumps = jumps[(jumps > 0) & (jumps < hi)]
    scalar = lambda t: float(survival(np.asarray(t, dtype=float)))  # noqa: E731
    opts: dict[str, Any] = {"epsabs": 1e-13 * hi, "epsrel": 1e-9, "limit": 1000}
    if jumps.size:
        body = 0.0
        for a, b in zip(np.concatenate([[0.0], jumps]), np.concatenate([jumps, [hi]])):
            body += integrate.quad(scalar, a, b, **opts)[0]
    else:
        body = integrate.quad(scalar, 0.0, hi, **opts)[0]
    tail = integrate.quad(scalar, hi, np.inf, epsabs=1e-10 * hi, epsrel=1e-8, limit=200)[0]
    return float(body + tail)


def _cdf_matrix(dists: Sequence[TimeDistribution], t: np.ndarray) -> np.ndarray:
    return np.stack([np.clip(np.asarray(d.cdf(t), dtype=float), 0.0, 1.0) for d in dists])


def max_cdf(dists: Sequence[TimeDistribution], t: Any) -> Any:
    """P(max_i X_i <= t) = prod_i F_i(t) for independent X_i."""
    return np.prod(_cdf_matrix(dists, np.asarray(t, dtype=float)), axis=0)


def expected_max(dists: Sequence[TimeDistribution]) -> float:
    """E[max_i X_i] for independent non-negative times: int_0^inf (1 - prod_i F_i(t)) dt."""
    if not dists:
        return 0.0
    return _integrate_survival(lambda t: 1.0 - max_cdf(dists, t), dists)


def expected_max_exponential(rates: Sequence[float]) -> float:
    """E[max] of independent exponentials with the given rates, by inclusion-exclusion:
    sum over non-empty subsets S of (-1)^(|S|+1) / sum_{i in S} rate_i. Exact; 2^n terms."""
    rates = [float(r) for r in rates]
    if any(r <= 0 for r in rates):
        raise ValueError("rates must be positive")
    if len(rates) > 20:
        raise ValueError(f"inclusion-exclusion over {len(rates)} rates needs 2^{len(rates)} terms; use expected_max")
    return math.fsum(
        (-1) ** (size + 1) / math.fsum(subset) for size in range(1, len(rates) + 1) for subset in combinations(rates, size)
    )


def kth_cdf(dists: Sequence[TimeDistribution], k: int, t: Any) -> Any:
    """P(X_(k) <= t): at least k of the independent X_i have finished by t (Poisson-binomial)."""
    t = np.atleast_1d(np.asarray(t, dtype=float))
    p = _cdf_matrix(dists, t)  # (n, T)
    pmf = np.zeros((len(dists) + 1, t.size))
    pmf[0] = 1.0
    for row in p:  # the count of finished workers, one worker at a time
        pmf[1:] = pmf[1:] * (1.0 - row) + pmf[:-1] * row
        pmf[0] *= 1.0 - row
    return pmf[k:].sum(axis=0)


def expected_kth(dists: Sequence[TimeDistribution], k: int) -> float:
    """E[X_(k)], the k-th smallest (1-based) of independent, non-identical times:
    int_0^inf P(fewer than k finished by t) dt."""
    n = len(dists)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}, got {k}")
    return _integrate_survival(lambda t: 1.0 - kth_cdf(dists, k, t).reshape(np.shape(t)), dists)


# ----------------------------------------------------------------------------- partitions


def optimal_partition(workers: Sequence[WorkerSpec], global_batch: int) -> tuple[int, ...]:
    """The integer split minimising the largest expected compute time ``a_i + c_i b_i``
    (a worker whose fixed cost alone exceeds the balanced time gets nothing), within caps."""
    return water_fill(
        [w.expected_fixed_s for w in workers], [w.expected_per_sample_s for w in workers], global_batch, [w.cap for w in workers]
    )


def balanced_shares(workers: Sequence[WorkerSpec], global_batch: int) -> tuple[float, ...]:
    """The continuous split where every worker with samples has the same expected compute time
    (the fixed point of the DP rule; capped workers hold their cap)."""
    fixed = [w.expected_fixed_s for w in workers]
    per = [w.expected_per_sample_s for w in workers]
    caps = [w.cap for w in workers]
    t_star = balanced_time(fixed, per, global_batch, caps)
    b = np.minimum(np.maximum((t_star - np.asarray(fixed)) / np.asarray(per), 0.0), np.asarray(caps))
    return tuple(float(x) for x in b / b.sum())


# ----------------------------------------------------------------------------- predictions


@dataclass(frozen=True)
class Prediction:
    """Expected values of the :class:`~hetsim.metrics.Summary` fields (same names), plus what
    only the analysis knows. ``mean_step_s`` is over the whole run (for ``dynamic`` it includes
    the epochs before convergence, as the simulator's does); ``steady_step_s`` is at the final
    split. ``trajectory`` is the split of every epoch."""

    policy: str
    steps: int
    epochs: int
    total_time_s: float = field(init=False)  # steps x mean_step_s
    mean_step_s: float
    p95_step_s: float
    throughput_sps: float
    utilization: tuple[float, ...]
    mean_utilization: float = field(init=False)  # the mean of utilization
    idle_fraction: float
    final_batches: tuple[int, ...]
    steady_step_s: float
    allreduce_s: float
    fixed_point_shares: tuple[float, ...] | None = None
    fixed_point_batches: tuple[int, ...] | None = None
    trajectory: tuple[tuple[int, ...], ...] = field(default=(), repr=False)
    epochs_to_1pct: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_time_s", self.mean_step_s * self.steps)
        object.__setattr__(self, "mean_utilization", float(np.mean(self.utilization)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: tuples as lists, NaN (not predicted) as None."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = [list(v) if isinstance(v, tuple) else v for v in value]
            elif isinstance(value, float) and math.isnan(value):
                out[key] = None
        return out


def step_components(workers: Sequence[WorkerSpec], batches: Sequence[int]) -> list[ComputeTime]:
    """The compute-time distributions of the workers that got samples (the others sit out)."""
    return [ComputeTime.of(w, b) for w, b in zip(workers, batches) if b > 0]


@lru_cache(maxsize=4096)
def _barrier_stats(workers: tuple[WorkerSpec, ...], batches: tuple[int, ...]) -> tuple[float, tuple[float, ...]]:
    """E[max compute] and each worker's E[compute] for one split."""
    comps = step_components(workers, batches)
    means = tuple(ComputeTime.of(w, b).mean() if b > 0 else 0.0 for w, b in zip(workers, batches))
    return expected_max(comps), means


def _check_closed_form(scenario: "Scenario", policy: str) -> None:
    if policy in NO_CLOSED_FORM:
        raise NoClosedForm(policy, NO_CLOSED_FORM[policy])
    if policy not in POLICIES:
        raise ConfigError("policy", f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    if policy not in STATIC_POLICIES + DP_POLICIES + FIRST_K_POLICIES + ASYNC_POLICIES:
        raise NoClosedForm(policy, "hetsim.analytic has no model of it")
    for i, w in enumerate(scenario.workers):
        if getattr(w, "slowdown", None) is not None:
            raise NoClosedForm(policy, f"worker {i} has slowdown episodes, which make the step times time-dependent")
        if getattr(w, "failure", None) is not None:
            raise NoClosedForm(policy, f"worker {i} fails and is repaired, which makes the step times time-dependent")


def predict(scenario: "Scenario", policy: str | None = None, params: Mapping[str, Any] | None = None) -> Prediction:
    """Expected Summary fields of ``policy`` (default: the scenario's) on ``scenario``.

    The step time of a split ``b`` is ``E[max_{i: b_i > 0} X_i] + allreduce``. Static policies
    are asked for their split through their own ``reset``/``partition``; the DP rule is iterated
    on expected times through the policy's own ``observe``, one epoch per iteration.
    """
    name = scenario.policy.name if policy is None else policy
    _check_closed_form(scenario, name)
    kwargs = dict(scenario.policy.params) if name == scenario.policy.name else {}
    obj = make_policy(name, {**kwargs, **dict(params or {})})
    workers = scenario.workers
    wl = scenario.workload
    n = len(workers)
    obj.reset(n, wl.global_batch, scenario.hints())
    if name in FIRST_K_POLICIES:
        return _predict_first_k(scenario, name, tuple(obj.partition(StepInfo(0, 0, 0, wl.steps_per_epoch))), obj.wait_for())
    if name in ASYNC_POLICIES:
        return _predict_async(scenario, name, tuple(obj.partition(StepInfo(0, 0, 0, wl.steps_per_epoch))))
    if name in STATIC_POLICIES:
        batches = tuple(obj.partition(StepInfo(0, 0, 0, wl.steps_per_epoch)))
        trajectory: tuple[tuple[int, ...], ...] = (batches,) * wl.epochs
        extra: dict[str, Any] = {}
    else:
        trajectory, shares = _iterate_dp(obj, workers, wl.epochs)
        fixed = balanced_shares(workers, wl.global_batch)
        extra = {
            "fixed_point_shares": fixed,
            "fixed_point_batches": _split(fixed, wl.global_batch, workers),
            "epochs_to_1pct": _epochs_to_within(shares, fixed, CONVERGENCE_TOL),
        }
    return _summarize(scenario, name, trajectory, extra)


def _split(shares: Sequence[float], total: int, workers: Sequence[WorkerSpec]) -> tuple[int, ...]:
    return split_by_shares(shares, total, [w.cap for w in workers])


def _iterate_dp(policy: Any, workers: Sequence[WorkerSpec], epochs: int) -> tuple[tuple[tuple[int, ...], ...], list[np.ndarray]]:
    """Drive the policy's own per-epoch update with expected compute times: the split of every
    epoch, and the shares that produced it."""
    trajectory, shares = [], []
    for epoch in range(epochs):
        info = StepInfo(epoch, epoch, 0, 1)
        batches = tuple(policy.partition(info))
        trajectory.append(batches)
        shares.append(np.asarray(getattr(policy, "shares", np.asarray(batches) / sum(batches)), dtype=float).copy())
        times = tuple(ComputeTime.of(w, b).mean() if b > 0 else 0.0 for w, b in zip(workers, batches))
        policy.observe(StepRecord(info, batches, times, tuple(b > 0 for b in batches)))
    return tuple(trajectory), shares


def _epochs_to_within(shares: Sequence[np.ndarray], fixed: Sequence[float], tol: float) -> int | None:
    """The first epoch from which on every worker's share is within ``tol`` of its fixed-point
    share (absolute: ``tol = 0.01`` is 1% of the global batch; a relative test would never pass
    for small shares, which integer rounding keeps moving by a sample); None if never."""
    target = np.asarray(fixed)
    close = [bool(np.all(np.abs(s - target) <= tol)) for s in shares]
    for epoch in range(len(close)):
        if all(close[epoch:]):
            return epoch
    return None


def _summarize(scenario: "Scenario", name: str, trajectory: Sequence[tuple[int, ...]], extra: dict[str, Any]) -> Prediction:
    workers = tuple(scenario.workers)
    wl = scenario.workload
    n = len(workers)
    comm = scenario.allreduce_s()
    splits: dict[tuple[int, ...], int] = {}
    for batches in trajectory:
        splits[batches] = splits.get(batches, 0) + 1
    weights = np.array(list(splits.values()), dtype=float) / len(trajectory)
    stats_ = [_barrier_stats(workers, b) for b in splits]
    barrier = np.array([s[0] for s in stats_])
    compute = np.array([s[1] for s in stats_])  # (splits, workers)
    mean_step = float(weights @ barrier) + comm
    mean_compute = weights @ compute
    idle = float(weights @ (n * barrier - compute.sum(axis=1)))
    steady = _barrier_stats(workers, tuple(trajectory[-1]))[0] + comm
    p95 = _mixture_quantile([step_components(workers, b) for b in splits], weights, 0.95) + comm
    util = tuple(float(u) for u in mean_compute / mean_step) if mean_step > 0 else (0.0,) * n
    return Prediction(
        policy=name,
        steps=wl.total_steps,
        epochs=wl.epochs,
        mean_step_s=mean_step,
        p95_step_s=p95,
        throughput_sps=wl.global_batch / mean_step if mean_step > 0 else math.inf,
        utilization=util,
        idle_fraction=idle / (n * mean_step) if mean_step > 0 else 0.0,
        final_batches=tuple(int(b) for b in trajectory[-1]),
        steady_step_s=steady,
        allreduce_s=comm,
        trajectory=tuple(trajectory),
        **extra,
    )


def _mixture_quantile(groups: Sequence[Sequence[TimeDistribution]], weights: np.ndarray, q: float) -> float:
    """The q-quantile of the barrier time when a share ``weights[j]`` of the steps uses split j."""
    cdf = lambda t: float(sum(w * float(max_cdf(g, t)) for g, w in zip(groups, weights)))  # noqa: E731
    dists = [d for g in groups for d in g]
    atoms = [_atoms(d) for d in dists]
    if all(a is not None for a in atoms):
        points = np.unique(np.concatenate(atoms))
        cum = np.array([cdf(t) for t in points])
        return float(points[min(int(np.searchsorted(cum, q - 1e-12)), len(points) - 1)])
    hi = max(max(d.mean() for d in dists), 1e-12)
    while cdf(hi) < q:
        hi *= 2.0
    return float(optimize.brentq(lambda t: cdf(t) - q, 0.0, hi, xtol=1e-12 * hi))


def _worker_times(workers: Sequence[WorkerSpec], batches: Sequence[int]) -> list[TimeDistribution]:
    """Every worker's compute time, 0 for one that sits the step out (it reports at once)."""
    return [ComputeTime.of(w, b) if b > 0 else Constant(0.0) for w, b in zip(workers, batches)]


def _fewer_than(dists: Sequence[TimeDistribution], k: int, t: Any) -> Any:
    """P(fewer than k of ``dists`` have finished by t)."""
    if k > len(dists):
        return np.ones_like(np.asarray(t, dtype=float))
    return 1.0 - kth_cdf(dists, k, t).reshape(np.shape(t))


def _predict_first_k(scenario: "Scenario", name: str, batches: tuple[int, ...], k: int) -> Prediction:
    """backup / K-sync: the step ends at the k-th order statistic X_(k); worker i computes for
    min(X_i, X_(k)) (cancelled after) and its samples count when it is among the first k. The
    inclusion probability P(X_i <= k-th smallest of the others) is a Stieltjes sum on a fine
    grid of F_i; everything else is an integral of products of CDFs."""
    workers = scenario.workers
    wl = scenario.workload
    n = len(workers)
    comm = scenario.allreduce_s()
    dists = _worker_times(workers, batches)
    barrier = expected_kth(dists, k)
    busy, included = [], []
    grid = np.linspace(0.0, quantile(_MaxOf(dists), 1.0 - _TAIL_Q), 20_001)
    for i, d in enumerate(dists):
        others = dists[:i] + dists[i + 1 :]
        if batches[i] == 0:
            busy.append(0.0)
            included.append(0.0)
            continue
        busy.append(_integrate_survival(lambda t, d=d, o=others: (1.0 - d.cdf(t)) * _fewer_than(o, k, t), dists))
        mass = np.diff(np.concatenate([[0.0], np.asarray(d.cdf(grid), dtype=float)]))
        mids = np.concatenate([[0.0], 0.5 * (grid[1:] + grid[:-1])])
        included.append(float(np.sum(mass * _fewer_than(others, k, mids))))
    mean_step = barrier + comm
    p95 = quantile(_KthOf(dists, k), 0.95) + comm
    util = tuple(b / mean_step for b in busy)
    return Prediction(
        policy=name,
        steps=wl.total_steps,
        epochs=wl.epochs,
        mean_step_s=mean_step,
        p95_step_s=p95,
        throughput_sps=float(np.dot(batches, included)) / mean_step,
        utilization=util,
        idle_fraction=float(n * barrier - sum(busy)) / (n * mean_step),
        final_batches=batches,
        steady_step_s=mean_step,
        allreduce_s=comm,
        trajectory=(batches,) * wl.epochs,
    )


def _predict_async(scenario: "Scenario", name: str, batches: tuple[int, ...]) -> Prediction:
    """async: worker i renews every E[X_i] + exchange seconds, so updates arrive at the rate
    sum_i 1/(E[X_i] + exchange) (renewal-reward theorem; the exchange is the network's cost for
    two parties). ``mean_step_s`` is the mean time between updates. The distribution of that
    time (a superposition of renewal processes) has no closed form: ``p95_step_s`` is NaN."""
    workers = scenario.workers
    wl = scenario.workload
    exchange = scenario.network.allreduce_s(2, wl.gradient_mb)
    means = np.array([ComputeTime.of(w, b).mean() for w, b in zip(workers, batches)])
    rates = 1.0 / (means + exchange)
    interval = 1.0 / float(rates.sum())
    updates = wl.total_steps * len(workers)
    util = tuple(float(u) for u in means * rates)
    return Prediction(
        policy=name,
        steps=updates,
        epochs=wl.epochs,
        mean_step_s=interval,
        p95_step_s=math.nan,
        throughput_sps=float(np.dot(batches, rates)),
        utilization=util,
        idle_fraction=0.0,
        final_batches=batches,
        steady_step_s=interval,
        allreduce_s=exchange,
        trajectory=(batches,) * wl.epochs,
    )


class _MaxOf:
    """The distribution of max_i X_i (for quantiles)."""

    def __init__(self, dists: Sequence[TimeDistribution]) -> None:
        self.dists = list(dists)

    def mean(self) -> float:
        return max(d.mean() for d in self.dists)

    def var(self) -> float:
        return max(d.var() for d in self.dists)

    def cdf(self, t: Any) -> Any:
        return max_cdf(self.dists, t)


class _KthOf(_MaxOf):
    def __init__(self, dists: Sequence[TimeDistribution], k: int) -> None:
        super().__init__(dists)
        self.k = k

    def cdf(self, t: Any) -> Any:
        return kth_cdf(self.dists, self.k, t).reshape(np.shape(t))


# ----------------------------------------------------------------------------- statistics


