"""One simulated run: scenario + policy (an object, or None: the scenario's own) -> Trace (or,
without keeping the trace, its Summary), through the engine given (None by default, ``auto`` on the
command line: the fastest engine that runs the policy; every engine gives the same trace)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetsim.engines import Engine, check_engine, engine_for
from hetsim.model.trace import Trace, TraceBuilder
from hetsim.policies import Policy
from hetsim.run.metrics import Summary, summarize, summary_of
from hetsim.run.summary_recorder import SummaryRecorder, Tee
from hetsim.scenario.config import check_run_size
from hetsim.scenario.scenario import Scenario, check_scenario, check_seed


def check_kept_size(scenario: Scenario, synchronous: bool, every: int) -> None:
    """Refuse a run too large for what it keeps: every step (``every`` 1), each ``every``-th, or
    none (0; an async run keeps its whole trace whatever ``every`` says)."""
    if not synchronous:
        every = 1
    check_run_size(scenario, keep_trace=every > 0, every=max(every, 1))


def simulate(
    scenario: Scenario,
    policy: Policy | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
    engine: Engine | None = None,
) -> Trace:
    """Run ``policy`` on ``scenario`` with ``seed`` (default: the scenario's). ``policy`` is a
    :class:`~hetsim.policies.Policy` object (reset at the start of the run), or None: the
    scenario's own ``[policy]``, built with its table's parameters, then ``params``. ``engine``
    is an :class:`~hetsim.engines.Engine` object (:class:`~hetsim.engines.SimPyEngine`, the
    reference, :class:`~hetsim.engines.VectorEngine` or another), or None (default, ``auto`` on
    the command line: the supporting engine of highest priority, ``vector`` where it runs the
    policy)."""
    check_scenario(scenario)
    seed = check_seed(seed)
    check_engine(engine)
    check_kept_size(scenario, True, 1)
    policy_obj = scenario.make_policy(policy, params)
    return engine_for(engine, policy_obj).run(scenario, policy_obj, seed)


def simulate_summary(
    scenario: Scenario,
    policy: Policy | None = None,
    *,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
    engine: Engine | None = None,
) -> Summary:
    """:func:`simulate`'s run, summarised as it goes (``--trace none``): a barrier policy's steps
    go to a :class:`~hetsim.run.summary_recorder.SummaryRecorder`, so memory is O(steps + workers) instead of
    O(steps x workers); an async run keeps its trace (one row per update) and summarises it."""
    return simulate_sampled(scenario, policy, 0, params=params, seed=seed, engine=engine)[1]


def simulate_sampled(
    scenario: Scenario,
    policy: Policy | None,
    every: int,
    *,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
    engine: Engine | None = None,
) -> tuple[Trace | None, Summary]:
    """:func:`simulate_summary`, also keeping each ``every``-th step's rows (``--trace sample``;
    0: none). Returns that trace (its ``step`` column the run's step numbers; None for 0) and the
    Summary of the whole run. An async run keeps its whole trace (one row per update)."""
    check_scenario(scenario)
    seed = check_seed(seed)
    check_engine(engine)
    policy_obj = scenario.make_policy(policy, params)
    check_kept_size(scenario, policy_obj.synchronous, every)
    runner = engine_for(engine, policy_obj)
    if not policy_obj.synchronous:
        trace = runner.run(scenario, policy_obj, seed)
        return (trace if every else None), summarize(trace, scenario)
    summary = SummaryRecorder(policy_obj.name, scenario.n_workers, scenario.hints(), policy_obj.weighted_gradients)
    sample = (
        TraceBuilder(
            policy_obj.name, scenario.n_workers, scenario.workload.total_steps, every, policy_obj.weighted_gradients
        )
        if every
        else None
    )
    runner.record(scenario, policy_obj, summary if sample is None else Tee(summary, sample), seed)
    return (None if sample is None else sample.finish()), summary_of(summary.totals(), scenario)
