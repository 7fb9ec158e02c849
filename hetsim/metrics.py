"""Trace -> Summary: the flat record of one run (pure functions, no I/O).

Step time is measured from one step's start to the next's (barrier wait plus all-reduce), so
``sum(step times) == total_time_s``. Utilization of a worker is its compute time over the wall
time; ``idle_fraction`` is the share of worker-time spent waiting at barriers (the rest of the
wall time not computing is the all-reduce).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from hetsim.trace import Trace


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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["utilization"] = list(self.utilization)
        out["final_batches"] = list(self.final_batches)
        return out


def step_times(trace: Trace) -> np.ndarray:
    """Duration of every step: until the barrier released (any waited-for worker's compute plus
    idle time), plus the all-reduce."""
    barrier = (trace.per_step("compute_s") + trace.per_step("wait_s")).min(axis=1)
    return barrier + trace.per_step("comm_s")[:, 0]


def summarize(trace: Trace) -> Summary:
    if trace.n_steps == 0:
        raise ValueError("an empty trace has no summary")
    steps = step_times(trace)
    total = float(steps.sum())
    n = trace.n_workers
    compute = trace.per_step("compute_s")
    wait = trace.per_step("wait_s")
    included = trace.per_step("included")
    samples = float((trace.per_step("local_batch") * included).sum())
    utilization = compute.sum(axis=0) / total if total > 0 else np.zeros(n)
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
        idle_fraction=float(wait.sum() / (n * total)) if total > 0 else 0.0,
        final_batches=tuple(int(b) for b in trace.per_step("local_batch")[-1]),
    )


def with_speedups(summaries: Sequence[Summary]) -> list[Summary]:
    """Fill ``speedup_vs_equal`` (equal's total time / this total time) when ``equal`` ran alongside."""
    equal = next((s for s in summaries if s.policy == "equal"), None)
    if equal is None:
        return list(summaries)
    return [replace(s, speedup_vs_equal=equal.total_time_s / s.total_time_s) for s in summaries]
