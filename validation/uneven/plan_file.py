"""Reading ``plan.json`` (``python -m hetsim plan SCENARIO --out plan.json``) for a training run.

A plan recommends a policy, its split of the global batch over the scenario's workers and the
global batch (``recommended``: ``policy``, ``split``, ``global_batch``, ``workers``, and
``learning_rate`` where its time to target rests on an efficiency fitted under a learning-rate
rule: the trainer's rate is then scaled to the plan's batch by it, :meth:`PlanChoice.lr`). Applied
to a world of ranks, rank r is the plan's r-th worker. A policy whose split is fixed before the
run (``equal``, ``proportional``, ``optimal``) runs the plan's split as it is: the plan made it
from the profiled costs, which the run may not have (:func:`planned_policy`); a policy that
re-splits as it observes (``dynamic``, ``adaptive``, ...) starts from its own initial split and
learns the rest from the run's own times. A plan made for another cluster (another number of
workers than ranks) is refused with one line (:class:`PlanError`, a ValueError).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hetsim.core.errors import ConfigError
from hetsim.core.registry import POLICIES
from hetsim.model.efficiency import LR_RULES, OPTIMIZERS, lr_factor
from hetsim.policies import Policy, make_policy, planned_policy, policy_class
from hetsim.policies.base import not_barrier, waits_for_every_worker


class PlanError(ConfigError):
    """A plan.json that cannot be used here; its message is one line naming the file and field."""


@dataclass(frozen=True)
class PlanChoice:
    """What a run takes from a plan: the policy's name, its split and the global batch."""

    policy: str
    split: tuple[int, ...]
    global_batch: int
    workers: tuple[str, ...]
    lr_factor: float | None = None  # the rate set at the efficiency's base batch times this (None: no rule)
    base_lr: float | None = None  # the rate the efficiency was measured with at its base batch, where recorded
    optimizer: str | None = None  # the optimizer it was measured with, where recorded

    def lr(self, given: float | None, default: float, optimizer: str = "sgd", option: str = "--lr") -> float:
        """The learning rate for the plan's global batch, for a trainer that runs ``optimizer``.
        Where the plan's time to target rests on an efficiency fitted under a learning-rate rule
        (``recommended.learning_rate``): the rate set at its base batch (``given``, else the one
        it was measured with) times the rule's factor; :class:`PlanError` where neither is known,
        or where the efficiency was measured with another optimizer (its rates are not this
        one's). Otherwise ``given``, else ``default``."""
        if self.lr_factor is None:
            return default if given is None else given
        if self.optimizer is not None and self.optimizer != optimizer:
            raise PlanError("--plan", f"its efficiency was measured with {self.optimizer}, and this trainer runs "
                            f"{optimizer}: its time to target and learning rate do not hold here")  # fmt: skip
        base = self.base_lr if given is None else given
        if base is None:
            raise PlanError(option, "the plan's efficiency holds for a learning rate set at its base batch, which "
                            "it does not record: give that rate")  # fmt: skip
        return base * self.lr_factor

    def lr_warning(self, given: float | None) -> str | None:
        """What a trainer should say where ``given`` (its ``--lr``) is not the rate the plan's
        efficiency was measured with: the plan's time to target does not hold at another rate.
        None where it is that rate, none is given, or the plan records none."""
        if given is None or self.base_lr is None or self.lr_factor is None or math.isclose(given, self.base_lr):
            return None
        text = (lambda v: f"{v!r}") if f"{given:g}" == f"{self.base_lr:g}" else (lambda v: f"{v:g}")  # told apart
        return (f"--lr {text(given)} is not the rate the plan's efficiency was measured with ({text(self.base_lr)} at "
                "its base batch): the plan's time to target does not hold at this rate")  # fmt: skip

    @property
    def fixed(self) -> bool:
        """Whether the run keeps the plan's split (a policy that does not re-split as it observes)."""
        cls = policy_class(self.policy, "recommended.policy")
        return not (cls.resplits or cls.varies_batch)

    def make(self) -> Policy:
        """A fresh policy object that applies the plan (see the module's docstring)."""
        return planned_policy(policy_class(self.policy), self.split) if self.fixed else make_policy(self.policy)

    def record(self) -> dict[str, Any]:
        """What a run folder's meta.json says of the plan it ran (``plan``, written by
        :func:`~validation.record.script_meta`), which ``validation compare`` simulates: the
        plan's split where the run kept it."""
        split = list(self.split)
        return {"policy": self.policy, "split": split, "global_batch": self.global_batch, "fixed": self.fixed,
                "lr_factor": self.lr_factor}  # fmt: skip


def load_plan(path: str | Path, world_size: int) -> PlanChoice:
    """The plan in ``path`` for a world of ``world_size`` ranks; :class:`PlanError` (one line)
    for a file that cannot be read, a field that is missing or wrong, or a plan for another
    number of workers."""
    where = str(path)
    if not where.strip():  # Path("") is the working folder
        raise PlanError("--plan", "an empty path: name the plan's file (hetsim plan --out)")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(where, f"cannot read a plan: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    rec = data.get("recommended") if isinstance(data, dict) else None
    if not isinstance(rec, dict):
        raise PlanError(f"{where}:recommended", "missing (write the plan with `python -m hetsim plan SCENARIO --out`)")
    policy, split, batch = rec.get("policy"), rec.get("split") or [], rec.get("global_batch")
    workers = rec.get("workers", [])
    if not isinstance(policy, str):
        raise PlanError(f"{where}:recommended.policy", f"must be a policy name, got {policy!r}")
    try:
        cls = policy_class(policy, "recommended.policy")
    except ConfigError as exc:
        raise PlanError(f"{where}:{exc.field}", exc.problem) from None
    if not waits_for_every_worker(cls):  # async, backup, ksync: hetsim simulates them, this trainer does not run them
        raise PlanError(f"{where}:recommended.policy", f"{not_barrier(policy, cls)}: plan with --wait-for-all")
    if cls.varies_batch:  # goodput: its batch needs the noise scale as it trains, which a plan's run does not measure
        raise PlanError(f"{where}:recommended.policy", f"{policy!r} changes the global batch as it trains, and this "
                        "trainer keeps the plan's: plan with --wait-for-all (`validation run --policies "
                        f"{policy}` runs it)")  # fmt: skip
    if (
        not isinstance(split, list)
        or not _ints(split)
        or not isinstance(batch, int)
        or sum(split) != batch
        or batch < 1
    ):
        raise PlanError(f"{where}:recommended.split", f"must be local batches summing to global_batch {batch!r}")
    if not isinstance(workers, list) or len(workers) not in (0, len(split)):
        raise PlanError(f"{where}:recommended.workers", f"must name the split's {len(split)} workers")
    if len(split) != world_size:
        names = f" ({', '.join(map(str, workers))})" if workers else ""
        ranks = "rank" if world_size == 1 else "ranks"
        raise PlanError(
            f"{where}:recommended.split",
            f"the plan is for {len(split)} workers{names}, this run has {world_size} {ranks}: plan for this cluster",
        )
    return PlanChoice(policy, tuple(split), batch, tuple(str(w) for w in workers), *_learning_rate(rec, batch, where))


def _learning_rate(rec: dict[str, Any], batch: int, where: str) -> tuple[float | None, float | None, str | None]:
    """``recommended.learning_rate``'s factor, base rate and optimizer (all None where the plan has
    none), checked: its rule one of hetsim's, its base batch a whole number, its factor the rule's
    at the plan's batch, its base rate a number > 0 or null, its rate the two's product (null
    with the base rate), its optimizer one of hetsim's or null."""
    lr = rec.get("learning_rate")
    field = f"{where}:recommended.learning_rate"
    if lr is None:
        return None, None, None
    if not isinstance(lr, dict):
        raise PlanError(field, f"must be a table (rule, base_batch, factor), got {type(lr).__name__}")
    rule, base, factor, base_lr = (cast(Any, lr.get(k)) for k in ("rule", "base_batch", "factor", "base_lr"))
    if rule not in LR_RULES:
        raise PlanError(f"{field}.rule", f"must be one of {', '.join(LR_RULES)}, got {rule!r}")
    if isinstance(base, bool) or not isinstance(base, int) or base < 1:
        raise PlanError(f"{field}.base_batch", f"must be a whole number >= 1, got {base!r}")
    expected = lr_factor(rule, batch, base)
    if not _positive(factor) or not math.isclose(factor, expected, rel_tol=1e-9):
        raise PlanError(f"{field}.factor", f"must be the {rule} rule's {expected:.6g} for global batch {batch} set "
                        f"at {base}, got {factor!r}")  # fmt: skip
    if base_lr is not None and not _positive(base_lr):
        raise PlanError(f"{field}.base_lr", f"must be a number > 0 or null, got {base_lr!r}")
    rate, optimizer = cast(Any, lr.get("lr")), lr.get("optimizer")
    want = None if base_lr is None else base_lr * expected
    if (rate is None) != (want is None) or (want is not None and not (_positive(rate) and math.isclose(rate, want))):
        raise PlanError(f"{field}.lr", f"must be base_lr times factor ({want!r}), got {rate!r}")
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise PlanError(f"{field}.optimizer", f"must be one of {', '.join(OPTIMIZERS)} or null, got {optimizer!r}")
    return float(factor), None if base_lr is None else float(base_lr), optimizer


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < math.inf


def _ints(value: list[Any]) -> bool:
    return bool(value) and all(isinstance(b, int) and b >= 0 for b in value)


def barrier_policy(name: str, option: str = "--policy") -> Policy:
    """A fresh policy ``name`` for a trainer that waits for every rank each step (DDP's) at its
    global batch: :class:`PlanError` (one line naming ``option``) for an unknown name, a policy
    that ends a step without every gradient (``async``, ``backup``, ``ksync``), which hetsim
    simulates and such a trainer would run as something else, or one that changes the global
    batch as it trains (``goodput``, which needs the noise scale such a trainer does not give it)."""
    if not isinstance(name, str) or name not in POLICIES:
        known = ", ".join(n for n, c in POLICIES.items() if waits_for_every_worker(c) and not c.varies_batch)
        raise PlanError(option, f"unknown policy {name!r} (the barrier policies: {known})")
    cls = policy_class(name, option)
    if not waits_for_every_worker(cls):
        raise PlanError(option, f"{not_barrier(name, cls)}: give a barrier policy (equal, proportional, dynamic, ...)")
    if cls.varies_batch:
        raise PlanError(option, f"{name!r} changes the global batch as it trains, and this trainer keeps its own "
                        f"(`validation run --policies {name}` runs it)")  # fmt: skip
    return make_policy(name)
