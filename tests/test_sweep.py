"""Sweeps: pure expansion, identical numbers on every executor, kill-and-resume, plots, bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import tomli_w
from matplotlib.image import imread

from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.sweep.results import RunFolder
from hetsim.sweep.run import expand, replication_seeds
from hetsim.sweep.spec import load_sweep, point_scenario
from tests.helpers import scenario_dict

PLOTS = {"speedup.png", "step_cdf.png", "utilization.png", "split.png", "gantt.png"}


def sweep_dict(steps_per_epoch: int = 10, epochs: int = 3, replications: int = 2) -> dict:
    base = scenario_dict(
        [
            {
                "name": "fast",
                "count": 2,
                "overhead_s": 0.005,
                "per_sample_s": 0.0005,
                "noise": {"dist": "lognormal", "sigma": 0.1},
            },
            {"name": "slow", "overhead_s": 0.005, "per_sample_s": 0.001},
        ],
        global_batch=128,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
    )
    return {
        "name": "small",
        "base": base,
        "policies": ["equal", "dynamic", "optimal"],
        "replications": replications,
        "seed": 11,
        "grid": {
            "workers.1.per_sample_s": [0.001, 0.002],
            "size": {"values": [3, 4], "workers.0.count": [2, 3]},
        },
        "plots": {"x": "workers.1.per_sample_s", "lines": "size"},
    }


def write_sweep(tmp_path: Path, **kwargs) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(sweep_dict(**kwargs)))
    return path


def only_run(root: Path) -> Path:
    (run,) = list(root.iterdir())
    return run


def test_expansion_is_a_pure_deterministic_cartesian_product(tmp_path):
    spec = load_sweep(write_sweep(tmp_path))
    cells = expand(spec)
    assert cells == expand(load_sweep(write_sweep(tmp_path)))
    assert len(cells) == 2 * 2 * 3
    assert [c.index for c in cells] == list(range(12))
    assert {(c.point, c.policy) for c in cells} == {
        ((i, j), p) for i in range(2) for j in range(2) for p in spec.policies
    }
    assert replication_seeds(spec) == replication_seeds(load_sweep(write_sweep(tmp_path)))
    assert len(set(replication_seeds(spec))) == 2
    # A named axis sets every path it lists; a plain one sets its own path.
    s = point_scenario(spec, (1, 1))
    assert s.n_workers == 4 and s.workers[-1].cost.per_sample_s == 0.002


def test_the_embedded_default_sweep_is_the_papers_question_widened(capsys):
    assert main(["sweep", "--show-default"]) == 0
    import tomllib

    spec = load_sweep(tomllib.loads(capsys.readouterr().out))
    assert {"equal", "proportional", "dynamic", "dynamic-enhanced", "optimal"} <= set(spec.policies)
    labels = {a.name: a.labels for a in spec.axes}
    assert labels == {"slow_factor": (1.0, 1.5, 2.0, 4.0), "workers": (2, 4, 8, 16), "noise": ("none", "lognormal")}
    assert spec.replications == 5
    for k, factor in enumerate(labels["slow_factor"]):  # the slow worker is exactly `factor` times slower
        s = point_scenario(spec, (k, 0, 0))
        fast, slow = s.workers[0], s.workers[-1]
        assert slow.expected_compute_s(64) == pytest.approx(factor * fast.expected_compute_s(64))
    assert [point_scenario(spec, (0, k, 0)).n_workers for k in range(4)] == [2, 4, 8, 16]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_local_pool_inline_and_dask_local_cluster_give_identical_results(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    frames = []
    for i, extra in enumerate([["--jobs", "1"], ["--jobs", "2"], ["--scheduler", "local", "--jobs", "2"]]):
        root = tmp_path / f"runs{i}"
        assert main(["sweep", str(sweep), "--runs", str(root), *extra]) == 0
        frames.append(pd.read_parquet(only_run(root) / "results.parquet"))
    capsys.readouterr()
    assert len(frames[0]) == 12 * 2
    pd.testing.assert_frame_equal(frames[0], frames[1])
    pd.testing.assert_frame_equal(frames[0], frames[2])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_sweep_killed_mid_run_resumes_to_exactly_the_uninterrupted_result(tmp_path, capsys):
    # Cells long enough (SimPy engine, 1000 steps x 3 replications) that the kill lands mid-run.
    sweep = write_sweep(tmp_path, steps_per_epoch=250, epochs=4, replications=3)
    full = tmp_path / "full"
    assert main(["sweep", str(sweep), "--runs", str(full), "--jobs", "1", "--engine", "simpy"]) == 0
    expected = pd.read_parquet(only_run(full) / "results.parquet")

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetsim",
            "sweep",
            str(sweep),
            "--runs",
            str(killed),
            "--jobs",
            "2",
            "--engine",
            "simpy",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(killed.glob("*/parts/*.parquet")):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    run = only_run(killed)
    done = list((run / "parts").glob("*.parquet"))
    assert 1 <= len(done) < 12, "the kill should land mid-run"
    assert not (run / "results.parquet").exists()
    for part in done:  # every file left behind is complete and readable
        assert len(pd.read_parquet(part)) == 3
    capsys.readouterr()
    assert main(["sweep", "--resume", str(run), "--jobs", "2", "--engine", "simpy"]) == 0
    assert "12 cells x 3 replications" in capsys.readouterr().out
    pd.testing.assert_frame_equal(pd.read_parquet(run / "results.parquet"), expected)


@pytest.mark.slow
def test_results_folder_has_every_file_and_plot_and_report_rerenders(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    run = only_run(tmp_path / "runs")
    assert run.name == "0001_small"
    assert {"sweep.toml", "meta.json", "results.parquet", "summary.csv", "traces.parquet"} <= {
        p.name for p in run.iterdir()
    }
    assert {p.name for p in (run / "plots").iterdir()} == PLOTS
    for png in (run / "plots").iterdir():
        image = imread(png)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    results = pd.read_parquet(run / "results.parquet")
    assert {"workers.1.per_sample_s", "size", "policy", "replication", "seed", "mean_step_s", "utilization"} <= set(
        results.columns
    )
    summary = pd.read_csv(run / "summary.csv")
    equal = summary[summary["policy"] == "equal"]
    assert (equal["speedup_vs_equal"] == 1.0).all()
    optimal = summary[(summary["policy"] == "optimal")]
    assert (optimal["speedup_vs_equal"] >= 1.0).all()
    assert {"mean_step_s_ci95", "speedup_vs_equal_ci95"} <= set(summary.columns)
    printed = capsys.readouterr().out
    for png in (run / "plots").iterdir():
        png.unlink()
    assert main(["report", str(run)]) == 0
    reported = capsys.readouterr().out
    assert reported == printed
    assert "| workers.1.per_sample_s | size | equal | dynamic | optimal |" in reported
    assert {p.name for p in (run / "plots").iterdir()} == PLOTS
    # A second sweep never reuses the folder.
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["0001_small", "0002_small"]


@pytest.mark.slow
def test_ci_is_the_t_interval_over_replications(tmp_path, capsys):
    from scipy import stats

    sweep = write_sweep(tmp_path, replications=4)
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    run = only_run(tmp_path / "runs")
    results, summary = pd.read_parquet(run / "results.parquet"), pd.read_csv(run / "summary.csv")
    cell = results[results["cell"] == 4]["mean_step_s"]
    row = summary[summary["cell"] == 4].iloc[0]
    assert row["mean_step_s"] == pytest.approx(cell.mean())
    assert row["mean_step_s_ci95"] == pytest.approx(stats.t.ppf(0.975, 3) * cell.std(ddof=1) / 2)


BAD = [
    ({"grid": {"workers.0.speed": [1, 2]}}, "grid.workers.0.speed: unknown key"),
    ({"grid": {"workers.9.per_sample_s": [1]}}, "grid.workers.9: no entry '9'"),
    ({"grid": {"workers.0.per_sample_s": []}}, "grid.workers.0.per_sample_s: empty axis"),
    ({"grid": {"workers.0.count": ["two"]}}, "grid.workers.0.count: must be an integer, got a string ('two')"),
    ({"grid": {"n": {"values": [1, 2], "workers.0.count": [1]}}}, "grid.n.workers.0.count: has 1 values for 2 labels"),
    ({"policies": ["equal", "fastest"]}, "policies.1: unknown policy 'fastest'"),
    ({"base": "no-such-scenario"}, "base.scenario: 'no-such-scenario' is neither a file nor a built-in"),
    ({"replications": 0}, "replications: must be in [1, 100000]"),
    ({"grid": {"policy": [1]}}, "grid.policy: must be a table"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m for _, m in BAD])
def test_bad_sweeps_fail_with_one_line_and_leave_no_folder(change, message, tmp_path, capsys):
    raw = {**sweep_dict(), **change}
    if "grid" in change:
        raw.pop("plots")
    (tmp_path / "bad.toml").write_text(tomli_w.dumps(raw))
    assert main(["sweep", str(tmp_path / "bad.toml"), "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_an_unreachable_scheduler_fails_cleanly_and_leaves_no_folder(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    assert (
        main(
            [
                "sweep",
                str(sweep),
                "--runs",
                str(tmp_path / "runs"),
                "--scheduler",
                "tcp://127.0.0.1:9",
                "--connect-timeout-s",
                "0.5",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("hetsim: error: --scheduler: cannot reach tcp://127.0.0.1:9") and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


FAILING_POLICIES = """
from hetsim.core.errors import ConfigError
from hetsim.policies import Policy
from hetsim.core.registry import POLICIES


@POLICIES.register
class Boom(Policy):
    name = "boom"

    def partition(self, info):
        if info.step == 3:
            raise RuntimeError("kaboom at step 3")
        return super().partition(info)


@POLICIES.register
class BadIn(Policy):
    name = "bad-in"

    def partition(self, info):
        raise ConfigError("policy.x", "bad input found in the worker")
"""


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("where", [["--jobs", "1"], ["--jobs", "2"], ["--scheduler", "local", "--jobs", "2"]])
@pytest.mark.parametrize(
    ("policy", "status", "message"),
    [
        ("boom", 1, "failed: RuntimeError: kaboom at step 3"),
        ("bad-in", 2, "hetsim: error: policy.x: bad input found in the worker"),
    ],
)
def test_a_failing_cell_reaches_the_user_as_one_line(tmp_path, where, policy, status, message):
    plugin = tmp_path / "failing.py"
    plugin.write_text(FAILING_POLICIES, encoding="utf-8")
    raw = sweep_dict(replications=1)
    raw["policies"] = ["equal", policy]
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(raw))
    done = subprocess.run(
        [sys.executable, "-m", "hetsim", "sweep", str(path), "--runs", str(tmp_path / "runs"), *where],
        capture_output=True, text=True, timeout=180, env={**os.environ, "HETSIM_PLUGINS": str(plugin)},
    )  # fmt: skip
    assert done.returncode == status
    errors = [line for line in done.stderr.splitlines() if "error" in line or "Traceback" in line]
    assert len(errors) == 1 and message in errors[0], done.stderr
    if policy == "boom":
        assert errors[0].startswith("hetsim: error: cell ") and "(policy boom, " in errors[0]


@pytest.mark.slow
def test_a_report_that_fails_midway_leaves_the_previous_tables_and_plots(tmp_path, capsys, monkeypatch):
    import hetsim.plots
    import hetsim.report.build

    sweep = write_sweep(tmp_path)
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    run = only_run(tmp_path / "runs")
    for name in ("summary.csv", "plots/speedup.png"):  # a previous state that a new report would change
        (run / name).write_bytes(b"previous")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    real = hetsim.plots.render_run  # the report imports it from hetsim.plots when it draws

    def render_then_fail(directory, *args, **kwargs):
        real(directory, *args, **kwargs)  # every plot written (into the temporary folder), then a failure
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hetsim.plots, "render_run", render_then_fail)
    with pytest.raises(ConfigError, match=f"^run_dir: cannot write {run}: No space left on device$"):  # named
        folder = RunFolder.open(run)
        hetsim.report.build.render_report(folder, folder.spec(), "throughput")
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # nothing replaced, nothing added
    assert not [p for p in run.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left
    monkeypatch.setattr(hetsim.plots, "render_run", real)
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    assert {p.name for p in (run / "plots").iterdir()} == PLOTS


def test_the_default_jobs_are_the_cores_this_process_may_use_capped_at_the_sweeps_limit(monkeypatch):
    """--jobs' default counts the process's CPU affinity (a container's or a batch job's share),
    not the host's cores, and never exceeds what --jobs accepts (a plain sweep on a 512-core host
    was refused)."""
    from hetsim.cli.sweep import usable_cores
    from hetsim.sweep.run import MAX_JOBS

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5})
    monkeypatch.setattr(os, "cpu_count", lambda: 512)
    assert usable_cores() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(512)))
    assert usable_cores() == MAX_JOBS == 256


def test_a_sweep_without_axes_is_one_row_of_the_policies():
    """No [grid]: one grid point, so one row (the cells are its policies; the table used to give
    each policy a row of its own, the others' columns nan)."""
    from hetsim.sweep.results import markdown_table, summarize_cells

    rows = [{"cell": c, "policy": p, "replication": r, "seed": r, "mean_step_s": s, "total_time_s": 10 * s,
             "throughput_sps": 64 / s, "mean_utilization": 0.5}
            for c, (p, s) in enumerate((("equal", 0.2), ("optimal", 0.1))) for r in range(2)]  # fmt: skip
    table = markdown_table(summarize_cells(pd.DataFrame(rows), []), [], ["equal", "optimal"])
    assert table.splitlines() == [
        "| grid | equal | optimal |",
        "|---|---|---|",
        "| one point | 1.000 ± 0.000 | 2.000 ± 0.000 |",
    ]
    # an axis of its own named grid keeps its points (the one-point label is for no axes alone)
    two = pd.DataFrame([{**r, "cell": r["cell"] + 2 * k, "grid": k} for k in (0, 1) for r in rows])
    lines = markdown_table(summarize_cells(two, ["grid"]), ["grid"], ["equal", "optimal"]).splitlines()
    assert lines[2:] == ["| 0 | 1.000 ± 0.000 | 2.000 ± 0.000 |", "| 1 | 1.000 ± 0.000 | 2.000 ± 0.000 |"]


@pytest.mark.slow
def test_results_parquet_holds_each_replications_speedup_over_equal_at_its_seed(tmp_path, capsys):
    """results.parquet's speedup_vs_equal was None in every row (a cell runs one policy); each
    row now has its throughput over equal's at the same grid point and replication, whose means
    are summary.csv's speedups."""
    sweep = write_sweep(tmp_path)
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    run = only_run(tmp_path / "runs")
    results = pd.read_parquet(run / "results.parquet")
    keys = [c for c in results.columns if c.startswith("workers.") or c == "size"]
    equal = results[results["policy"] == "equal"].set_index([*keys, "replication"])["throughput_sps"]
    for _, row in results.iterrows():
        expected = row["throughput_sps"] / equal.loc[tuple(row[[*keys, "replication"]])]
        assert row["speedup_vs_equal"] == pytest.approx(expected, rel=1e-12)
    summary = pd.read_csv(run / "summary.csv")
    means = results.groupby("cell")["speedup_vs_equal"].mean()
    assert summary.set_index("cell")["speedup_vs_equal"].to_numpy() == pytest.approx(means.to_numpy(), rel=1e-9)
