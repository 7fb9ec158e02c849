"""Bad and hostile input gets one line naming the field, exit status 2, and nothing written,
whatever the command (the README's promise); the exact message of each case is pinned here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from hetsim.cli import main
from tests.helpers import scenario_dict

HUGE = 10**20


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", f"workload.global_batch={HUGE}"],
         f"workload.global_batch: must be in [1, 1099511627776], got {HUGE}"),
        (["--set", f"workload.global_batch={2**62}"],
         f"workload.global_batch: must be in [1, 1099511627776], got {2**62}"),
        (["--set", "workers.0.per_sample_s=1e300"],
         "workers.0: a step of 256 samples would take 2.56e+302 s: check the units"),
        (["--set", "workload.epochs=100000000"],
         "workload: 19500000000 steps x 2 workers = 3.9e+10 trace rows, more than the 2.68e+08 a run can hold: fewer "
         "epochs or a larger global batch"),
    ],
)  # fmt: skip
def test_sizes_that_cannot_fit_are_refused(argv, message, tmp_path, capsys):
    assert main(["simulate", "paper", *argv, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"hetsim: error: {message}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_file_nested_beyond_reason_is_one_line(suffix, tmp_path, capsys):
    depth = 100_000
    text = "a = " + "[" * depth + "]" * depth if suffix == ".toml" else "[" * depth + "]" * depth
    path = tmp_path / f"deep{suffix}"
    path.write_text(text, encoding="utf-8")
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and ("nested too deeply" in err or "not valid" in err)


def test_a_byte_order_mark_is_named(tmp_path, capsys):
    path = tmp_path / "bom.toml"
    path.write_text("\ufeff" + tomli_w.dumps(scenario_dict([{"per_sample_s": 0.001}])), encoding="utf-8")
    assert main(["simulate", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"hetsim: error: {path}: starts with a byte-order mark (BOM): save it as UTF-8 without one\n"
    )


def test_an_empty_measurement_file_is_one_line_without_a_numpy_warning(tmp_path, capsys):
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    raw = scenario_dict([{"per_sample_s": 0.001, "delay": {"dist": "empirical", "file": "empty.csv"}}])
    (tmp_path / "s.toml").write_text(tomli_w.dumps(raw), encoding="utf-8")
    assert main(["simulate", str(tmp_path / "s.toml")]) == 2
    assert capsys.readouterr().err == "hetsim: error: workers.0.delay.file: needs at least one value\n"


def test_a_sweep_cell_whose_policy_cannot_run_is_refused_before_anything_is_written(tmp_path, capsys):
    sweep = {"name": "x", "base": scenario_dict([{"per_sample_s": 0.001, "count": 2}]), "policies": ["equal", "backup"],
             "grid": {"workers.0.count": [2, 1]}}  # fmt: skip
    (tmp_path / "sweep.toml").write_text(tomli_w.dumps(sweep), encoding="utf-8")
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--runs", str(tmp_path / "runs"), "--jobs", "2"]) == 2
    assert capsys.readouterr().err == (
        "hetsim: error: grid.policy.backups: must be smaller than the number of workers (1), got 1 "
        "(at workers.0.count=1)\n"
    )
    assert not (tmp_path / "runs").exists()


def reference_run(tmp_path: Path, success: str, means: list[float]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "success.txt").write_text(success, encoding="utf-8")
    for rank in range(2):
        timer = {"batch.process": {"average_duration": 0.1, "n_events": 99, "total_time": 10.0},
                 "batch.reduce": {"average_duration": 0.01, "n_events": 99, "total_time": 1.0},
                 "mean_batch_process_times": means}  # fmt: skip
        (run / f"timer_summary_{rank}.json").write_text(json.dumps(timer), encoding="utf-8")
    return run


@pytest.mark.parametrize(
    ("success", "means", "message"),
    [
        ("batch_size : lots\nnum_epochs : 2\n", [0.1, 0.1], "batch_size: must be an integer, got a string ('lots')"),
        ("batch_size : 64\nnum_epochs : 0\n", [0.1, 0.1], "num_epochs: must be >= 1, got 0"),
        ("batch_size : 64\nnum_epochs : 2\ndynamic_partition : True\n", [0.0, 0.0],
         "mean_batch_process_times: must be positive: the DP rule divides by each epoch's mean"),
    ],
)  # fmt: skip
def test_import_logs_refuses_numbers_it_cannot_use(success, means, message, tmp_path, capsys):
    run = reference_run(tmp_path, success, means)
    assert main(["import-logs", str(run), "-o", str(tmp_path / "t.csv")]) == 2
    assert capsys.readouterr().err == f"hetsim: error: {message}\n"
    assert not (tmp_path / "t.csv").exists()


def test_simulate_out_writes_all_or_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").mkdir()  # a late file that cannot be written: a folder is in its way
    assert main(["simulate", "paper", "--policy", "equal", "--set", "workload.epochs=1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.json" in err
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]  # nothing else was left behind
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nor a temporary folder
    (out / "summary.json").rmdir()
    assert main(["simulate", "paper", "--policy", "equal", "--set", "workload.epochs=1", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "trace.csv", "trace.parquet"]


def test_policies_that_cannot_run_are_left_out_with_a_note_unless_named(tmp_path, capsys):
    one = tmp_path / "one.toml"
    one.write_text(tomli_w.dumps(scenario_dict([{"per_sample_s": 0.001}], global_batch=8)), encoding="utf-8")
    assert main(["simulate", str(one), "--json"]) == 0
    captured = capsys.readouterr()
    ran = [s["policy"] for s in json.loads(captured.out)]
    assert "backup" not in ran and "equal" in ran and "ksync" in ran
    assert captured.err == (
        "note: backup left out: policy.backups: must be smaller than the number of workers (1), got 1\n"
    )
    assert main(["simulate", str(one), "--policy", "equal,backup"]) == 2
    assert capsys.readouterr().err == (
        "hetsim: error: policy.backups: must be smaller than the number of workers (1), got 1\n"
    )
