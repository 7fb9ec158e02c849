"""What a plan would give without the workers it leaves out.

A worker whose split is 0 still takes part in every exchange: a DDP rank all-reduces a zero
gradient, and the network models count every worker of the scenario. A job that leaves such a
worker out of the cluster altogether (fewer ranks) saves its share of the exchange, so a plan
that leaves workers out also predicts its recommended policy on the cluster without them, for
the user to weigh against the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hetsim.core.errors import ConfigError
from hetsim.plan.rows import PolicyRow, policy_row
from hetsim.scenario.scenario import Scenario, WorkerGroup


def without_workers(scenario: Scenario, split: Sequence[int]) -> Scenario | None:
    """``scenario`` without the workers ``split`` gives no samples (its groups' counts lowered,
    emptied groups dropped); None where it leaves none out or would leave fewer than one."""
    groups, start = [], 0
    for group in scenario.groups:
        kept = sum(1 for b in split[start : start + group.count] if b > 0)
        start += group.count
        if kept:
            groups.append(WorkerGroup(group.spec, kept))
    if not groups or sum(g.count for g in groups) == scenario.n_workers:
        return None
    return replace(scenario, groups=tuple(groups))


def without_left_out(scenario: Scenario, best: PolicyRow, seed: int) -> PolicyRow | None:
    """``best``'s policy on ``scenario`` (at the plan's global batch) without the workers its
    split leaves out, as the plan's rows are made (closed form or simulation); None where it
    leaves none out, or the rest cannot run it (their ``max_batch``, a policy's own parameters).
    Not under ``--cost-error``: its draws of costs for fewer workers would not be the plan's."""
    smaller = without_workers(scenario, best.split)
    if smaller is None:
        return None
    assert best.source is not None  # every row a plan makes keeps its policy
    try:
        return policy_row(smaller, best.source, seed)
    except ConfigError:
        return None
