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
* ``recovery_steps`` / ``recovered_share``: after each slowdown episode begins, the steps until
  the split in use is within 5% of the optimal split for the new speeds, averaged over the
  onsets recovered from, and the share of onsets recovered from before the speeds changed
  again (:mod:`hetsim.run.recovery`). None without the scenario (and without onsets).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import typename
from hetsim.core.registry import POLICIES
from hetsim.model.efficiency import Efficiency, effective_batches, staleness_discount
from hetsim.model.trace import Trace
from hetsim.policies import policy_class
from hetsim.policies.base import WorkerHint
from hetsim.run.recovery import Recovered, Run, recovery

if TYPE_CHECKING:
    from hetsim.scenario.scenario import Scenario


BASELINE = "equal"  # the policy every speedup is measured against (``speedup_vs_equal``)


@dataclass(frozen=True)
class Summary:
    """One run's figures (:func:`summarize`): step time (mean, 95th percentile), total time,
    throughput, each worker's utilization and the idle share, the final split, and where they
    apply the dropped samples, staleness, split changes, recovery after slowdowns, and the
    statistical efficiency, goodput and time to the target under ``[workload.efficiency]``."""

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
    recovery_steps: float | None = None  # mean over the slowdown onsets recovered from (None: none was)
    recovered_share: float | None = None  # of the slowdown onsets (None: no onset)
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
    return barrier_step_times(trace.per_step("compute_s"), trace.per_step("wait_s"), trace.per_step("comm_s")[:, 0])


def barrier_step_times(compute_s: np.ndarray, wait_s: np.ndarray, comm_s: float | np.ndarray) -> np.ndarray:
    """Barrier steps' durations from (steps x workers) compute and wait times and each step's
    all-reduce: the barrier (any waited-for worker's compute plus idle time), then the all-reduce."""
    return (compute_s + wait_s).min(axis=1) + comm_s


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


@dataclass(frozen=True)
class BarrierTotals:
    """What the Summary of a barrier run is computed from: O(steps + workers) numbers, read from
    a full trace (:func:`barrier_totals`) or summed as the run goes (:mod:`hetsim.run.summary_recorder`)."""

    policy: str
    weighted: bool | None  # the policy's weighted_gradients trait (None: not recorded, see combines_by_batch)
    step_s: np.ndarray  # per step (:func:`step_times`)
    epochs: int
    samples: float  # applied
    dropped: int
    compute_s: np.ndarray  # per worker, summed over the steps
    wait_s: float  # summed over workers and steps
    final_batches: tuple[int, ...]
    moved: float  # samples moved between consecutive steps, summed (``sum_i |b_i - b_i'| / 2``)
    applied: np.ndarray  # per step: the weighted combine's effective batch
    plain: np.ndarray  # per step: the plain mean's
    recovered: Recovered | None  # None: the speeds (hints) were not known


def run_changes(*rows: np.ndarray) -> np.ndarray:
    """The steps (from 1 on) where any of these (steps x workers) arrays differs from the step
    before: where a new :class:`Run` starts."""
    return np.flatnonzero(np.logical_or.reduce([(x[1:] != x[:-1]).any(axis=1) for x in rows])) + 1


def barrier_totals(trace: Trace, hints: Sequence[WorkerHint] | None = None) -> BarrierTotals:
    """The totals of a barrier run's full trace; ``hints`` (its true speeds) give its recovery."""
    batches, included = trace.per_step("local_batch"), trace.per_step("included")
    factors, up = trace.per_step("slowdown"), trace.per_step("up")
    firsts = np.r_[0, run_changes(factors, up, batches)]
    n = trace.n_workers
    return BarrierTotals(
        policy=trace.policy,
        weighted=trace.weighted,
        step_s=step_times(trace),
        epochs=int(trace.epoch.max()) + 1,
        samples=float((trace.local_batch * trace.included).sum()),
        dropped=int((trace.local_batch * ~trace.included).sum()),
        compute_s=np.bincount(trace.worker, weights=trace.compute_s, minlength=n),
        wait_s=float(trace.wait_s.sum()),
        final_batches=tuple(int(b) for b in batches[-1]),
        moved=float(np.abs(np.diff(batches, axis=0)).sum() / 2),
        applied=effective_batches(batches, included, True),
        plain=effective_batches(batches, included, False),
        recovered=None
        if hints is None
        else recovery([Run(int(k), factors[k], up[k], batches[k]) for k in firsts], hints),
    )


def summarize(trace: Trace, scenario: Scenario | None = None) -> Summary:
    """The Summary of one run; ``scenario`` (its true costs) enables its recovery figures."""
    from hetsim.scenario.scenario import check_scenario  # here: the scenario layer sits above this module's users

    if not isinstance(trace, Trace):
        raise ConfigError("trace", f"expected a Trace (what hetsim.simulate returns), got {typename(trace)}")
    if scenario is not None:
        check_scenario(scenario)
    if trace.n_steps == 0:
        raise ValueError("an empty trace has no summary")
    if trace.synchronous:
        return summary_of(barrier_totals(trace, None if scenario is None else scenario.hints()), scenario)
    steps = step_times(trace)
    samples = float((trace.local_batch * trace.included).sum())
    stale = staleness(trace)
    efficiency = scenario.workload.efficiency if scenario is not None else None
    progress = None if efficiency is None else efficiency.progress(
        trace.local_batch * trace.included, staleness_discount(stale))  # fmt: skip
    return _summary(
        trace.policy, steps, int(trace.epoch.max()) + 1, samples,
        np.bincount(trace.worker, weights=trace.compute_s, minlength=trace.n_workers), float(trace.wait_s.sum()),
        tuple(int(b) for b in trace.local_batch[np.unique(trace.worker, return_index=True)[1]]),
        dropped_samples=int((trace.local_batch * ~trace.included).sum()),
        staleness_mean=float(stale.mean()), staleness_p95=float(np.percentile(stale, 95)),
        **learning(progress, steps, samples, efficiency),
    )  # fmt: skip


def summary_of(totals: BarrierTotals, scenario: Scenario | None = None) -> Summary:
    """The Summary of a barrier run from its totals."""
    efficiency = scenario.workload.efficiency if scenario is not None else None
    progress = None if efficiency is None else efficiency.progress(
        totals.applied if combines_by_batch(totals.policy, totals.weighted) else totals.plain)  # fmt: skip
    steps, n_steps = totals.step_s, len(totals.step_s)
    return _summary(
        totals.policy, steps, totals.epochs, totals.samples, totals.compute_s, totals.wait_s, totals.final_batches,
        dropped_samples=totals.dropped,
        split_changes=totals.moved / (n_steps - 1) if n_steps > 1 else 0.0,
        **recovered(None if scenario is None else totals.recovered),
        **learning(progress, steps, totals.samples, efficiency),
    )  # fmt: skip


def recovered(figures: Recovered | None) -> dict[str, float | None]:
    """A Summary's recovery fields from a run's :class:`Recovered` (None: not known)."""
    steps, share = (None, None) if figures is None else figures
    return {"recovery_steps": steps, "recovered_share": share}


def _summary(policy: str, steps: np.ndarray, epochs: int, samples: float, compute_s: np.ndarray, wait_s: float,
             final: tuple[int, ...], **fields: Any) -> Summary:  # fmt: skip
    """The fields every run has, from its step times and per-worker compute, plus ``fields``."""
    total = float(steps.sum())
    n = len(compute_s)
    utilization = compute_s / total if total > 0 else np.zeros(n)
    return Summary(
        policy=policy,
        steps=len(steps),
        epochs=epochs,
        total_time_s=total,
        mean_step_s=float(steps.mean()),
        p95_step_s=float(np.percentile(steps, 95)),
        throughput_sps=samples / total if total > 0 else float("inf"),
        utilization=tuple(float(u) for u in utilization),
        mean_utilization=float(utilization.mean()),
        idle_fraction=float(wait_s / (n * total)) if total > 0 else 0.0,
        final_batches=final,
        **fields,
    )


def learning(
    progress: np.ndarray | None, steps: np.ndarray, samples: float, efficiency: Efficiency | None
) -> dict[str, float | None]:
    """``progress`` (the summed gains of :mod:`hetsim.model.efficiency`), ``statistical_efficiency``
    (progress over the samples' worth at perfect scaling, ``samples / base_batch``),
    ``goodput_sps`` (``base_batch * progress / total time``: samples per second at ``base_batch``'s
    value of a sample) and ``time_to_target_s`` (the end of the step whose progress reaches
    ``target_steps``; None when there is none, or the run ends first), from the progress after
    each step (None: no efficiency, and no fields). An async update's gain is discounted by its
    staleness (:func:`hetsim.model.efficiency.staleness_discount`, an assumption)."""
    if progress is None or efficiency is None:
        return {}
    total = float(steps.sum())
    step = None if efficiency.target_steps is None else reaching_step(progress, efficiency.target_steps)
    reached = None if step is None else float(np.cumsum(steps)[step])
    return {
        "progress": float(progress[-1]),
        "statistical_efficiency": float(progress[-1] * efficiency.base_batch / samples) if samples > 0 else None,
        "goodput_sps": float(progress[-1] * efficiency.base_batch / total) if total > 0 else None,
        "time_to_target_s": reached,
    }


def reaching_step(progress: np.ndarray, target_steps: float) -> int | None:
    """The first step (or update) whose progress reaches ``target_steps``; None if none does."""
    if progress[-1] < target_steps:
        return None
    return int(np.searchsorted(progress, target_steps))


def progress_curve(trace: Trace, efficiency: Efficiency, weighted: bool | None = None) -> np.ndarray:
    """The progress after each step (or async update) of ``trace``: the cumulative gains of
    :mod:`hetsim.model.efficiency`. ``weighted``: how the workers' gradients were combined (None: as the
    policy's ``weighted_gradients`` trait says; a real run may have weighted every policy's)."""
    if not trace.synchronous:
        return efficiency.progress(trace.local_batch * trace.included, staleness_discount(staleness(trace)))
    combine = combines_by_batch(trace.policy, trace.weighted) if weighted is None else weighted
    return efficiency.progress(effective_batches(trace.per_step("local_batch"), trace.per_step("included"), combine))


def combines_by_batch(policy: str, recorded: bool | None) -> bool:
    """Whether a run's gradients were combined by batch: as its engine ``recorded`` from the
    policy object's trait; where nothing recorded it (a trace file), as the trait of the policy
    registered under the name ``policy`` says (a name registered nowhere: by batch)."""
    if recorded is not None:
        return recorded
    return policy not in POLICIES or bool(policy_class(policy).weighted_gradients)


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
        """Whether ``value`` lies in the interval, its ends widened by a few units in the last place
        (a noise-free run's zero-width interval and a closed form that sum the same times in
        another order differ there)."""
        slack = 1e-12 * max(abs(self.low), abs(self.high))
        return self.low - slack <= value <= self.high + slack


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
    from scipy import stats  # here: scipy.stats is slow to import, and a run without a CI needs none

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
