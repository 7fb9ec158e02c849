"""The command line: output formats, files written, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from hetsim.cli.main import main
from hetsim.model.trace import COLUMNS
from hetsim.run.metrics import Summary
from hetsim.scenario.config import load_scenario

SUMMARY_KEYS = set(Summary.__dataclass_fields__)


def test_simulate_json_has_exactly_the_summary_keys_and_speedups(capsys):
    assert main(["simulate", "paper", "--policy", "equal,optimal", "--json", "--set", "workload.epochs=2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["policy"] for s in out] == ["equal", "optimal"]
    assert all(set(s) == SUMMARY_KEYS for s in out)
    assert out[0]["speedup_vs_equal"] == 1.0
    assert out[1]["speedup_vs_equal"] == pytest.approx(out[0]["total_time_s"] / out[1]["total_time_s"])  # same samples
    assert out[1]["speedup_vs_equal"] == pytest.approx(out[1]["throughput_sps"] / out[0]["throughput_sps"])


def test_speedup_is_null_without_equal(capsys):
    assert main(["simulate", "paper", "--policy", "dynamic", "--json", "--set", "workload.epochs=1"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["speedup_vs_equal"] is None


def test_simulate_table_lists_every_policy(capsys):
    assert main(["simulate", "--set", "workload.epochs=1"]) == 0
    out = capsys.readouterr().out
    for name in ["equal", "proportional", "dynamic", "dynamic-enhanced", "optimal"]:
        assert f"\n{name} " in out
    assert "final split" in out


def test_out_writes_trace_and_summary(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "simulate",
                "paper",
                "--policy",
                "equal,dynamic",
                "--set",
                "workload.epochs=2",
                "--out",
                str(out),
                "--seed",
                "3",
            ]
        )
        == 0
    )
    frame = pd.read_parquet(out / "trace.parquet")
    assert list(frame.columns) == [*COLUMNS, "slowdown", "up"]
    steps = load_scenario("paper", ["workload.epochs=2"]).workload.total_steps
    assert len(frame) == 2 * steps * 2
    assert pd.read_csv(out / "trace.csv").shape == frame.shape
    summary = json.loads((out / "summary.json").read_text())
    assert [s["policy"] for s in summary["policies"]] == ["equal", "dynamic"]
    assert summary["seed"] == 3 and summary["scenario"]["name"] == "paper"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


def test_show_prints_a_builtin_that_loads_back(tmp_path, capsys):
    assert main(["show", "workstation"]) == 0
    text = capsys.readouterr().out
    (tmp_path / "w.toml").write_text(text)
    assert load_scenario(tmp_path / "w.toml") == load_scenario("workstation")
    assert main(["show", "paper", "--set", "seed=5"]) == 0
    (tmp_path / "p.toml").write_text(capsys.readouterr().out)
    assert load_scenario(tmp_path / "p.toml").seed == 5


def test_scenarios_lists_the_builtins(capsys):
    assert main(["scenarios"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"paper", "workstation"} <= set(names)


def test_bad_file_contents_fail_cleanly(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[workload]\nglobal_batch = 8\n")
    assert main(["simulate", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == "hetsim: error: workload.dataset_size: missing (required)"


@pytest.mark.slow
def test_module_entry_point_exits_2_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "hetsim", "simulate", "--policy", "nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
