"""What :mod:`hetsim.analysis.analytic` answers: :class:`Prediction`, the expected Summary fields of a
policy on a scenario, or :class:`NoClosedForm`, why there is none."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


class NoClosedForm(ValueError):
    """The policy's expected step time has no closed form; ``reason`` says why."""

    def __init__(self, policy: str, reason: str) -> None:
        self.policy, self.reason = policy, reason
        super().__init__(f"no closed form for {policy!r} because {reason}")


@dataclass(frozen=True)
class Prediction:
    """Expected values of the :class:`~hetsim.run.metrics.Summary` fields (same names), plus what
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
    allreduce_s: float  # after the barrier (with buckets: the part still exposed, on average over the run)
    fixed_point_shares: tuple[float, ...] | None = None
    fixed_point_batches: tuple[int, ...] | None = None
    trajectory: tuple[tuple[int, ...], ...] = field(default=(), repr=False)
    epochs_to_1pct: int | None = None
    progress: float | None = None  # with [workload.efficiency]: steps at its base batch, over the run
    time_to_target_s: float | None = None  # None: no target, not reached in the run, or not predicted

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


def learning_fields(progress: np.ndarray, elapsed_s: np.ndarray, target_steps: float | None) -> dict[str, float | None]:
    """A prediction's ``progress`` (the last of the expected progress after each step) and
    ``time_to_target_s`` (the expected end, ``elapsed_s``, of the first step whose progress
    reaches ``target_steps``, as the simulator counts; None without a target or before it)."""
    reached = None
    if target_steps is not None and progress[-1] >= target_steps:
        reached = float(elapsed_s[int(np.searchsorted(progress, target_steps))])
    return {"progress": float(progress[-1]), "time_to_target_s": reached}
