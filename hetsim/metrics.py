"""Trace -> Summary: the flat record of one run (pure functions, no I/O).

Step time is measured from one step's start to the next's (barrier wait plus all-reduce), so
``sum(step times) == total_time_s``; for async it is the time between two applied updates.
Utilization of a worker is its compute time over the wall time; ``idle_fraction`` is the share
of worker-time spent waiting at barriers (or down, for async).

Straggler and adaptivity metrics:

* ``dropped_samples``: samples computed (or assigned) but not in the update (backup, ksync);
* ``staleness_mean`` / ``staleness_p95``: for async, updates applied between a worker's read
  of the model and the application of its gradient (None for barrier policies);
* ``split_changes``: samples moved between workers per step, on average (``sum_i |Δb_i| / 2``):
  large values under steady conditions mean the policy chases noise;
* ``recovery_steps``: after each slowdown episode begins, the steps until the split in use is
  within 5% of the optimal split for the new speeds (and the workers then up), judged on
  expected (noise-free) times,
  averaged over onsets; an onset not recovered from before conditions change again counts the
  steps it lasted (a lower bound). None without onsets or without the scenario.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from hetsim.efficiency import Efficiency, effective_batches, staleness_discount
from hetsim.partition import min_max_split, slowest_expected_s
from hetsim.policies import policy_class
from hetsim.policies.base import WorkerHint
from hetsim.registry import POLICIES
from hetsim.trace import Trace

if TYPE_CHECKING:
    from hetsim.scenario import Scenario


BASELINE = "equal"  # the policy every speedup is measured against (``speedup_vs_equal``)


@dataclass(frozen=True)
class Summary:
    policy: str
    steps: int
    epochs: int
    total_time_s: float
    mean_step_s: float
    p95_step_s: float
    throughput_sps: float
    utilization: tuple[float, ...]
    mean_utilization: float
    idle_fraction: float
    final_batches: tuple[int, ...]
    speedup_vs_equal: float | None = None
    dropped_samples: int = 0
    staleness_mean: float | None = None
    staleness_p95: float | None = None
    split_changes: float = 0.0
    recovery_steps: float | None = None
    progress: float | None = None  # steps at the workload's base batch (None: no [workload.efficiency])
    statistical_efficiency: float | None = None
    goodput_sps: float | None = None
    time_to_target_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["utilization"] = list(self.utilization)
        out["final_batches"] = list(self.final_batches)
        return out


def step_times(trace: Trace) -> np.ndarray:
    """Duration of every step: until the barrier released (any waited-for worker's compute plus
    idle time), plus the all-reduce. For async: the gaps between applied updates."""
    if not trace.synchronous:
        return np.diff(apply_times(trace), prepend=0.0)
    barrier = (trace.per_step("compute_s") + trace.per_step("wait_s")).min(axis=1)
    return barrier + trace.per_step("comm_s")[:, 0]


def apply_times(trace: Trace) -> np.ndarray:
    """Async: when each update was applied (rows are in that order)."""
    return trace.start_s + trace.wait_s + trace.compute_s + trace.comm_s


def staleness(trace: Trace) -> np.ndarray:
    """Async: per update, the updates applied after its worker read the model (at the start of
    its iteration) and before it was applied."""
    applied = apply_times(trace)
    read = trace.start_s + 1e-9 * np.maximum(
        trace.start_s, 1.0
    )  # a read right after an update sees it, despite rounding
    return np.arange(len(applied)) - np.searchsorted(applied, read, side="right")


def summarize(trace: Trace, scenario: Scenario | None = None) -> Summary:
    """The Summary of one run; ``scenario`` (its true costs) enables ``recovery_steps``."""
    if trace.n_steps == 0:
        raise ValueError("an empty trace has no summary")
    steps = step_times(trace)
    total = float(steps.sum())
    n = trace.n_workers
    used = trace.local_batch * trace.included
    samples = float(used.sum())
    compute = np.bincount(trace.worker, weights=trace.compute_s, minlength=n)
    utilization = compute / total if total > 0 else np.zeros(n)
    stale = staleness(trace) if not trace.synchronous else None
    final = (
        trace.per_step("local_batch")[-1]
        if trace.synchronous
        else trace.local_batch[np.unique(trace.worker, return_index=True)[1]]
    )
    return Summary(
        policy=trace.policy,
        steps=trace.n_steps,
        epochs=int(trace.epoch.max()) + 1,
        total_time_s=total,
        mean_step_s=float(steps.mean()),
        p95_step_s=float(np.percentile(steps, 95)),
        throughput_sps=samples / total if total > 0 else float("inf"),
        utilization=tuple(float(u) for u in utilization),
        mean_utilization=float(utilization.mean()),
        idle_fraction=float(trace.wait_s.sum() / (n * total)) if total > 0 else 0.0,
        final_batches=tuple(int(b) for b in final),
        dropped_samples=int((trace.local_batch * ~trace.included).sum()),
        staleness_mean=None if stale is None else float(stale.mean()),
        staleness_p95=None if stale is None else float(np.percentile(stale, 95)),
        split_changes=split_changes(trace),
        recovery_steps=None if scenario is None or not trace.synchronous else recovery_steps(trace, scenario.hints()),
        **learning(trace, steps, samples, scenario),
    )


def learning(trace: Trace, steps: np.ndarray, samples: float, scenario: Scenario | None) -> dict[str, float | None]:
    """``progress`` (the summed gains of :mod:`hetsim.efficiency`), ``statistical_efficiency``
    (progress over the samples' worth at perfect scaling, ``samples / base_batch``),
    ``goodput_sps`` (``base_batch * progress / total time``: samples per second at ``base_batch``'s
    value of a sample) and ``time_to_target_s`` (the end of the step whose progress reaches
    ``target_steps``; None when there is none, or the run ends first). All None without the
    workload's efficiency. An async update's gain is discounted by its staleness
    (:func:`hetsim.efficiency.staleness_discount`, an assumption)."""
    efficiency = scenario.workload.efficiency if scenario is not None else None
    if efficiency is None:
        return {}
    progress = progress_curve(trace, efficiency)
    total = float(steps.sum())
    reached = None
    if efficiency.target_steps is not None and progress[-1] >= efficiency.target_steps:
        reached = float(np.cumsum(steps)[int(np.searchsorted(progress, efficiency.target_steps))])
    return {
        "progress": float(progress[-1]),
        "statistical_efficiency": float(progress[-1] * efficiency.base_batch / samples) if samples > 0 else None,
        "goodput_sps": float(progress[-1] * efficiency.base_batch / total) if total > 0 else None,
        "time_to_target_s": reached,
    }


def progress_curve(trace: Trace, efficiency: Efficiency, weighted: bool | None = None) -> np.ndarray:
    """The progress after each step (or async update) of ``trace``: the cumulative gains of
    :mod:`hetsim.efficiency`. ``weighted``: how the workers' gradients were combined (None: as the
    policy's ``weighted_gradients`` trait says; a real run may have weighted every policy's)."""
    if not trace.synchronous:
        return efficiency.progress(trace.local_batch * trace.included, staleness_discount(staleness(trace)))
    if weighted is None:
        weighted = trace.policy not in POLICIES or bool(policy_class(trace.policy).weighted_gradients)
    return efficiency.progress(effective_batches(trace.per_step("local_batch"), trace.per_step("included"), weighted))


def split_changes(trace: Trace) -> float:
    if not trace.synchronous or trace.n_steps < 2:
        return 0.0
    moved = np.abs(np.diff(trace.per_step("local_batch"), axis=0)).sum(axis=1) / 2
    return float(moved.mean())


def recovery_steps(trace: Trace, hints: Sequence[WorkerHint], within: float = 0.05) -> float | None:
    factors = trace.per_step("slowdown")
    batches = trace.per_step("local_batch")
    up = trace.per_step("up")
    onsets = np.flatnonzero((factors[1:] > factors[:-1]).any(axis=1)) + 1
    if len(onsets) == 0:
        return None
    recovered = []
    for k in onsets:
        slowed = [replace(h, noise_mean=h.noise_mean * f) for h, f in zip(hints, factors[k])]  # the episode's speeds
        caps = [h.max_batch if u else 0 for h, u in zip(hints, up[k])]
        global_batch = int(batches[k].sum())  # the onset's (a policy that varies_batch changes it)
        if sum(caps) < global_batch:
            continue
        best = slowest_expected_s(slowed, min_max_split(slowed, global_batch, caps))
        j = k
        while j < len(factors) and np.array_equal(factors[j], factors[k]) and np.array_equal(up[j], up[k]):
            if slowest_expected_s(slowed, batches[j]) <= (1 + within) * best:
                break
            j += 1
        recovered.append(j - k)
    return float(np.mean(recovered)) if recovered else None


@dataclass(frozen=True)
class MeanCI:
    mean: float
    low: float
    high: float
    level: float

    @property
    def half_width(self) -> float:
        return 0.5 * (self.high - self.low)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def mean_ci(values: Sequence[float] | np.ndarray, level: float = 0.95, batches: int | None = None) -> MeanCI:
    """Student-t confidence interval of the mean. With ``batches``, the batch-means method: the
    series is cut into that many consecutive batches, whose means are treated as independent
    (for autocorrelated series such as a dynamic policy's step times)."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError("a confidence interval needs at least two values")
    mean = float(x.mean())
    if batches is not None:
        x = np.array([chunk.mean() for chunk in np.array_split(x, max(2, min(int(batches), x.size)))])
    half = float(stats.t.ppf(0.5 + level / 2.0, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return MeanCI(mean, mean - half, mean + half, level)


def with_speedups(summaries: Sequence[Summary]) -> list[Summary]:
    """Fill ``speedup_vs_equal`` when ``equal`` ran alongside: this run's throughput over equal's
    (samples that entered an update per second). For policies that use every sample of the same
    number of steps this is equal's total time over this one's; for backup and K-sync, which drop
    samples, it counts only the samples they keep. Statistical efficiency (dropped or stale
    gradients) is not in it."""
    equal = next((s for s in summaries if s.policy == BASELINE), None)
    if equal is None:
        return list(summaries)
    return [replace(s, speedup_vs_equal=s.throughput_sps / equal.throughput_sps) for s in summaries]
