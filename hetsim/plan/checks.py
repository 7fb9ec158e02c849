"""What :func:`~hetsim.plan.planner.plan` refuses before it computes anything (a cluster of one,
an objective the scenario cannot answer, a batch range the workers cannot run) and the grid of
global batches it searches."""

from __future__ import annotations

from dataclasses import replace

from hetsim.core.errors import ConfigError
from hetsim.plan.rows import OBJECTIVES
from hetsim.scenario.config import check_run_size
from hetsim.scenario.scenario import Scenario


def check_cluster(scenario: Scenario) -> None:
    if scenario.n_workers < 2:
        raise ConfigError("workers", f"plan needs two or more workers, got {scenario.n_workers}")


def check_objective(objective: str, scenario: Scenario, option: str = "objective") -> None:
    """``objective`` is one of :data:`~hetsim.plan.rows.OBJECTIVES` that the scenario can answer."""
    if objective not in OBJECTIVES:
        raise ConfigError(option, f"unknown objective {objective!r} (known: {', '.join(OBJECTIVES)})")
    efficiency = scenario.workload.efficiency
    if objective == "time_to_target" and (efficiency is None or efficiency.target_steps is None):
        raise ConfigError(option, "time_to_target needs [workload.efficiency] with target_steps in the scenario")


def check_batch_range(batch_range: tuple[int, int], scenario: Scenario, option: str = "batch_range") -> None:
    """Two increasing positive integers, within what the workers can take: at least one sample
    each, at most their caps' sum and the dataset (one step per epoch), and the smallest batch's
    run within the run size limits."""
    lo, hi = batch_range
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 < lo < hi):
        raise ConfigError(option, f"expected two increasing positive integers LO,HI, got {lo},{hi}")
    n = scenario.n_workers
    if lo < n:
        raise ConfigError(option, f"LO must be at least the number of workers ({n}), got {lo}")
    capacity = sum(w.cap for w in scenario.workers)
    if hi > capacity:
        raise ConfigError(option, f"HI must be at most {capacity:g}, what the workers' max_batch allow, got {hi}")
    if hi > scenario.workload.dataset_size:
        raise ConfigError(option, f"HI must be at most workload.dataset_size ({scenario.workload.dataset_size}), "
                                  f"got {hi}")  # fmt: skip
    try:
        check_run_size(with_batch(scenario, lo), keep_trace=False)
    except ConfigError as exc:
        raise ConfigError(option, f"LO {lo}: {exc.problem}") from None


def batch_grid(lo: int, hi: int) -> tuple[int, ...]:
    """The candidate global batches: ``lo``, ``hi`` and every ``2^k`` and ``3 * 2^(k-1)`` between."""
    points = {lo, hi}
    power = 2
    while power <= hi:
        points.update(b for b in (power, 3 * power // 2) if lo <= b <= hi)
        power *= 2
    return tuple(sorted(points))


def with_batch(scenario: Scenario, global_batch: int) -> Scenario:
    return replace(scenario, workload=replace(scenario.workload, global_batch=global_batch))
