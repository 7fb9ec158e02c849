"""One simulated run: scenario + policy name -> Trace, through the chosen engine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetsim.engines import check_engine, engine_for
from hetsim.scenario import Scenario
from hetsim.trace import Trace


def simulate(
    scenario: Scenario,
    policy: str | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
    engine: str = "simpy",
) -> Trace:
    """Run ``policy`` (default: the scenario's ``[policy]``) on ``scenario`` with ``seed``
    (default: the scenario's). Parameters come from the scenario's ``[policy]`` table when
    the policy is the scenario's own, else from ``params``. ``engine`` is ``simpy`` (the
    reference), ``vector`` (barrier policies, the same trace faster), another registered
    engine, or ``auto`` (the supporting engine of highest priority: ``vector`` where it runs
    the policy)."""
    check_engine(engine)
    policy_obj = scenario.make_policy(policy, params)
    return engine_for(engine, policy_obj).run(scenario, policy_obj, seed)
