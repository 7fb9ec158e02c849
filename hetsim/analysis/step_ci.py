"""The confidence interval of a run's expected mean step time: what ``analyze`` prints beside
the prediction.

The quantity is the mean step time a run of the scenario has on average over seeds, ``E[sum of
step times / steps]``. Its variance is not ``var(step) / steps``: noise that persists, and async
updates (whose gaps interlock), make step times autocorrelated. Which estimator applies depends
on what is known of the run, asked of the scenario and the policy's traits (:func:`method`):

* **barrier steps of a static split, workers without slowdown episodes or failures**: the step
  series is stationary from the first step (a persistent factor starts stationary), a function
  of every worker's noise, whose logs are independent lag-1 autoregressions with persistence at
  most ``rho`` (:func:`hetsim.model.workers.noise_persistence`). Its autocorrelation at lag k is then
  between 0 and ``rho^k`` (a function of independent Gaussian AR(1) paths: each Hermite term
  decays as a power of ``rho^k``), so ``(1 + rho) / (1 - rho)`` bounds its integrated
  autocorrelation time. :func:`batch_means` cuts the series into consecutive batches of about
  that many steps, at most 30 (Schmeiser 1982: beyond 10-30 batches the t quantile gains little)
  and at least 4, and divides the batch means' sum of squares by its expectation under AR(1)
  correlation ``rho^k`` (exact, not asymptotic: the short batches of a short run are correlated,
  and their mean is estimated), and takes the Student t quantile at that sum of squares'
  Satterthwaite degrees of freedom (``E[Q]^2 / var Q`` for Gaussian steps). With ``rho = 0`` this
  is the plain batch-means interval with ``batches - 1`` degrees of freedom. The steps' own
  autocorrelation decays faster than ``rho^k`` when several workers share the max; batches of one
  correlation time make the interval only mildly wider then, while batches much shorter would
  over-correct and much longer would leave a handful of degrees of freedom;
* **async on workers without episodes or failures** (:func:`async_ci`): the mean step is
  ``T_N / N``, the time of the N-th update over N, and the gaps between updates are strongly
  negatively correlated (a superposition of renewal processes), so batching them leaves each
  batch's ends' phases in its mean and inflates the variance of a short run several-fold.
  Instead, the counts of the renewal processes: worker i's cycles (its gaps between its own
  updates, mean ``mu_i``) sum to its clock, and ``T_N`` moves by ``sum_i dS_i / (mu_i Lambda)``
  (``Lambda = sum_i 1 / mu_i``) when worker i's clock ``S_i`` moves by ``dS_i``. Each worker's
  relative cycle deviations (the members of a ``shared_noise`` group summed by cycle index, since
  their n-th computes share the n-th factor) are a stationary series whose sum's variance
  :func:`batch_means` estimates; the workers (groups) are independent, so the variances add, with
  Satterthwaite's degrees of freedom (on a link the workers share, queueing for it couples
  their cycles, negatively: the interval is then a little wide);
* **anything else** (a policy that ``resplits``, ``varies_batch`` or has ``autocorrelated_steps``
  and a barrier, slowdown episodes, failures): independent replications, :data:`REPLICATIONS`
  runs (the given seed, then seeds drawn from it) and the Student t interval of their means. A
  run of such a policy is a terminating simulation with a transient (the first epoch's split)
  whose split follows its own measurements: the noise of one epoch moves the next epoch's split,
  which covaries with that noise, and one run shows that covariance once per epoch, too rarely
  to estimate; episodes and failures are rare, long events a run sees a few times.

``benchmarks/analyze_coverage.py`` measures the coverage and width of all three.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from hetsim.core.errors import ConfigError
from hetsim.engines import Engine
from hetsim.model.trace import Trace
from hetsim.model.workers import WorkerSpec, noise_persistence
from hetsim.policies import Policy, fresh
from hetsim.run.metrics import MeanCI, Summary, apply_times, mean_ci, step_times, summarize
from hetsim.run.simulate import simulate, simulate_summary
from hetsim.scenario.scenario import Scenario, check_scenario, check_seed

MAX_BATCHES = 30
MIN_BATCHES = 4
REPLICATIONS = 10
BATCH_MEANS, RENEWAL, REPLICATED = "batch means", "renewal", "replications"


def replication_reason(scenario: Scenario, policy: Policy | None) -> str | None:
    """Why one run of ``policy`` on ``scenario`` cannot show the spread of
    its mean step time (the CI then comes from :data:`REPLICATIONS` runs); None where it can."""
    return _reason(scenario, type(check_scenario(scenario).make_policy(policy)))  # a name refused in one line


def _reason(scenario: Scenario, cls: type[Policy]) -> str | None:
    """:func:`replication_reason` for a policy of class ``cls`` already checked against ``scenario``."""
    if any((w.slowdown is not None and w.slowdown.slows) or w.failure is not None for w in scenario.workers):
        return "slowdown episodes or failures: rare, long events, which one run sees a few times"
    if cls.synchronous and (cls.resplits or cls.varies_batch):
        return "its split follows each run's own measurements"
    if cls.synchronous and cls.autocorrelated_steps:
        return "its step times depend on the run's history"
    return None


def method(scenario: Scenario, policy: Policy | None) -> str:
    """Which estimator the CI of ``policy``'s mean step time on ``scenario`` uses (the module's
    docstring says why)."""
    return _method(scenario, type(check_scenario(scenario).make_policy(policy)))


def _method(scenario: Scenario, cls: type[Policy]) -> str:
    """:func:`method` for a policy of class ``cls`` already checked against ``scenario``."""
    if _reason(scenario, cls) is not None:
        return REPLICATED
    return BATCH_MEANS if cls.synchronous else RENEWAL


def ar1_sums(starts: np.ndarray, sizes: np.ndarray, rho: float) -> np.ndarray:
    """``sum_{t in I_j, u in I_l} rho^|t-u|`` for consecutive intervals ``I_j`` (their first
    indices ``starts`` and lengths ``sizes``, in order): the covariances of their sums, in units
    of the steps' variance, for AR(1) correlation ``rho``."""
    m = sizes.astype(float)
    if rho == 0.0:
        return np.diag(m)
    inner = m * (1 + rho) / (1 - rho) - 2 * rho * (1 - rho**m) / (1 - rho) ** 2
    tails = (1 - rho**m) / (1 - rho)  # sum_t rho^(distance to the interval's edge)
    gap = starts[None, :] - (starts + m)[:, None] + 1.0  # for j < l: rho^gap links I_j's last to I_l's first
    cross = np.triu(rho ** np.maximum(gap, 0.0) * np.outer(tails, tails), 1)
    return np.diag(inner) + cross + cross.T


def batch_count(n: int, rho: float) -> int:
    """Batches of about one integrated autocorrelation time ``(1 + rho) / (1 - rho)``, between
    :data:`MIN_BATCHES` and :data:`MAX_BATCHES` (and at most ``n``)."""
    tau = (1.0 + rho) / (1.0 - rho)
    return min(n, MAX_BATCHES, max(MIN_BATCHES, int(n / tau)))


def batch_means(values: Sequence[float] | np.ndarray, rho: float) -> tuple[float, float]:
    """The variance of the mean of a stationary series whose autocorrelation is at most
    ``rho^k``, estimated from its batch means, and its degrees of freedom (module docstring)."""
    x = np.asarray(values, dtype=float)
    n = x.size
    k = batch_count(n, rho)
    if k < 2:
        raise ValueError("a variance of the mean needs at least two values")
    sizes = np.array([len(b) for b in np.array_split(np.arange(n), k)])
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    means = np.add.reduceat(x, starts) / sizes
    q = float(np.sum(sizes * (means - x.mean()) ** 2))
    cov = ar1_sums(starts.astype(float), sizes, rho) / np.outer(sizes, sizes)  # of the batch means
    centre = np.diag(sizes.astype(float)) - np.outer(sizes, sizes) / n  # q = means' centre means
    mc = centre @ cov
    expected = float(np.trace(mc))  # E[q] / var(step)
    of_mean = float(ar1_sums(np.zeros(1), np.array([n]), rho)[0, 0]) / n**2  # var(mean) / var(step)
    return q / expected * of_mean, expected**2 / float(np.trace(mc @ mc))


def interval(mean: float, variance: float, dof: float, level: float) -> MeanCI:
    half = float(stats.t.ppf(0.5 + level / 2.0, dof)) * math.sqrt(max(variance, 0.0))
    return MeanCI(mean, mean - half, mean + half, level)


def barrier_ci(steps: np.ndarray, rho: float, level: float) -> MeanCI:
    """Batch means of the step times (:func:`batch_means`)."""
    variance, dof = batch_means(steps, rho)
    return interval(float(steps.mean()), variance, dof, level)


def _units(workers: Sequence[WorkerSpec]) -> dict[object, list[int]]:
    """Workers whose cycles are independent of the others': each alone, or a shared-noise group."""
    units: dict[object, list[int]] = {}
    for i, w in enumerate(workers):
        key = w.shared_noise.group if w.shares_noise and w.shared_noise is not None else i
        units.setdefault(key, []).append(i)
    return units


def async_ci(trace: Trace, workers: Sequence[WorkerSpec], level: float) -> MeanCI:
    """The renewal estimator of an async run's mean step time ``T_N / N`` (module docstring)."""
    applied = apply_times(trace)
    cycles = {i: np.diff(applied[trace.worker == i], prepend=0.0) for i in range(trace.n_workers)}
    mu = {i: float(c.mean()) for i, c in cycles.items() if c.size > 0}
    rate = sum(1.0 / m for m in mu.values() if m > 0)
    parts = []
    for members in _units(workers).values():
        counted = [i for i in members if cycles[i].size >= 2 and mu[i] > 0]
        if not counted:
            continue  # a worker with fewer than two updates: nothing to estimate from
        series = np.zeros(max(cycles[i].size for i in counted))
        for i in counted:
            series[: cycles[i].size] += cycles[i] / mu[i] - 1.0
        variance, dof = batch_means(series, noise_persistence([workers[i] for i in counted]))
        parts.append((series.size**2 * variance, dof))  # the variance of the unit's summed deviations
    n = trace.n_steps
    mean = float(applied.max()) / n
    total = sum(v for v, _ in parts)
    if total <= 0.0:
        return MeanCI(mean, mean, mean, level)
    dof = total**2 / sum(v * v / d for v, d in parts)
    return interval(mean, total / (rate * n) ** 2, dof, level)


def replication_seeds(seed: int, runs: int = REPLICATIONS) -> list[int]:
    """``seed``, then ``runs - 1`` seeds drawn from it (NumPy's SeedSequence)."""
    return [seed, *(int(s) for s in np.random.SeedSequence(seed).generate_state(runs - 1))]


@dataclass(frozen=True)
class SimulatedMean:
    """A policy's simulated mean step time (over ``runs`` runs) and the ``ci`` of its expected
    value (None from a run of one step), by ``method``; ``summary``: the Summary of the run with
    the given seed (the first of the replications), for what else a caller reads of the run
    (its samples per step, progress and final split: ``hetsim.plan.planner``)."""

    mean_s: float
    ci: MeanCI | None
    runs: int
    method: str
    summary: Summary | None = None


def simulated_mean(scenario: Scenario, policy: Policy | None = None, seed: int | None = None, level: float = 0.95,
                   engine: Engine | None = None) -> SimulatedMean:  # fmt: skip
    """``policy``'s simulated mean step time on ``scenario`` and the ``level`` confidence
    interval of its expected value (:func:`method`): one run with ``seed`` (default: the
    scenario's), or :data:`REPLICATIONS` from it, each run on a copy of ``policy`` (a Policy
    object, or None for the scenario's own); ``engine``: as :func:`~hetsim.run.simulate.simulate`'s."""
    seed = check_seed(seed)
    seed = check_scenario(scenario).seed if seed is None else seed
    policy = scenario.make_policy(policy)  # a name or a misfit refused here, in one line
    if not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ConfigError("level", f"must be in (0, 1), got {level!r}")
    how = _method(scenario, type(policy))
    if how == REPLICATED:
        runs = [simulate_summary(scenario, fresh(policy), seed=s, engine=engine) for s in replication_seeds(seed)]
        ci = mean_ci([r.mean_step_s for r in runs], level)
        return SimulatedMean(ci.mean, ci, len(runs), how, runs[0])
    trace = simulate(scenario, fresh(policy), seed=seed, engine=engine)
    steps = step_times(trace)
    summary = summarize(trace, scenario)
    if steps.size < 2:
        return SimulatedMean(float(steps.mean()), None, 1, how, summary)
    if how == RENEWAL:
        ci = async_ci(trace, scenario.workers, level)
    else:
        ci = barrier_ci(steps, noise_persistence(scenario.workers), level)
    return SimulatedMean(ci.mean, ci, 1, how, summary)
