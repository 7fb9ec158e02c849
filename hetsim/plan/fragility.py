"""How fragile a plan's recommendation is (:mod:`hetsim.plan.planner`): for each worker, the factor by
which that one worker's cost must grow (:class:`SlowerCost`) before the recommendation changes,
either its policy (another closed form becomes better on the objective) or the set of workers
its split leaves out.

The factor is found by bisection over ``[1, FRAGILITY_MAX]`` in log space on the closed-form
predictions (:func:`hetsim.plan.rows.closed_form_row`): the recommendation at 16x is compared
first (unchanged: "beyond 16x"), then :data:`HALVINGS` halvings leave a bracket ``16^(1/128)``,
2.2%, wide; ``factor`` is its upper end (changed there), ``holds_to`` its lower (unchanged
there). Bisection assumes one change point in the range, as a threshold question does.

What keeps it cheap enough to run at every plan, of thousands of workers too:

* workers of the same spec that the recommended split either all leave out or all give samples
  share one answer, computed for the first of them (the model is symmetric in them but for ties
  broken by worker index, and for the sample the integer rounding gives some and not others);
  ``computed_for`` says which;
* the policy part is checked at 16x first; where no other policy wins there, none is taken to
  win below (the one change point again), and the bisection checks only the left-out set, which
  for a static split is the policy's ``partition`` alone;
* a challenger is predicted only where it could win: not a barrier policy when even
  :func:`barrier_bound` does not (each step at its split's largest expected time, without the
  noise's share of the barrier: from its first partition alone), nor a static one whose split
  the slowdown leaves as it was when its unslowed value did not win (the same split with one
  worker slower is no faster: the barrier, the renewal rate and the time to target are no
  better). One whose split changes is predicted: dropping a worker it gave one sample can make
  it faster (``proportional`` then ties ``optimal``, which keeps the recommendation, being
  listed later);
* the policies without a closed form (simulated in the plan) are not simulated again: the
  fragility is that of the choice among the closed forms. A plan whose recommended policy has no
  closed form gets none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from hetsim.model.costs import CostModel
from hetsim.model.partition import min_max_split, slowest_expected_s
from hetsim.plan.rows import PolicyRow, better, closed_form_row
from hetsim.policies import Policy, StepInfo, fresh
from hetsim.scenario.scenario import Scenario, WorkerGroup

FRAGILITY_MAX = 16.0
HALVINGS = 7
SLACK = 1e-9  # barrier_bound this much looser than its arithmetic: a bound that is tight (no noise) sums in
# another order than the prediction, and rounding must not make it prune a tie


class SlowerCost(CostModel):
    """``base``'s time times ``factor``: one worker made slower (built by :func:`slower_cost` only,
    so no file names it and no registry lists it)."""

    name: ClassVar[str] = "slower"
    base: CostModel
    factor: float

    def __init__(self, base: CostModel, factor: float) -> None:
        super().__init__()
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "factor", float(factor))

    def time_s(self, batch: Any) -> Any:
        return self.factor * self.base.time_s(batch)

    def batch_within(self, time_s: float) -> float:
        return self.base.batch_within(time_s / self.factor)

    def max_batch(self) -> int | None:
        return self.base.max_batch()

    def affine_terms(self) -> tuple[float, float] | None:  # an affine cost slowed stays affine: the closed-form split
        terms = self.base.affine_terms()
        return None if terms is None else (self.factor * terms[0], self.factor * terms[1])

    def measured(self) -> tuple[float, float] | None:  # slowed, it rests on the same measurements
        return self.base.measured()

    def bends(self) -> tuple[float, ...]:  # scaling the time moves no bend
        return self.base.bends()

    def _key(self) -> tuple[Any, ...]:  # equal (and hashed) by what it computes: lru caches key on specs
        return (type(self), self.base, self.factor)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.name, "factor": self.factor, "base": self.base.to_dict()}


def slower_cost(cost: CostModel, factor: float) -> CostModel:
    """``cost`` times ``factor`` (``cost`` itself at 1), any model alike: what the base declares of
    itself (affine terms, bends) the slowed one declares scaled, so a plug-in keeps its fast paths."""
    return cost if factor == 1.0 else SlowerCost(cost, factor)


def slowed(scenario: Scenario, worker: int, factor: float) -> Scenario:
    """``scenario`` with worker ``worker``'s cost times ``factor``: its group becomes one group per
    worker, each named as before (``v100#3``), sharing the group's models."""
    groups: list[WorkerGroup] = []
    start = 0
    for g in scenario.groups:
        if start <= worker < start + g.count:
            members = scenario.workers[start : start + g.count]
            slower = replace(members[worker - start], cost=slower_cost(g.spec.cost, factor))
            groups.extend(WorkerGroup(slower if i == worker else w) for i, w in enumerate(members, start))
        else:
            groups.append(g)
        start += g.count
    return replace(scenario, groups=tuple(groups))


@dataclass(frozen=True)
class Fragility:
    """Worker ``worker``'s answer: the slowdown ``factor`` at which the recommendation changes
    (None: not within :data:`FRAGILITY_MAX`), the largest tried at which it still holds
    (``holds_to``), what it changes to (``change``), and the worker it was computed for."""

    worker: int
    name: str
    factor: float | None
    holds_to: float
    change: str | None
    computed_for: int

    def to_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "name": self.name, "factor": self.factor, "holds_to": self.holds_to,
                "change": self.change, "computed_for": self.computed_for}  # fmt: skip


def left_out(split: Sequence[int]) -> frozenset[int]:
    return frozenset(i for i, b in enumerate(split) if b == 0)


class _Judge:
    """Whether, and how, the recommendation changes with one worker slowed by a factor: its
    left-out set (:meth:`moved`) and its policy (:meth:`beaten`), each slowed scenario built once."""

    def __init__(self, scenario: Scenario, objective: str, worker: int, recommended: PolicyRow,
                 rows: Sequence[PolicyRow]) -> None:  # fmt: skip
        self.scenario, self.objective, self.worker = scenario, objective, worker
        assert recommended.source is not None  # every row a plan makes keeps its policy
        self.policy, self.source = recommended.policy, recommended.source
        self.left = left_out(recommended.split)
        self.rows = [r for r in rows if r.closed_form and r.policy != self.policy]  # the challengers
        self.order = {r.policy: i for i, r in enumerate(rows)}  # ties go to the policy listed last
        self.static = not self.source.resplits
        self.names = [w.name for w in scenario.workers]
        self._seen: dict[float, tuple[Scenario, PolicyRow | None, tuple[int, ...]]] = {}
        self._balanced: dict[float, float] = {}  # T*, the least largest expected time of a split, per factor

    def _at(self, factor: float, row_needed: bool) -> tuple[Scenario, PolicyRow | None, tuple[int, ...]]:
        """The slowed scenario, the recommended policy's row there (a static policy's only when
        ``row_needed``: its split is its first partition) and its split."""
        if factor not in self._seen:
            s = slowed(self.scenario, self.worker, factor)
            row = None if self.static else self._row(s)
            self._seen[factor] = (s, row, _first_split(s, self.source) if row is None else row.split)
        s, row, split = self._seen[factor]
        if row is None and row_needed:
            row = self._row(s)
            self._seen[factor] = (s, row, split)
        return s, row, split

    def _row(self, s: Scenario) -> PolicyRow:
        row = closed_form_row(s, self.source)
        assert isinstance(row, PolicyRow), row  # a closed form does not depend on the costs
        return row

    def moved(self, factor: float) -> str | None:
        """How the left-out set changes at ``factor`` (None: it does not)."""
        new = left_out(self._at(factor, row_needed=False)[2])
        if new == self.left:
            return None
        out, back = sorted(new - self.left), sorted(self.left - new)
        if out == [self.worker] and not back:
            return "leaves it out"
        parts = ([f"leaves out {', '.join(self.names[i] for i in out)}"] if out else []) + (
            [f"takes back {', '.join(self.names[i] for i in back)}"] if back else [])  # fmt: skip
        return "; ".join(parts)

    def beaten(self, factor: float) -> str | None:
        """``recommends P``, P the best of the other closed forms where one takes the
        recommendation at ``factor`` (None: none does)."""
        s, row, _ = self._at(factor, row_needed=True)
        mine = None if row is None else row.value(self.objective)
        best: tuple[str, float] | None = None
        for r in self.rows:
            if not self._may_win(factor, s, r, mine):
                continue
            assert r.source is not None
            other = closed_form_row(s, r.source)
            value = other.value(self.objective) if isinstance(other, PolicyRow) else None
            if value is not None and self._wins(r.policy, value, mine):
                if best is None or better(value, best[1], self.objective):
                    best = (r.policy, value)
        return None if best is None else f"recommends {best[0]}"

    def _may_win(self, factor: float, s: Scenario, r: PolicyRow, mine: float | None) -> bool:
        """Whether challenger ``r`` could take the recommendation on ``s`` (module docstring): not
        when :func:`barrier_bound` does not win, nor when its split is as it was and its unslowed
        value did not win."""
        policy = r.source
        assert policy is not None  # every row a plan makes keeps its policy
        first = _first_split(s, policy)
        if policy.synchronous and not policy.varies_batch:
            if factor not in self._balanced:
                hints = s.hints()
                split = min_max_split(hints, s.workload.global_batch, [h.max_batch for h in hints])
                self._balanced[factor] = slowest_expected_s(hints, split)
            bound = barrier_bound(s, self.objective, first, self._balanced[factor] if policy.resplits else None)
            if bound is None or not self._wins(r.policy, bound, mine):
                return False
        if not policy.resplits and first == r.split:
            return self._wins(r.policy, r.value(self.objective), mine)
        return True

    def _wins(self, name: str, value: float | None, mine: float | None) -> bool:
        """Whether ``name`` at ``value`` takes the recommendation from the recommended policy at
        ``mine``: better, or as good and listed later (:func:`hetsim.plan.planner.recommend`'s rule)."""
        if value is None:
            return False
        if mine is None:
            return True
        return better(value, mine, self.objective) or (value == mine and self.order[name] > self.order[self.policy])


def barrier_bound(scenario: Scenario, objective: str, first: Sequence[int], balanced_s: float | None) -> float | None:
    """The best value on ``objective`` a barrier policy that waits for every worker and starts
    with split ``first`` can have on ``scenario`` (None: it cannot reach the target): every step
    at least its split's largest expected time (``E[max_i X_i] >= max_i E[X_i]``), which after the
    first epoch is at least ``balanced_s``, the least over splits, for a policy that re-splits
    (given), else that of ``first``; a step's end is increasing and convex in its barrier (Jensen,
    with buckets); and a step's progress is at most the whole batch's gain (exact for a constant
    noise scale; a schedule's moves too slowly with progress to undo it)."""
    wl = scenario.workload
    buckets = scenario.buckets()

    def end_s(barrier_s: float) -> float:
        return float(buckets.end_s(barrier_s)) if buckets is not None else barrier_s + scenario.allreduce_s()

    first_s = end_s(slowest_expected_s(scenario.hints(), first))
    later_s = first_s if balanced_s is None else end_s(balanced_s)
    steps_s = np.where(np.arange(wl.total_steps) < wl.steps_per_epoch, first_s, later_s)
    if objective == "throughput":
        return wl.global_batch / float(steps_s.mean()) * (1.0 + SLACK)
    efficiency = wl.efficiency
    assert efficiency is not None and efficiency.target_steps is not None  # plan.check_objective
    progress = efficiency.progress(np.full(wl.total_steps, float(wl.global_batch)))
    if progress[-1] < efficiency.target_steps:
        return None
    return float(steps_s[: int(np.searchsorted(progress, efficiency.target_steps)) + 1].sum()) * (1.0 - SLACK)


def _first_split(scenario: Scenario, policy: Policy) -> tuple[int, ...]:
    """``policy``'s first split, as :func:`hetsim.analysis.analytic.predict` takes it (a static policy's
    split; a re-splitting one's in the first epoch)."""
    wl = scenario.workload
    policy = fresh(policy)
    policy.reset(scenario.n_workers, wl.global_batch, scenario.hints())
    return tuple(policy.partition(StepInfo(0, 0, 0, wl.steps_per_epoch)))


def threshold(judge: _Judge) -> tuple[float | None, float, str | None]:
    """(factor, holds_to, change) for the judge's worker: the check at :data:`FRAGILITY_MAX`,
    then the bisection (module docstring)."""
    beaten = judge.beaten(FRAGILITY_MAX)
    policies = beaten is not None  # else no policy wins below either: the left-out set alone is bisected
    top = judge.moved(FRAGILITY_MAX) or beaten
    if top is None:
        return None, FRAGILITY_MAX, None
    lo, hi, change = 1.0, FRAGILITY_MAX, top
    for _ in range(HALVINGS):
        mid = math.sqrt(lo * hi)
        found = judge.moved(mid) or (judge.beaten(mid) if policies else None)
        if found is None:
            lo = mid
        else:
            hi, change = mid, found
    return hi, lo, change


def fragility(scenario: Scenario, objective: str, rows: Sequence[PolicyRow],
              recommended: PolicyRow) -> tuple[Fragility, ...]:  # fmt: skip
    """Every worker's :class:`Fragility` for ``recommended`` (a closed-form row of ``rows``)."""
    classes: dict[object, list[int]] = {}
    for i, w in enumerate(scenario.workers):
        classes.setdefault((replace(w, name=""), recommended.split[i] == 0), []).append(i)
    names = [w.name for w in scenario.workers]
    out: list[Fragility] = []
    for members in classes.values():
        first = members[0]
        factor, holds, change = threshold(_Judge(scenario, objective, first, recommended, rows))
        out.extend(Fragility(i, names[i], factor, holds, change, first) for i in members)
    return tuple(sorted(out, key=lambda f: f.worker))
