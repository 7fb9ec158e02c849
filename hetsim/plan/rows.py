"""One policy's row of a plan (:mod:`hetsim.plan.planner`): its predicted mean step time, throughput and
time to target, each with a confidence interval, from its closed form where it has one that a
planner can afford, else from a short simulation.

* **Closed form**: :func:`hetsim.analysis.analytic.predict`, a point value (its interval has zero width:
  the prediction is an expectation, not an estimate). The first-k policies (``backup``,
  ``ksync``: a policy whose ``wait_for()`` is below the cluster's size) have one, but it
  integrates every worker's busy time and inclusion over a 20,001-point grid with the order
  statistics of all the others (seconds, growing with the workers): a plan, which evaluates
  its closed forms again for every slowed worker (:mod:`hetsim.plan.fragility`), simulates them.
* **Simulated** (no closed form, or the first-k ones): :func:`hetsim.analysis.step_ci.simulated_mean` on
  the vector engine, over a horizon (:func:`short_run`) of :data:`SIMULATED_WORKER_STEPS` steps
  times workers, at least :data:`SIMULATED_STEPS` steps: whole epochs, as many as fit, or one
  epoch cut to that many steps. A cluster of a few workers is simulated over its whole job;
  at 1,024 workers, ten runs of 64 steps (a policy that re-splits), and the mean is then the
  first steps' (a re-splitting policy's transient weighs more than over the whole job, which the
  row's note says). The throughput and time to target
  carry the step time's interval through, the samples a step keeps and the progress a step makes
  taken from the run with the plan's seed; the time to target is extrapolated at that run's rate
  of progress (with a noise-scale schedule, the rate of the first steps, which the schedule then
  changes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from hetsim.analysis.analytic import NoClosedForm, predict
from hetsim.analysis.prediction import Prediction
from hetsim.analysis.step_ci import simulated_mean
from hetsim.core.options import SPEEDUP_METRICS
from hetsim.model.efficiency import effective_batch
from hetsim.policies import Policy, fresh
from hetsim.run.metrics import BASELINE
from hetsim.scenario.scenario import Scenario

SIMULATED_STEPS = 64  # the shortest horizon of a simulated row (short_run)
SIMULATED_WORKER_STEPS = 4096  # steps times workers a simulated row's horizon may hold beyond it
LEVEL = 0.95  # of every confidence interval
CLOSED_FORM = "closed form"
EXPECTED_PATH = "closed form, expected path"  # re-splits from noisy times: predicted on its splits from expected ones
OBJECTIVES = SPEEDUP_METRICS
"""Objective -> (the row's field, whether more is better): sweep's ``--metric``, the same figures."""


@dataclass(frozen=True)
class Estimate:
    """A value and its :data:`LEVEL` confidence interval (equal to it for a closed form)."""

    value: float
    low: float
    high: float

    @classmethod
    def exact(cls, value: float) -> Estimate:
        return cls(value, value, value)

    def to_dict(self) -> dict[str, float | None]:
        """Plain JSON: a bound that is not finite (a step time's interval reaching 0) as None."""
        return {k: v if math.isfinite(v) else None for k, v in (("value", self.value), ("low", self.low),
                                                                 ("high", self.high))}  # fmt: skip


@dataclass(frozen=True)
class PolicyRow:
    """One policy on one scenario: ``how`` it was predicted (:data:`CLOSED_FORM` or a simulation's
    description), its mean step time, throughput (samples per second, gradients applied) and time
    to target (None: no ``target_steps``, or not reached in the scenario's epochs), and its final
    split (samples per worker, in worker order)."""

    policy: str
    how: str
    step_s: Estimate
    throughput_sps: Estimate
    time_to_target_s: Estimate | None
    split: tuple[int, ...]
    note: str | None = None
    source: Policy | None = field(default=None, compare=False, repr=False)  # the object the row was made of

    @property
    def closed_form(self) -> bool:
        """From a closed form: exact, or averaged over draws of costs (:mod:`hetsim.plan.robust`)."""
        return self.how.startswith(CLOSED_FORM)

    @property
    def effective_batch(self) -> float:
        """The samples a step's combined gradient is worth at the row's split
        (:func:`~hetsim.model.efficiency.effective_batch`): the samples it applies (a backup's
        kept ones: throughput x step time), less where the policy takes the plain mean of an
        uneven split's gradients (``weighted_gradients`` false), by that mean's share."""
        split = [b for b in self.split if b > 0]
        applied = self.throughput_sps.value * self.step_s.value if self.step_s.value > 0 else float(sum(split))
        weighted = self.source is None or self.source.weighted_gradients
        return effective_batch(split, [True] * len(split), weighted) * applied / sum(split) if split else applied

    def value(self, objective: str) -> float | None:
        """The row's figure for ``objective`` (:data:`OBJECTIVES`), None when it has none."""
        field, _ = OBJECTIVES[objective]
        estimate: Estimate | None = getattr(self, field)
        return None if estimate is None else estimate.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "how": self.how,
            "step_s": self.step_s.to_dict(),
            "throughput_sps": self.throughput_sps.to_dict(),
            "time_to_target_s": None if self.time_to_target_s is None else self.time_to_target_s.to_dict(),
            "split": list(self.split),
            "note": self.note,
        }


def better(a: float, b: float, objective: str) -> bool:
    """Whether ``a`` is strictly better than ``b`` on ``objective``."""
    return a > b if OBJECTIVES[objective][1] else a < b


def waits_for_all(scenario: Scenario, policy: Policy) -> bool:
    """Whether ``policy`` is a barrier policy that waits for every worker, or async (their closed
    forms are cheap); a policy that keeps the base class's ``wait_for`` is not reset to be asked
    (resetting ``optimal`` computes its split, which ``predict`` does again)."""
    if not policy.synchronous or type(policy).wait_for is Policy.wait_for:
        return True
    asked = fresh(policy)
    asked.reset(scenario.n_workers, scenario.workload.global_batch, scenario.hints())
    return asked.wait_for() >= scenario.n_workers


def closed_form_row(scenario: Scenario, policy: Policy) -> PolicyRow | str:
    """``policy``'s row from its closed form, or why it has none a plan uses (module docstring)."""
    if not policy.closed_form:
        return policy.no_closed_form_reason
    if not waits_for_all(scenario, policy):
        return "its closed form (every worker's busy time and inclusion) is too slow to plan with"
    try:
        prediction = predict(scenario, fresh(policy))
    except NoClosedForm as exc:
        return exc.reason
    if _has_target(scenario) and prediction.progress is None:  # async's: a rate of updates, no progress
        return "its closed form is a rate of updates, with no progress toward the target"
    return _predicted(scenario, prediction, policy)


def told_row(scenario: Scenario, policy: Policy) -> PolicyRow:
    """The closed-form row of a policy (one told other costs than the scenario's:
    :mod:`hetsim.plan.robust`); ConfigError or NoClosedForm as :func:`predict` raises them."""
    return _predicted(scenario, predict(scenario, fresh(policy)), policy)


def _predicted(scenario: Scenario, p: Prediction, policy: Policy) -> PolicyRow:
    notes = [_not_reached(scenario)] if _has_target(scenario) and p.time_to_target_s is None else []
    if p.policy == BASELINE and max(p.final_batches) - min(p.final_batches) > 1:  # the reference the gains divide by
        split = "/".join(map(str, p.final_batches))
        notes.append(f"its split is {split}, not the global batch over the workers: their max_batch caps it")
    if p.time_to_target_s is not None and (moved := _moved(p)) is not None:
        notes.append(moved)
    note = "; ".join(notes) or None
    return PolicyRow(
        policy=p.policy,
        how=EXPECTED_PATH if _on_expected_path(scenario, policy) else CLOSED_FORM,
        step_s=Estimate.exact(p.mean_step_s),
        throughput_sps=Estimate.exact(p.throughput_sps),
        time_to_target_s=None if p.time_to_target_s is None else Estimate.exact(p.time_to_target_s),
        split=p.final_batches,
        note=note,
        source=policy,
    )


def _moved(p: Prediction) -> str | None:
    """What a policy that re-splits at epoch ends spends on its way to its split, which its time to
    target counts (where the target falls in its first epoch, that time is its starting split's:
    ``equal``'s, for ``dynamic``); None for a policy whose split stays."""
    first, *_ = p.trajectory or (p.final_batches,)
    if first == p.final_batches:
        return None
    settled = 1 + next(i for i, split in enumerate(p.trajectory) if split == p.final_batches)
    show = "/".join
    return (
        f"its time to target counts its first epoch at {show(map(str, first))} (it re-splits at epoch ends: "
        f"{show(map(str, p.final_batches))} from epoch {settled})"
    )


def _on_expected_path(scenario: Scenario, policy: Policy) -> bool:
    """Whether ``policy``'s closed form is its expected path rather than its expectation: a policy
    that re-splits from measured times, on a cluster whose times are random, is predicted on the
    splits it makes from expected times, while a run's noisy times lead it to others (integer
    rounding of the shares alone moves the mean step by a fraction of a percent)."""
    if not policy.resplits:
        return False
    return any(w.noise.var() > 0 or w.delay.var() > 0 or w.slowdown or w.failure or w.shares_noise
               for w in scenario.workers)  # fmt: skip


def short_run(scenario: Scenario, steps: int | None = None) -> Scenario:
    """``scenario`` cut to about ``steps`` steps (default: :data:`SIMULATED_WORKER_STEPS` over its
    workers, at least :data:`SIMULATED_STEPS`: a small cluster's whole job, a large one's first
    steps): whole epochs, as many as fit (at least one), or, when one epoch is longer, one epoch
    of ``steps`` steps."""
    if steps is None:
        steps = max(SIMULATED_STEPS, SIMULATED_WORKER_STEPS // scenario.n_workers)
    wl = scenario.workload
    if wl.total_steps <= steps:
        return scenario
    if wl.steps_per_epoch <= steps:
        return replace(scenario, workload=replace(wl, epochs=max(1, steps // wl.steps_per_epoch)))
    return replace(scenario, workload=replace(wl, epochs=1, dataset_size=steps * wl.global_batch))


def simulated_row(scenario: Scenario, policy: Policy, seed: int, why: str) -> PolicyRow:
    """``policy``'s row from :func:`~hetsim.analysis.step_ci.simulated_mean` over :func:`short_run`'s horizon
    (``why``: the reason it has no closed form, kept as the row's note)."""
    run = short_run(scenario)
    sim = simulated_mean(run, fresh(policy), seed, LEVEL)
    summary = sim.summary
    assert summary is not None  # simulated_mean always keeps the seed's run's
    low, high = (sim.mean_s, sim.mean_s) if sim.ci is None else (sim.ci.low, sim.ci.high)
    kept = summary.throughput_sps * summary.mean_step_s  # samples applied per step
    throughput_sps = Estimate(kept / sim.mean_s, kept / high, kept / low if low > 0 else math.inf)
    steps = run.workload.total_steps
    how = f"simulated, {sim.runs} run{'s' if sim.runs > 1 else ''} x {steps} steps ({sim.method})"
    step_s = Estimate(sim.mean_s, low, high)
    if summary.time_to_target_s is not None:  # reached in the run: its own steps there (a slow first epoch counted)
        per_step = summary.time_to_target_s / summary.mean_step_s  # the target's time in the run's mean steps
        to_target: Estimate | None = Estimate(per_step * sim.mean_s, per_step * low, per_step * high)
    else:
        to_target = extrapolated(scenario, summary.progress, summary.steps, step_s)
    notes = [why]
    if steps < scenario.workload.total_steps:
        shortened = f"simulated over the job's first {steps} of {scenario.workload.total_steps} steps"
        # the caveat is a re-splitting policy's: its first steps weigh more there
        notes.append(shortened + (": its first steps weigh more than in the whole job" if policy.resplits else ""))
    if policy.varies_batch and run.workload.epochs == 1:
        notes.append("over one epoch it keeps the global batch it starts with (it changes it at epoch ends)")
    if _has_target(scenario) and to_target is None:
        notes.append(_not_reached(scenario))
    return PolicyRow(
        policy=policy.name,
        how=how,
        step_s=step_s,
        throughput_sps=throughput_sps,
        time_to_target_s=to_target,
        split=summary.final_batches,
        note="; ".join(notes),
        source=policy,
    )


def _has_target(scenario: Scenario) -> bool:
    efficiency = scenario.workload.efficiency
    return efficiency is not None and efficiency.target_steps is not None


def _not_reached(scenario: Scenario) -> str:
    return f"target not reached in {scenario.workload.epochs} epochs"


def extrapolated(scenario: Scenario, progress: float | None, steps: int, step_s: Estimate) -> Estimate | None:
    """The time to target at the run's progress per step: the steps it takes, times the step;
    None beyond the scenario's step budget (as a closed form or a full run would say)."""
    efficiency = scenario.workload.efficiency
    if efficiency is None or efficiency.target_steps is None or not progress:
        return None
    exact = efficiency.target_steps * steps / progress  # a whole number where the rate divides the target
    needed = math.ceil(exact * (1 - 1e-12))  # ... not one step more for its last bit (1 / (1 / 49) > 49)
    if needed > scenario.workload.total_steps:
        return None
    return Estimate(needed * step_s.value, needed * step_s.low, needed * step_s.high)


def policy_row(scenario: Scenario, policy: Policy, seed: int) -> PolicyRow:
    """``policy``'s row: its closed form where a plan uses one, else a short simulation (ConfigError
    where its parameters do not fit the scenario's cluster)."""
    policy = scenario.make_policy(policy)
    row = closed_form_row(scenario, policy)
    return row if isinstance(row, PolicyRow) else simulated_row(scenario, policy, seed, row)
