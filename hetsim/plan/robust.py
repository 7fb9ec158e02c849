"""How a plan's policies fare when the costs it was told are off (``plan --cost-error E``).

A profile measures each worker's cost curve with an error of its own: on a shared machine one
rank's table can be several percent off against another's. A policy that reads the costs
(:meth:`~hetsim.policies.base.Policy.reads_costs`: ``optimal``, ``proportional``) fixes its
split on the told costs, and a worker whose true cost is higher then holds every step back; a
policy that measures as it runs (``dynamic``, ``adaptive``) follows the costs the workers really
have. The nominal plan cannot tell them apart, as it predicts on the told costs themselves.

With ``cost_error`` E, each worker's true cost is its told cost times ``exp(E z)``, ``z``
standard normal and independent between workers (E is the relative error of one worker's
curve, a log-scale standard deviation), in :data:`DRAWS` draws from the plan's seed. Every
policy with a closed form is predicted on each draw's true costs, one that reads the costs told
the nominal ones (as a real run told a profile's costs is); its row is the mean over the draws,
with the t interval of that mean (the same draws for every policy, so their differences are
paired). A policy without a closed form runs once on each draw's costs (the plan's short run,
seeded from the plan's seed), so the draws' spread is its interval too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from hetsim.analysis.prediction import NoClosedForm
from hetsim.core.errors import ConfigError
from hetsim.plan.fragility import slower_cost
from hetsim.plan.rows import LEVEL, Estimate, PolicyRow, extrapolated, short_run, told_row
from hetsim.policies import Policy, fresh
from hetsim.policies.base import told
from hetsim.run.metrics import mean_ci
from hetsim.run.simulate import simulate_summary
from hetsim.scenario.scenario import Scenario, WorkerGroup

DRAWS = 16
MAX_COST_ERROR = 1.0  # a log-scale sd of 1: a worker's cost off by a factor e either way, one time in three


def check_cost_error(error: float, option: str = "cost_error") -> float:
    """``error`` as a float in [0, :data:`MAX_COST_ERROR`]; ConfigError on ``option`` otherwise."""
    if not isinstance(error, (int, float)) or isinstance(error, bool) or not math.isfinite(error):
        raise ConfigError(option, f"must be a number, got {error!r}")
    if not 0.0 <= error <= MAX_COST_ERROR:
        raise ConfigError(option, f"must be in [0, {MAX_COST_ERROR:g}] (a relative error, e.g. 0.1), got {error:g}")
    return float(error)


def rescaled(scenario: Scenario, factors: Sequence[float]) -> Scenario:
    """``scenario`` with worker i's cost times ``factors[i]``, a group per worker (each named as before)."""
    workers = [replace(w, cost=slower_cost(w.cost, f)) for w, f in zip(scenario.workers, factors)]
    return replace(scenario, groups=tuple(WorkerGroup(w) for w in workers))


def robust_rows(scenario: Scenario, rows: Sequence[PolicyRow], cost_error: float, seed: int) -> tuple[PolicyRow, ...]:
    """``rows`` (the nominal plan's, on ``scenario``) as the mean over :data:`DRAWS` draws of true
    costs off by ``cost_error`` (module docstring)."""
    costs, runs = np.random.SeedSequence(seed).spawn(2)
    rng = np.random.default_rng(costs)
    draws = [rescaled(scenario, np.exp(cost_error * rng.standard_normal(scenario.n_workers)).tolist())
             for _ in range(DRAWS)]  # fmt: skip
    seeds = runs.generate_state(DRAWS).tolist()
    return tuple(_robust(scenario, row, draws, seeds, cost_error) for row in rows)


def _robust(scenario: Scenario, row: PolicyRow, draws: Sequence[Scenario], seeds: Sequence[int],
            cost_error: float) -> PolicyRow:  # fmt: skip
    """``row`` averaged over ``draws``: its closed form on each, or one short run each (seeded
    with ``seeds``) where it has none; a policy that reads the costs told the nominal ones."""
    assert row.source is not None  # every row a plan makes keeps its policy
    policy = told(row.source, scenario.hints())  # the nominal row's policy, told the given costs
    found = []
    for truth, seed in zip(draws, seeds):
        if row.closed_form:
            try:
                found.append(told_row(truth, policy))
            except NoClosedForm:  # not expected: the costs only scale
                return row
        else:
            found.append(_one_run(truth, fresh(policy), seed))
    how = row.how if row.closed_form else f"simulated, 1 run x {short_run(draws[0]).workload.total_steps} steps"
    missed = sum(r.time_to_target_s is None for r in found)
    note = row.note
    if 0 < missed < len(found) or (missed and row.time_to_target_s is not None):
        note = "; ".join(n for n in (row.note, f"target not reached in {missed} of {len(found)} draws") if n)
    return replace(row, how=f"{how}, mean of {len(found)} draws of costs off by {cost_error:g}", note=note,
                   step_s=_mean([r.step_s.value for r in found]),
                   throughput_sps=_mean([r.throughput_sps.value for r in found]),
                   time_to_target_s=_mean_or_none([r.time_to_target_s for r in found]))  # fmt: skip


def _one_run(truth: Scenario, policy: Policy, seed: int) -> PolicyRow:
    """One short run of ``policy`` on ``truth`` (:func:`~hetsim.plan.rows.short_run`) as a row."""
    run = short_run(truth)
    summary = simulate_summary(run, policy, seed=seed)
    step = Estimate.exact(summary.mean_step_s)
    to_target = extrapolated(truth, summary.progress, summary.steps, step)
    return PolicyRow(
        policy.name, "simulated", step, Estimate.exact(summary.throughput_sps), to_target, summary.final_batches
    )


def _mean(values: Sequence[float]) -> Estimate:
    """The mean of ``values`` and its t interval at the plan's level."""
    ci = mean_ci(values, LEVEL)
    return Estimate(ci.mean, ci.low, ci.high)


def _mean_or_none(values: Sequence[Estimate | None]) -> Estimate | None:
    """The mean time to target where every draw reaches it, else None (not reached in some)."""
    if any(v is None for v in values):
        return None
    return _mean([v.value for v in values if v is not None])
