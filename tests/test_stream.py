"""Runs summarised as they go (``--trace none``): the Summary of the full trace, without it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hetsim.scenario.config
from hetsim.cli.main import main
from hetsim.engines import VectorEngine, engine_named
from hetsim.policies import POLICIES, Adaptive
from hetsim.run.metrics import Summary, summarize
from hetsim.run.simulate import simulate, simulate_sampled, simulate_summary
from hetsim.scenario.config import load_scenario
from tests.test_vector_engine import EXACT_COLUMNS, FLOAT_COLUMNS, policies, scenarios

EFFICIENT = ["workload.efficiency.noise_scale=[[0, 100], [50, 2000]]", "workload.efficiency.base_batch=64",
             "workload.efficiency.target_steps=50"]  # fmt: skip


def assert_same_summary(full: Summary, streamed: Summary) -> None:
    """Equal, but for the rounding of sums taken a block at a time (per-worker compute, waits)."""
    for field in dataclasses.fields(Summary):
        a, b = getattr(full, field.name), getattr(streamed, field.name)
        if isinstance(a, float):
            assert b == pytest.approx(a, rel=1e-12, abs=1e-15), field.name
        elif isinstance(a, tuple) and a and isinstance(a[0], float):
            np.testing.assert_allclose(b, a, rtol=1e-12, err_msg=field.name)
        else:
            assert a == b, field.name


@pytest.mark.slow
@settings(max_examples=150)
@given(st.data())
def test_a_generated_run_summarised_as_it_goes_equals_the_summary_of_its_trace(data):
    scenario = data.draw(scenarios())
    name, params = data.draw(policies(scenario.n_workers))
    engine = data.draw(st.sampled_from(["simpy", "vector"]))
    full = summarize(simulate(scenario, scenario.named_policy(name, params), engine=engine_named(engine)), scenario)
    assert_same_summary(
        full, simulate_summary(scenario, scenario.named_policy(name, params), engine=engine_named(engine))
    )


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["paper", "shared-cluster", "mixed-gpus", "workstation"])
def test_builtin_scenarios_every_policy_both_engines(scenario):
    s = load_scenario(scenario, ["workload.epochs=2", *EFFICIENT])
    recovered = []
    for name, cls in POLICIES.items():
        for engine in ("simpy", "vector") if cls.synchronous else ("simpy",):
            full = summarize(simulate(s, s.named_policy(name), engine=engine_named(engine)), s)
            assert_same_summary(full, simulate_summary(s, s.named_policy(name), engine=engine_named(engine)))
            recovered.append(full.recovered_share)
    assert any(r is not None for r in recovered) == (scenario == "shared-cluster")  # its episodes are compared


def test_cli_trace_none_prints_the_same_summaries_and_writes_no_trace(tmp_path, capsys):
    argv = ["simulate", "shared-cluster", "--set", "workload.epochs=2", "--json"]
    assert main(argv) == 0
    full = json.loads(capsys.readouterr().out)
    assert main([*argv, "--trace", "none", "--out", str(tmp_path / "out")]) == 0
    streamed = json.loads(capsys.readouterr().out)
    assert [s["policy"] for s in streamed] == [s["policy"] for s in full]
    for a, b in zip(full, streamed):
        assert b["mean_step_s"] == a["mean_step_s"] and b["recovery_steps"] == a["recovery_steps"]
        assert b["recovered_share"] == a["recovered_share"]
        assert b["mean_utilization"] == pytest.approx(a["mean_utilization"], rel=1e-12)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json"]


def test_a_run_too_large_for_its_trace_runs_summarised(monkeypatch, capsys):
    monkeypatch.setattr(hetsim.scenario.config, "MAX_TRACE_ROWS", 1000)  # paper, 1 epoch: 390 rows
    argv = ["simulate", "paper", "--policy", "dynamic", "--set", "workload.epochs=3"]
    assert main(argv) == 2
    assert "trace rows, more than the 1e+03 a run can hold" in capsys.readouterr().err
    assert main([*argv, "--trace", "none"]) == 0


@pytest.mark.parametrize(("policy", "engine"), [("dynamic", "vector"), ("adaptive", "vector"), ("backup", "simpy"),
                                                ("goodput", "simpy"), ("async", "simpy")])  # fmt: skip
def test_a_sampled_trace_is_every_kth_step_of_the_full_one(policy, engine):
    s = load_scenario("shared-cluster", ["workload.epochs=2", *EFFICIENT])
    full = simulate(s, s.named_policy(policy), engine=engine_named(engine))
    sampled, summary = simulate_sampled(s, s.named_policy(policy), 7, engine=engine_named(engine))
    assert sampled is not None
    assert_same_summary(summarize(full, s), summary)
    if not full.synchronous:  # async keeps its whole trace
        assert sampled == full
        return
    keep = full.step % 7 == 0
    for column in (*EXACT_COLUMNS, *FLOAT_COLUMNS):
        np.testing.assert_array_equal(getattr(sampled, column), getattr(full, column)[keep], err_msg=column)


def test_cli_sample_writes_the_sampled_trace_and_checks_its_step(tmp_path, capsys):
    argv = ["simulate", "paper", "--policy", "dynamic", "--set", "workload.epochs=1", "--trace", "sample"]
    assert main([*argv, "--sample-every", "50", "--out", str(tmp_path / "out")]) == 0
    import pandas as pd

    assert sorted(pd.read_parquet(tmp_path / "out" / "trace.parquet")["step"].unique()) == [0, 50, 100, 150]
    capsys.readouterr()
    assert main([*argv, "--sample-every", "0"]) == 2
    assert capsys.readouterr().err == "hetsim: error: --sample-every: must be in [1, 1099511627776], got 0\n"


def test_a_sampled_run_is_sized_by_the_rows_it_keeps_and_every_run_before_any_starts(monkeypatch, capsys):
    monkeypatch.setattr(hetsim.scenario.config, "MAX_TRACE_ROWS", 1000)  # paper, 3 epochs: 585 steps x 2 workers
    argv = ["simulate", "paper", "--set", "workload.epochs=3"]
    assert main([*argv, "--policy", "dynamic", "--trace", "sample", "--sample-every", "2"]) == 0  # 586 rows
    capsys.readouterr()
    assert main([*argv, "--policy", "dynamic,async", "--trace", "none"]) == 2  # async keeps its trace: refused first
    assert capsys.readouterr() == ("", "hetsim: error: workload: 585 steps x 2 workers = 1.17e+03 trace rows, more "
                                       "than the 1e+03 a run can hold: fewer epochs or a larger global batch (or "
                                       "--trace none)\n")  # fmt: skip


def test_a_policy_resplitting_every_step_under_episodes_keeps_only_its_onsets():
    from hetsim.engines.vector import record_vector
    from hetsim.run.summary_recorder import SummaryRecorder

    s = load_scenario("shared-cluster", ["workload.epochs=6"])
    recorder = SummaryRecorder("adaptive", s.n_workers, s.hints())
    record_vector(s, s.make_policy(Adaptive()), recorder)
    trace = simulate(s, Adaptive(), engine=VectorEngine())
    batches = trace.per_step("local_batch")
    assert (batches[1:] != batches[:-1]).any(axis=1).sum() > 20  # a run (a Recovery.add) at each of many re-splits
    assert recorder.recovery is not None and 1 <= len(recorder.recovery.recovered) <= 10  # all it keeps: per onset
    full = summarize(trace, s)
    assert recorder.totals().recovered == (full.recovery_steps, full.recovered_share)
