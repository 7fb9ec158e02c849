"""A user's own script's run folder (validation.uneven): the writer's files are whole whether or
not the script flushed, a writer without a folder still serves the probe's costs, the plan a run
applied is recorded and ``compare`` simulates the plan's split where the run kept it. Run folders
made by hand with the run's own writer: no training, no processes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hetsim.core.errors import ConfigError
from hetsim.model.costs import Affine, Table
from hetsim.policies import Proportional, planned_policy
from validation.compare import compare_run, run_policy
from validation.record import RankTiming, RunWriter, step_rows
from validation.run_folder import load_run
from validation.uneven.plan_file import PlanChoice

META = {"global_batch": 8, "steps_per_epoch": 2, "epochs": 1, "world_size": 2, "gradient_mb": 0.1,
        "policies": ["optimal"], "config": {"seed": 0}}  # fmt: skip
PER_SAMPLE_S = (0.001, 0.003)  # rank 1 three times as slow: the probe's fit gives optimal 6/2


def probe_and_policy(writer: RunWriter, split: tuple[int, int]) -> None:
    """A probe of four steps, then one epoch of ``optimal`` at ``split``."""
    for step, probe_split in enumerate([(2, 6), (6, 2), (4, 4), (1, 7)]):
        timings = [RankTiming(s * b + 0.001, 0.001, 0.001) for s, b in zip(PER_SAMPLE_S, probe_split)]
        writer.add_steps(step_rows("probe", 0, step, 0.05 * step, probe_split, timings))
    for step in range(2):
        timings = [RankTiming(s * b + 0.001, 0.001, 0.001) for s, b in zip(PER_SAMPLE_S, split)]
        writer.add_steps(step_rows("optimal", 0, step, 0.3 + 0.02 * step, split, timings))
    writer.add_epoch(lambda: {"policy": "optimal", "epoch": 0, "train_loss": 1.0, "test_loss": 1.1,
                              "test_accuracy": 0.5, "elapsed_s": 0.04, "split": "/".join(map(str, split)),
                              "global_batch": 8, "noise_scale": None})  # fmt: skip


def test_finish_writes_the_whole_trace_where_the_script_never_flushed(tmp_path):
    """finish marked the folder complete with no trace in it, and compare said the run had died."""
    writer = RunWriter(tmp_path / "run", META)
    probe_and_policy(writer, (6, 2))
    writer.finish(["optimal"])  # no flush() before
    assert json.loads((tmp_path / "run/meta.json").read_text())["status"] == "complete"
    assert len(pd.read_parquet(tmp_path / "run/trace.parquet")) == 2 * 6
    assert len(pd.read_csv(tmp_path / "run/epochs.csv")) == 1
    assert load_run(tmp_path / "run").policies == ["optimal"]


def test_a_writer_without_a_folder_keeps_the_rows_and_writes_nothing(tmp_path, monkeypatch):
    """Without a folder rank 0 dropped the rows, so a cost-reading policy after the probe failed
    mid-run (its costs are the probe's rows read back from the writer)."""
    monkeypatch.chdir(tmp_path)
    writer = RunWriter(None, META)
    probe_and_policy(writer, (6, 2))
    assert len(writer.trace_frame()) == 12
    summary = writer.finish(["optimal"])
    assert [entry["final_batches"] for entry in summary["policies"]] == [[6, 2]]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_compare_simulates_the_plans_split_where_the_run_kept_it(tmp_path):
    """A run of a plan's ``optimal`` split (made from the profile) was predicted at the split
    optimal makes from the run's probe: another split, another step time."""
    plan = PlanChoice("optimal", (5, 3), 8, ("w0", "w1"))
    assert plan.fixed and plan.record() == {"policy": "optimal", "split": [5, 3], "global_batch": 8, "fixed": True,
                                             "lr_factor": None}  # fmt: skip
    for name, recorded in (("kept", plan.record()), ("none", None)):
        writer = RunWriter(tmp_path / name, {**META, **({"plan": recorded} if recorded else {})})
        probe_and_policy(writer, (5, 3))
        writer.finish(["optimal"])
    kept, _ = compare_run(load_run(tmp_path / "kept"))
    own, _ = compare_run(load_run(tmp_path / "none"))
    assert list(kept[0].predicted.final_batches) == [5, 3]  # the plan's
    assert list(own[0].predicted.final_batches) == [6, 2]  # optimal on the probe's costs
    assert abs(kept[0].step_error) < abs(own[0].step_error)


def test_a_plan_that_re_splits_is_simulated_as_its_policy():
    adaptive = PlanChoice("adaptive", (5, 3), 8, ("w0", "w1"))
    assert not adaptive.fixed
    made = object()
    assert run_policy({"plan": adaptive.record()}, "adaptive", made) is made  # type: ignore[arg-type]
    assert run_policy({}, "optimal", made) is made  # type: ignore[arg-type]
    kept = run_policy({"plan": PlanChoice("optimal", (5, 3), 8, ("a", "b")).record()}, "optimal", made)  # type: ignore[arg-type]
    assert type(kept).planned == (5, 3) and kept.weighted_gradients


def test_the_planned_policy_keeps_its_split_and_its_classs_traits():
    policy = planned_policy(Proportional, (5, 3))
    policy.reset(2, 8)
    assert policy.initial_split() == (5, 3) and policy.name == "proportional" and policy.weighted_gradients
    with pytest.raises(ValueError, match=r"the plan's split \[5, 3\] is not 2 ranks' 9"):
        policy.reset(2, 9)
    with pytest.raises(
        ConfigError, match=r"^policy: give a Policy class \(as hetsim\.policies\.Optimal\), not 'equal'$"
    ):
        planned_policy("equal", (64, 64))  # type: ignore[arg-type]  # a plan file's name is resolved as it is read


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_compare_fits_the_cost_model_asked_for(tmp_path):
    writer = RunWriter(tmp_path / "run", META)
    probe_and_policy(writer, (6, 2))
    writer.finish(["optimal"])
    for model in (Affine, Table):
        _, calibration = compare_run(load_run(tmp_path / "run"), model=model)
        assert {w.model for w in calibration.workers} == {model.name}


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_compare_says_a_run_did_not_complete_and_passes_it_no_tolerance(tmp_path, capsys):
    """compare of a run whose rank was killed, or that was stopped, printed its one policy's
    table and passed --tolerance 0.5 without a word."""
    from validation.cli import main

    writer = RunWriter(tmp_path / "run", {**META, "policies": ["optimal", "equal"]})
    probe_and_policy(writer, (6, 2))
    writer.flush()  # never finished: meta.json still says running
    assert main(["compare", str(tmp_path / "run"), "--tolerance", "0.5"]) == 1
    err = capsys.readouterr().err
    assert "validation: note: this run did not complete (status running); compared 1 of its 2 policies" in err
    assert "a run that did not complete passes no tolerance" in err
    writer.finish(["optimal"])
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "run"), "--tolerance", "0.5"]) == 0
    assert "did not complete" not in capsys.readouterr().err
