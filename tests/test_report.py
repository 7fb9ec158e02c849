"""Report building: which traces the plots of a results folder show."""

from __future__ import annotations

import dataclasses

import pytest

from hetsim.report.build import cell_plots, resplits
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario

POLICIES = ("equal", "proportional", "dynamic", "adaptive", "async")


@pytest.fixture(scope="module")
def traces():
    scenario = load_scenario("paper", ["workload.epochs=2"])
    return {p: simulate(scenario, scenario.named_policy(p), seed=2) for p in POLICIES}


def test_resplits_asks_the_policy_class():
    assert resplits("dynamic") and resplits("dynamic-enhanced") and resplits("adaptive")
    assert not resplits("equal") and not resplits("optimal") and not resplits("no-such-policy")


def test_cell_plots_choose_by_traits_and_throughput(traces):
    cell = cell_plots(traces)
    assert list(cell.utilization) == list(POLICIES)
    assert [t.policy for t in cell.split] == ["dynamic", "adaptive"]
    synchronous = [p for p in POLICIES if traces[p].synchronous]
    best = max(synchronous, key=lambda p: summarize(traces[p]).throughput_sps)
    assert [t.policy for t in cell.gantt] == list(dict.fromkeys(["equal", "dynamic", best]))
    assert all(t.synchronous for t in cell.gantt)


def test_cell_plots_without_baseline_or_resplitting_policy(traces):
    renamed = {"mine": dataclasses.replace(traces["dynamic"], policy="mine"), "async": traces["async"]}
    cell = cell_plots(renamed)
    assert [t.policy for t in cell.split] == ["mine"]  # unregistered: not re-splitting; the first synchronous trace
    assert [t.policy for t in cell.gantt] == ["mine"]
    assert cell_plots({"async": traces["async"]}).gantt == []


@pytest.mark.slow  # a whole sweep: over ~0.15 s
def test_a_sweep_without_equal_says_why_its_table_is_empty(tmp_path, capsys):
    import tomli_w

    from hetsim.cli.main import main
    from tests.test_sweep import sweep_dict

    raw = sweep_dict(replications=1) | {"policies": ["dynamic", "optimal"]}
    (tmp_path / "s.toml").write_text(tomli_w.dumps(raw))
    assert main(["sweep", str(tmp_path / "s.toml"), "--jobs", "1", "--runs", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("-: no value (no equal run to compare with: add equal to the sweep's policies)")
