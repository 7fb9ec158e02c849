"""``hetsim plan``: the answer for one cluster. A scenario in, a :class:`Plan` out: every policy
that can run it with its predicted mean step time, throughput and time to target and their
confidence intervals (:mod:`hetsim.plan.rows`: the closed form, else a short simulation), the
recommended policy with its split and global batch, its gain over ``equal``, and how fragile
the recommendation is (:mod:`hetsim.plan.fragility`).

**The recommendation** is the best row on the objective (``throughput``: samples per second;
``time_to_target``: the predicted time to ``target_steps``, which needs
``[workload.efficiency]``). Closed forms are expectations and simulations estimates: a simulated
policy is recommended only when its whole confidence interval is better than the best closed
form's value; otherwise the best closed form is, whose split is known rather than one run's.
Ties go to the policy listed last: the registry lists the simpler policies first, and of two
equal predictions the later is the more capable (``dynamic-enhanced``'s timing is ``dynamic``'s,
its gradients weighted; ``proportional``'s split can be ``optimal``'s when a worker drops out).
The gain over ``equal`` is the ratio of the two rows' values on the objective (``equal``'s time
over the policy's for time_to_target), at the same global batch.

**The global batch** (``batch_range``): the candidates are ``LO``, ``HI``, and the powers of two
and one and a half times them in between (:func:`batch_grid`: 64..8192 is 15 candidates); at each
the closed-form policies a plan uses are predicted and the best kept, and the plan is then made
at the best candidate. Simulated policies are not simulated at every candidate (a plan with no
closed form at all is made at the candidate nearest the scenario's batch); a candidate whose target is not reached in
the scenario's epochs (fewer steps at a larger batch) does not count for time_to_target.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

from hetsim import __version__
from hetsim.core.errors import ConfigError
from hetsim.model.efficiency import lr_factor
from hetsim.plan.checks import batch_grid, check_batch_range, check_cluster, check_objective, with_batch
from hetsim.plan.extrapolated import extrapolated_costs, unfitted_costs
from hetsim.plan.fragility import FRAGILITY_MAX, Fragility, fragility
from hetsim.plan.robust import check_cost_error, robust_rows
from hetsim.plan.rows import LEVEL, OBJECTIVES, PolicyRow, better, closed_form_row, policy_row
from hetsim.plan.without import without_left_out
from hetsim.policies import Equal, Policy
from hetsim.run.metrics import BASELINE
from hetsim.scenario.scenario import Scenario, check_scenario, check_seed

REACH = "a batch-sweep with runs at or beyond it would measure it"  # plan's advice where the efficiency extrapolates
ROUNDING = 1e-9  # a share of a value below which two predictions of it are the same (recommend)

Searched = tuple[tuple[int, str | None, float | None], ...]  # (batch, its best closed form, that one's value)


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` answers (``to_dict`` is ``plan --json`` and ``plan.json``)."""

    scenario: Scenario  # as given (the rows are at ``global_batch``)
    objective: str
    seed: int
    global_batch: int
    rows: tuple[PolicyRow, ...]
    recommended: PolicyRow
    gain_over_equal: float | None  # on the objective; None without equal or a value of its
    fragility: tuple[Fragility, ...]  # per worker; empty when the recommended policy has no closed form
    left_out: tuple[tuple[str, str], ...] = ()  # (policy, why) for policies that cannot run the scenario
    batch_search: Searched = ()
    batch_range: tuple[int, int] | None = None
    cost_error: float = 0.0  # the relative error of the told costs the rows are averaged over (0: none)
    without: PolicyRow | None = None  # the recommended policy without the workers it leaves out (hetsim.plan.without)
    equal: PolicyRow | None = None  # the equal row the gain is over (at the recommended batch for a throughput)
    equal_batch: int | None = None  # its global batch: the plan's, or the recommended policy's own (baseline)
    date: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))

    @property
    def left_out_workers(self) -> tuple[str, ...]:
        """The workers the recommended split gives no samples."""
        names = [w.name for w in self.scenario.workers]
        return tuple(names[i] for i, b in enumerate(self.recommended.split) if b == 0)

    @property
    def recommended_batch(self) -> int:
        """The recommended policy's global batch, its split's: a policy that varies the batch (such as
        ``goodput``) runs its own, not the plan's."""
        return sum(self.recommended.split) or self.global_batch

    @property
    def extrapolation(self) -> str | None:
        """Why the time to target at the recommended global batch is an extrapolation (outside
        the batches its ``[workload.efficiency]`` was fitted on), or None."""
        eff, batch = self.scenario.workload.efficiency, self.recommended_batch
        if eff is None or eff.fit_batches is None or not eff.extrapolates(batch):
            return None
        lo, hi = eff.fit_batches
        return (f"time to target extrapolates: global batch {batch} is outside the batches the "
                f"efficiency was fitted on ({lo:g}..{hi:g}); {REACH}")  # fmt: skip

    @property
    def cost_extrapolation(self) -> tuple[str, ...]:
        """Where the recommended split, or equal's it is compared with (:attr:`equal`), gives a
        worker samples outside the batches its cost curve was measured at
        (:mod:`hetsim.plan.extrapolated`)."""
        equal = [] if self.equal is None or self.equal is self.recommended else [self.equal]
        compared = [self.recommended, *equal]
        return extrapolated_costs(self.scenario, compared)

    @property
    def cost_unfitted(self) -> tuple[str, ...]:
        """Where the recommended split gives samples to a worker whose cost is a guess (a lower
        bound calibrate kept for a worker the trace left idle; :mod:`hetsim.plan.extrapolated`):
        a split can win on that guess alone."""
        return unfitted_costs(self.scenario, [self.recommended])

    def why_no_fragility(self) -> str | None:
        """Why the plan has no fragility (None: it has one)."""
        if self.cost_error > 0:
            return f"--cost-error {self.cost_error:g} already averages over costs that are off"
        if not self.recommended.closed_form:
            return "the recommended policy has no closed form: its figures are simulated"
        return None

    @property
    def varies_batch(self) -> bool:
        """Whether the recommended policy changes the global batch as it trains (``goodput``)."""
        return self.recommended.source is not None and self.recommended.source.varies_batch

    @property
    def learning_rate(self) -> dict[str, Any] | None:
        """The learning rate a trainer runs the recommended global batch at, where the scenario's
        efficiency was fitted under a rule (its time to target holds only then): the ``rule``,
        the ``base_batch`` and the rate set there (``base_lr``, None where the table does not
        record it), the ``factor`` to multiply it by, and the product (``lr``). None for a policy
        that changes the batch as it trains (a trainer scales its rate step by step)."""
        eff = self.scenario.workload.efficiency
        if eff is None or eff.lr_scaling is None or self.varies_batch:
            return None
        factor = lr_factor(eff.lr_scaling, self.recommended_batch, eff.base_batch)
        lr = None if eff.lr is None else eff.lr * factor
        return {"rule": eff.lr_scaling, "base_batch": eff.base_batch, "base_lr": eff.lr, "factor": factor, "lr": lr,
                "optimizer": eff.optimizer}  # fmt: skip

    @cached_property  # read by the text and by plan.json
    def target_interval(self) -> dict[str, float] | None:
        """The recommended time to target's 95% intervals from the efficiency fit's uncertainty:
        the steps' intervals (:func:`~hetsim.model.efficiency_fit.bands`) applied to the time,
        at the batch a step's gradient is worth (:attr:`PolicyRow.effective_batch`);
        ``low``/``high`` for the typical run, ``one_run_low`` and ``one_run_high`` for a single run
        (the runs' scatter added, where the table records it). None without the fit's covariance
        or a time to target, for a policy that changes the batch as it trains, and for an
        asynchronous one (its stale updates' discount is an assumption the fit knows nothing of)."""
        from hetsim.model.efficiency_fit import bands

        eff, rec, source = self.scenario.workload.efficiency, self.recommended, self.recommended.source
        if (
            eff is None
            or rec.time_to_target_s is None
            or self.varies_batch
            or not (source is None or source.synchronous)
        ):
            return None
        return bands(eff, rec.effective_batch, rec.time_to_target_s.value)[1] or None  # {}: no covariance

    def to_dict(self) -> dict[str, Any]:
        """One JSON object: ``recommended`` (``policy``, ``split``, ``global_batch``,
        ``predicted_step_s`` and the rest), ``policies`` (the rows), ``fragility``, the objective,
        the scenario (name and dict), hetsim's version, the date and the seed."""
        rec = self.recommended
        return {
            "hetsim_version": __version__,
            "date": self.date,
            "seed": self.seed,
            "objective": self.objective,
            "cost_error": self.cost_error,
            "confidence_level": LEVEL,
            "scenario": {"name": self.scenario.name, "config": self.scenario.to_dict()},
            "recommended": {
                "policy": rec.policy,
                "how": rec.how,
                "global_batch": self.recommended_batch,
                "split": list(rec.split),
                "workers": [w.name for w in self.scenario.workers],
                "left_out": list(self.left_out_workers),
                "predicted_step_s": rec.step_s.value,
                "throughput_sps": rec.throughput_sps.value,
                "time_to_target_s": None if rec.time_to_target_s is None else rec.time_to_target_s.value,
                "time_to_target_interval_s": self.target_interval,
                "gain_over_equal": self.gain_over_equal,
                "equal_global_batch": self.equal_batch,
                "extrapolation": self.extrapolation,
                "cost_extrapolation": list(self.cost_extrapolation),
                "cost_unfitted": list(self.cost_unfitted),
                "learning_rate": self.learning_rate,
            },
            "policies": [r.to_dict() for r in self.rows],
            "left_out_policies": [{"policy": p, "reason": why} for p, why in self.left_out],
            "batch_search": None
            if self.batch_range is None
            else {
                "range": list(self.batch_range),
                "candidates": [{"global_batch": b, "policy": p, "value": v} for b, p, v in self.batch_search],
            },  # fmt: skip
            "without_left_out": None
            if self.without is None
            else {
                "workers": list(self.left_out_workers),
                **self.without.to_dict(),
            },  # fmt: skip
            "fragility": {
                "max_factor": FRAGILITY_MAX,
                "workers": [f.to_dict() for f in self.fragility],
                "note": None if (why := self.why_no_fragility()) is None else f"not computed: {why}",
            },
        }


def planned_policies(scenario: Scenario, policies: Sequence[Policy] | None,
                     ) -> tuple[list[Policy], tuple[tuple[str, str], ...]]:  # fmt: skip
    """``policies`` checked against ``scenario``, or, for None, every registered
    policy that can run it and (name, why) for those that cannot. Two of one name are refused:
    the plan's rows, and what it recommends, are told apart by name."""
    if policies is None:
        built, skipped = scenario.runnable_policies()
        return list(built.values()), skipped
    if isinstance(policies, (str, Policy)):
        raise ConfigError("policies", f"give a list of Policy objects (as [hetsim.policies.Equal()]), not {policies!r}")
    if not policies:
        raise ConfigError("policies", "empty: give at least one Policy object, or None for every registered one")
    chosen = []
    for i, policy in enumerate(policies):
        try:
            chosen.append(scenario.make_policy(policy))
        except ConfigError as exc:  # policy[.parameter] -> policies.<i>[.parameter]
            field = f"policies.{i}{exc.field.removeprefix('policy')}" if exc.field.startswith("policy") else exc.field
            raise ConfigError(field, exc.problem) from None
    names = [p.name for p in chosen]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError("policies", f"{name!r} is given twice: a plan tells its policies apart by name")
    return chosen, ()


def recommend(rows: Sequence[PolicyRow], objective: str) -> PolicyRow | None:
    """The best row on ``objective`` (module docstring); None when no row has a value."""
    closed = _best([r for r in rows if r.closed_form], objective)
    simulated = _best([r for r in rows if not r.closed_form], objective)
    if simulated is None or (closed is not None and not _surely_better(simulated, closed, objective)):
        return closed
    return simulated


def _best(rows: Sequence[PolicyRow], objective: str) -> PolicyRow | None:
    best: PolicyRow | None = None
    best_value = 0.0
    for row in rows:
        value = row.value(objective)
        if value is not None and (best is None or not better(best_value, value, objective)):
            best, best_value = row, value  # a tie goes to the later row (module docstring)
    return best


def _surely_better(simulated: PolicyRow, closed: PolicyRow, objective: str) -> bool:
    """The simulated row's whole interval beats the closed form's value by more than rounding
    (:data:`ROUNDING`: a noise-free scenario's simulation has an interval of width 0, and the
    last digits of two ways of summing the same steps must not decide)."""
    field_name, more = OBJECTIVES[objective]
    estimate = getattr(simulated, field_name)
    value = closed.value(objective)
    assert estimate is not None and value is not None
    margin = ROUNDING * abs(value)
    return better(estimate.low if more else estimate.high, value + (margin if more else -margin), objective)


Baseline = tuple[PolicyRow | None, int | None]  # equal's row a gain is over, and its global batch


def baseline(rows: Sequence[PolicyRow], best: PolicyRow, objective: str, batch: int,
             equal_at: Callable[[int], PolicyRow | None] | None = None) -> Baseline:  # fmt: skip
    """The ``equal`` row ``best`` is compared with, and its global batch; (None, None) without
    one. ``rows`` are at the plan's ``batch``. A throughput is compared at ``best``'s own global
    batch: where it chose another (``goodput``), ``equal_at(batch)`` gives equal's row there
    (samples a second grow with the batch, whose statistical cost a throughput does not count; a
    time to the target counts it)."""
    equal = next((r for r in rows if r.policy == BASELINE), None)
    own = sum(best.split)
    if equal is not None and objective == "throughput" and equal_at is not None and own != sum(equal.split):
        return equal_at(own), own
    return equal, None if equal is None else batch


def gain_over_equal(best: PolicyRow, equal: PolicyRow | None, objective: str) -> float | None:
    """``best``'s value over ``equal``'s (equal's over best's for a time); None without both."""
    mine, theirs = best.value(objective), None if equal is None else equal.value(objective)
    if mine is None or theirs is None or mine <= 0 or theirs <= 0:
        return None
    return mine / theirs if OBJECTIVES[objective][1] else theirs / mine


def rows_at(scenario: Scenario, batch: int, policies: Sequence[Policy], cost_error: float,
            seed: int) -> tuple[PolicyRow, ...]:  # fmt: skip
    """Each policy's row at global ``batch`` (averaged over the same draws under ``cost_error``)."""
    at = with_batch(scenario, batch)
    rows = tuple(policy_row(at, policy, seed) for policy in policies)
    return robust_rows(at, rows, cost_error, seed) if cost_error > 0 else rows


def search_batch(scenario: Scenario, policies: Sequence[Policy], objective: str,
                 batch_range: tuple[int, int]) -> tuple[int, Searched]:  # fmt: skip
    """The best candidate batch of :func:`batch_grid` on the closed forms, and every candidate's
    best policy and value (module docstring)."""
    found = []
    for batch in batch_grid(*batch_range):
        candidate = with_batch(scenario, batch)
        rows = [r for r in (closed_form_row(candidate, p) for p in policies) if isinstance(r, PolicyRow)]
        best = _best(rows, objective)
        found.append((batch, None if best is None else best.policy, None if best is None else best.value(objective)))
    scored = [(b, v) for b, _, v in found if v is not None]
    if not scored:  # no closed form has a value: the rows are simulated at the candidate nearest the scenario's batch
        own = scenario.workload.global_batch
        return min((b for b, _, _ in found), key=lambda b: (abs(b - own), b)), tuple(found)
    chosen = scored[0]
    for b, v in scored[1:]:
        if better(v, chosen[1], objective):
            chosen = (b, v)
    return chosen[0], tuple(found)


def plan(scenario: Scenario, objective: str = "throughput", *, batch_range: tuple[int, int] | None = None,
         seed: int | None = None, policies: Sequence[Policy] | None = None,
         left_out: Sequence[tuple[str, str]] = (), cost_error: float = 0.0) -> Plan:  # fmt: skip
    """The plan for ``scenario`` (module docstring): ``policies`` (objects; default: every
    registered policy that can run it), predicted at the scenario's global batch, or at the best
    of ``batch_range``; the simulations seeded with ``seed`` (default: the scenario's).
    ``left_out``: (policy, why) for policies the caller left out of ``policies`` (recorded in the
    plan beside those that cannot run the scenario). ``cost_error`` > 0: every closed form
    averaged over costs off by that much (:mod:`hetsim.plan.robust`; no fragility then: the
    error is the question it asks)."""
    check_scenario(scenario)
    seed = check_seed(seed)
    cost_error = check_cost_error(cost_error)
    check_cluster(scenario)
    check_objective(objective, scenario)
    if batch_range is not None:
        check_batch_range(batch_range, scenario)
    chosen, skipped = planned_policies(scenario, policies)
    skipped = (*skipped, *left_out)
    seed = scenario.seed if seed is None else seed
    batch, searched = scenario.workload.global_batch, cast(Searched, ())
    if batch_range is not None:
        batch, searched = search_batch(scenario, chosen, objective, batch_range)
    at_batch = with_batch(scenario, batch)
    rows = rows_at(scenario, batch, chosen, cost_error, seed)
    best = recommend(rows, objective)

    def equal_at(other_batch: int) -> PolicyRow:
        return rows_at(scenario, other_batch, (scenario.make_policy(Equal()),), cost_error, seed)[0]

    if best is None:
        epochs = scenario.workload.epochs
        raise ConfigError("workload.epochs", f"no policy reaches the target in {epochs} epochs at global batch {batch}")
    equal, equal_batch = baseline(rows, best, objective, batch, equal_at)
    return Plan(
        scenario=scenario,
        objective=objective,
        seed=seed,
        global_batch=batch,
        rows=rows,
        recommended=best,
        gain_over_equal=gain_over_equal(best, equal, objective),
        equal=equal,
        equal_batch=equal_batch,
        fragility=fragility(at_batch, objective, rows, best) if best.closed_form and cost_error == 0 else (),
        left_out=skipped,
        batch_search=searched,
        batch_range=batch_range,
        cost_error=cost_error,
        without=without_left_out(at_batch, best, seed) if cost_error == 0 else None,
    )
