"""The analysis commands: analyze, calibrate and import-logs; outputs and one-line errors."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pandas as pd
import pytest

from hetsim.cli.main import main
from hetsim.model.trace import COLUMNS
from hetsim.scenario.config import load_scenario
from hetsim.traces.reference_logs import reference_run_path

DP_01 = "2021_06_16_07_47_00_VGG16"


def _one_line_error(capsys, *needles: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hetsim: error: "), err
    for needle in needles:
        assert needle in err, err


def test_analyze_json_prediction_inside_the_ci(capsys):
    assert main(["analyze", "paper", "--policy", "equal,optimal,dynamic", "--json", "--set", "workload.epochs=4"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["equal", "optimal", "dynamic"]
    for r in rows:
        assert r["ci_low_s"] <= r["simulated_step_s"] <= r["ci_high_s"]
        assert r["inside"] is True and abs(r["relative_error"]) < 0.01
        assert r["prediction"]["mean_step_s"] == r["predicted_step_s"]
    assert [r["runs"] for r in rows] == [1, 1, 10]  # dynamic's split follows the noise: 10 seeded runs
    assert rows[2]["prediction"]["epochs_to_1pct"] is not None
    assert len(rows[2]["prediction"]["trajectory"]) == 4


def test_analyze_table(capsys):
    assert main(["analyze", "paper", "--policy", "equal", "--set", "workload.epochs=1"]) == 0
    out = capsys.readouterr().out
    assert "predicted ms" in out and "95% CI" in out and "\nequal " in out


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_analyze_says_the_async_rate_is_the_long_run_one(capsys):
    # 10 updates with a 0.4 s delay: the run is 3.8% slower than the rate, and reads "inside: no"
    sets = ["workload.epochs=1", "workload.dataset_size=2560", "workers.1.delay.value=0.4"]
    assert main(["analyze", "paper", "--policy", "equal,async", *(a for s in sets for a in ("--set", s))]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "long-run rate" in line]
    assert len(said) == 1 and said[0].startswith("async: its closed form is the long-run rate of updates")


def test_analyze_bad_policy(capsys):
    assert main(["analyze", "paper", "--policy", "nope"]) == 2
    _one_line_error(capsys, "--policy", "nope")


@pytest.fixture()
def trace_csv(tmp_path):
    assert (
        main(["simulate", "paper", "--policy", "dynamic", "--set", "workload.epochs=3", "--out", str(tmp_path / "sim")])
        == 0
    )
    return tmp_path / "sim" / "trace.csv"


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_calibrate_writes_a_loadable_toml_and_json(trace_csv, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "cal.toml"
    assert main(["calibrate", str(trace_csv), "-o", str(out)]) == 0
    table = capsys.readouterr().out
    assert "overhead ms" in table and f"wrote {out}" in table
    scenario = load_scenario(out)
    source = load_scenario("paper", ["workload.epochs=3"])
    assert scenario.n_workers == source.n_workers and [g.count for g in scenario.groups] == [1, 1]
    assert scenario.workload.global_batch == source.workload.global_batch
    assert scenario.workload.steps_per_epoch == source.workload.steps_per_epoch and scenario.workload.epochs == 3
    assert main(["calibrate", str(trace_csv.with_suffix(".parquet")), "-o", str(tmp_path / "cal.json")]) == 0
    assert json.loads((tmp_path / "cal.json").read_text())["workers"][0]["count"] == 1


def test_calibrate_prints_toml_without_out(trace_csv, capsys):
    capsys.readouterr()
    assert main(["calibrate", str(trace_csv), "--name", "mine"]) == 0
    data = tomllib.loads(capsys.readouterr().out)
    assert data["name"] == "mine" and len(data["workers"]) == 2


def test_import_logs_then_calibrate(tmp_path, capsys):
    trace = tmp_path / "vgg.csv"
    assert main(["import-logs", str(reference_run_path(DP_01)), "-o", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "300 rows" in out and "reconstruction" in out
    frame = pd.read_csv(trace)
    assert list(frame.columns)[: len(COLUMNS)] == list(COLUMNS) and len(frame) == 300
    assert main(["calibrate", str(trace), "-o", str(tmp_path / "vgg.toml")]) == 0
    err = capsys.readouterr().err
    assert err.count("hetsim: warning: ") == 1 and "epoch means" in err
    assert load_scenario(tmp_path / "vgg.toml").workload.steps_per_epoch == 196


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "t.csv"
    path.write_text(text)
    return str(path)


def test_calibrate_missing_column(tmp_path, capsys):
    assert main(["calibrate", _write(tmp_path, "worker,compute_s\n0,0.1\n")]) == 2
    _one_line_error(capsys, "local_batch", "missing column")


def test_calibrate_non_numeric_value(tmp_path, capsys):
    assert main(["calibrate", _write(tmp_path, "worker,local_batch,compute_s\n0,4,0.1\n0,8,slow\n")]) == 2
    _one_line_error(capsys, "compute_s", "non-numeric", "row 2")


def test_calibrate_missing_file(tmp_path, capsys):
    assert main(["calibrate", str(tmp_path / "absent.csv")]) == 2
    _one_line_error(capsys, "absent.csv", "no such file")


def test_calibrate_bad_output_suffix(trace_csv, tmp_path, capsys):
    capsys.readouterr()
    assert main(["calibrate", str(trace_csv), "-o", str(tmp_path / "out.yaml")]) == 2
    _one_line_error(capsys, "--out", ".yaml")
    assert not (tmp_path / "out.yaml").exists()


def test_import_logs_bad_inputs(tmp_path, capsys):
    assert main(["import-logs", str(tmp_path / "nothing"), "-o", str(tmp_path / "t.csv")]) == 2
    _one_line_error(capsys, "no such folder")
    assert main(["import-logs", str(tmp_path), "-o", str(tmp_path / "t.csv")]) == 2
    _one_line_error(capsys, "success.txt")
    assert main(["import-logs", str(reference_run_path(DP_01)), "-o", str(tmp_path / "t.txt")]) == 2
    _one_line_error(capsys, "--out")
    assert main(["import-logs", str(reference_run_path(DP_01))]) == 2
    _one_line_error(capsys, "-o")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "overrides", "policy"),
    [
        ("workstation", ["workload.epochs=1"], "async"),  # 388 updates, whose gaps interlock
        ("paper", ["workload.epochs=1", "workers.0.noise.persistence=0.9", "workers.1.noise.persistence=0.9"], "equal"),
    ],
)
def test_a_one_epoch_ci_is_as_wide_as_the_spread_of_the_run_mean_over_seeds(name, overrides, policy):
    """The 95% interval of the expected mean step time: its half-width near 1.96 x the standard
    deviation over seeds of a run's mean (a little more: a t quantile), so about 95% of the
    runs' intervals hold the mean over seeds. (It used one batch mean per epoch: two here, and a
    t quantile of one degree of freedom, 12.7.)"""
    from hetsim.cli.analysis import compare

    scenario = load_scenario(name, overrides)
    rows = [compare(scenario, scenario.named_policy(policy), seed) for seed in range(60)]
    means = np.array([r.simulated_step_s for r in rows])
    halves = np.array([(r.ci_high_s - r.ci_low_s) / 2 for r in rows])
    assert 0.6 <= halves.mean() / (1.96 * means.std(ddof=1)) <= 1.8
    assert sum(r.ci_low_s <= means.mean() <= r.ci_high_s for r in rows) >= 52


def test_episodes_of_factor_1_change_nothing_and_leave_the_closed_form(capsys):
    """A slowdown factor of 1 (a sweep's "none") simulates as no episodes; analyze refused a
    closed form for it ("worker 0 has slowdown episodes")."""
    argv = ["analyze", "paper", "--policy", "equal,optimal", "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--set", "workers.0.slowdown={every_s=5, duration_s=1, factor=1}"]) == 0
    assert json.loads(capsys.readouterr().out) == plain


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_the_table_gives_the_predicted_time_to_a_target_where_the_scenario_has_one(capsys):
    """Only --json had it: equal reaches 1000 steps at the base batch in 1000 steps of 692.020 ms
    (692.020 s); backup, which keeps 128 of 256 samples a step, later; async has no closed form of it."""
    sets = ["workload.efficiency.noise_scale=512", "workload.efficiency.base_batch=256"]
    argv = ["analyze", "paper", "--policy", "equal,backup,async", *(x for s in sets for x in ("--set", s))]
    assert main(argv) == 0
    assert "to target" not in capsys.readouterr().out  # no target_steps
    assert main([*argv, "--set", "workload.efficiency.target_steps=1000"]) == 0
    rows = {line.split()[0]: line.split()[-1] for line in capsys.readouterr().out.splitlines()[3:6]}
    assert rows["equal"] == "692.020" and float(rows["backup"]) > 692.020 and rows["async"] == "-"
