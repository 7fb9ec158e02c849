"""``sweep --trace full|sample|none``: what the plotted cell keeps of its traces (traces.parquet
and the trace plots), that the cells' results do not depend on it, and that the mode recorded
in meta.json holds on ``--resume`` and ``report``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import hetsim.plots
import hetsim.report.build
import hetsim.scenario.config
from hetsim.cli.main import main
from hetsim.engines import engine_named
from hetsim.report.build import TRACES_FILE, plotted_point
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.sweep.results import RunFolder
from hetsim.sweep.run import replication_seeds
from hetsim.sweep.spec import point_scenario
from tests.refusals import check_refused
from tests.test_sweep import PLOTS, only_run, write_sweep

STEPS = 30  # sweep_dict: 3 epochs of 10 steps; the plotted cell (size=4) has 4 workers


def run_sweep(tmp_path: Path, root: str, *options: str) -> Path:
    """A finished sweep of :func:`tests.test_sweep.sweep_dict` (12 cells, 2 replications) under
    ``tmp_path / root`` with ``options``; its results folder."""
    path = tmp_path / "sweep.toml"
    if not path.exists():
        write_sweep(tmp_path)
    assert main(["sweep", str(path), "--runs", str(tmp_path / root), "--jobs", "1", *options]) == 0
    return only_run(tmp_path / root)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep with ``--trace full`` (the default, made once per module)."""
    return run_sweep(tmp_path_factory.mktemp("full"), "runs")


def traces_table(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / TRACES_FILE)


def plots(run: Path) -> set[str]:
    return {p.name for p in (run / "plots").iterdir()}


@pytest.mark.slow
def test_full_keeps_every_step_of_the_plotted_cell(full):
    folder = RunFolder.open(full)
    spec = folder.spec()
    assert json.loads((full / "meta.json").read_text())["trace"] == "full"
    saved = folder.read_traces(TRACES_FILE)
    assert saved is not None and list(saved) == list(spec.policies)
    scenario = point_scenario(spec, plotted_point(spec))
    for policy, trace in saved.items():
        assert sorted(set(trace.step.tolist())) == list(range(STEPS)) and len(trace.step) == STEPS * 4
        assert trace == simulate(
            scenario, scenario.named_policy(policy), seed=replication_seeds(spec)[0], engine=engine_named(spec.engine)
        )
    assert plots(full) == PLOTS


SAMPLED_PLOTS = {"speedup.png", "step_cdf.png", "utilization.png"}  # no Gantt chart: its steps are consecutive


@pytest.mark.slow
@pytest.mark.parametrize(("every", "drawn"), [(4, SAMPLED_PLOTS), (5, SAMPLED_PLOTS | {"split.png"})])
def test_sample_keeps_steps_0_k_2k_bit_for_bit(every, drawn, full, tmp_path, capsys):
    run = run_sweep(tmp_path, "runs", "--trace", "sample", "--sample-every", str(every))
    assert json.loads((run / "meta.json").read_text())["sample_every"] == every
    sampled, whole = traces_table(run), traces_table(full)
    for policy, rows in sampled.groupby("policy"):
        assert sorted(rows["step"].unique()) == list(range(0, STEPS, every)), policy
    expected = whole[whole["step"] % every == 0].reset_index(drop=True)
    pd.testing.assert_frame_equal(sampled, expected, check_exact=True)
    # The Gantt chart (consecutive steps) is left out, and the split over epochs unless each
    # epoch's first step (0, 10, 20) is kept; each with one note.
    assert plots(run) == drawn
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hetsim: note:")]
    assert [n.split(":")[2].strip() for n in notes] == ["gantt.png left out"] + (
        ["split.png left out"] if every == 4 else []
    )
    pd.testing.assert_frame_equal(pd.read_csv(run / "summary.csv"), pd.read_csv(full / "summary.csv"))


@pytest.mark.slow
def test_sampled_utilization_is_the_whole_runs(full, tmp_path, monkeypatch):
    shown = []
    real = hetsim.plots.render_run  # the report imports it from hetsim.plots when it draws

    def capture(directory, summary, axes, x, lines, cell=None, metric="throughput"):
        shown.append(cell)
        return real(directory, summary, axes, x, lines, cell, metric)

    monkeypatch.setattr(hetsim.plots, "render_run", capture)
    run = run_sweep(tmp_path, "runs", "--trace", "sample", "--sample-every", "7")
    whole = RunFolder.open(full).read_traces(TRACES_FILE)
    assert whole is not None and shown[0] is not None
    for policy, utilization in shown[0].utilization.items():  # not the 5 kept steps' estimate
        assert utilization == pytest.approx(summarize(whole[policy]).utilization, rel=1e-12), policy
    assert shown[0].gantt == [] and shown[0].split == []
    assert (run / TRACES_FILE).exists()


@pytest.mark.slow
def test_none_keeps_no_trace_and_the_same_summary(full, tmp_path):
    run = run_sweep(tmp_path, "runs", "--trace", "none")
    assert json.loads((run / "meta.json").read_text())["trace"] == "none"
    assert not (run / TRACES_FILE).exists()
    assert plots(run) == {"speedup.png"}
    assert (run / "summary.csv").read_bytes() == (full / "summary.csv").read_bytes()
    pd.testing.assert_frame_equal(pd.read_parquet(run / "results.parquet"), pd.read_parquet(full / "results.parquet"))


def interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *options: str) -> Path:
    """A sweep interrupted (Ctrl-C) after 5 of its 12 cells: parts, sweep.toml and meta.json only."""
    path = write_sweep(tmp_path)
    real = RunFolder.write_part

    def write_then_stop(self, cell_index, rows):
        real(self, cell_index, rows)
        if len(self.done_cells()) == 5:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(RunFolder, "write_part", write_then_stop)
        assert main(["sweep", str(path), "--runs", str(tmp_path / "runs"), "--jobs", "1", *options]) == 130
    run = only_run(tmp_path / "runs")
    assert len(list((run / "parts").iterdir())) == 5 and not (run / TRACES_FILE).exists()
    return run


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["--trace", "sample", "--sample-every", "3"], ["--trace", "none"]], ids=str)
def test_resume_and_report_keep_the_recorded_mode(mode, full, tmp_path, monkeypatch, capsys):
    run = interrupted(tmp_path, monkeypatch, *mode)
    meta = json.loads((run / "meta.json").read_text())
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 0  # the mode not repeated
    resumed = json.loads((run / "meta.json").read_text())
    assert resumed.pop("resumes") and resumed == meta  # the resume added, the sweep's own record kept
    assert (run / "summary.csv").read_bytes() == (full / "summary.csv").read_bytes()
    expected_plots = SAMPLED_PLOTS if "sample" in mode else {"speedup.png"}

    def check_kept() -> None:
        assert plots(run) == expected_plots
        if "sample" in mode:
            assert sorted(traces_table(run)["step"].unique()) == list(range(0, STEPS, 3))
        else:
            assert not (run / TRACES_FILE).exists()

    check_kept()
    (run / TRACES_FILE).unlink(missing_ok=True)  # a report rebuilds the traces and plots the same way
    for png in (run / "plots").iterdir():
        png.unlink()
    assert main(["report", str(run)]) == 0
    check_kept()
    # Repeating the recorded mode is no conflict.
    assert main(["sweep", "--resume", str(run), "--jobs", "1", *mode]) == 0


CONFLICTS = [
    (["--trace", "sample", "--sample-every", "3"], ["--trace", "full"],
     "--trace: {run} was started with --trace sample --sample-every 3: resume it without --trace, or with the same"),
    (["--trace", "sample", "--sample-every", "3"], ["--trace", "sample", "--sample-every", "4"],
     "--sample-every: {run} was started with --trace sample --sample-every 3: resume it without --sample-every, "
     "or with the same"),
    (["--trace", "none"], ["--trace", "sample"],
     "--trace: {run} was started with --trace none: resume it without --trace, or with the same"),
    (["--trace", "none"], ["--sample-every", "0"], "--sample-every: must be in [1, 1099511627776], got 0"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("started", "resumed", "line"), CONFLICTS, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_a_conflicting_trace_on_resume_is_refused_in_one_line(started, resumed, line, tmp_path, monkeypatch, capsys):
    run = interrupted(tmp_path, monkeypatch, *started)
    line = line.replace("{run}", str(run))
    check_refused(main, ["sweep", "--resume", str(run), "--jobs", "1", *resumed], line, tmp_path, capsys)


def test_a_damaged_trace_record_is_refused_by_report_too(finished, tmp_path, capsys):
    run = shutil.copytree(finished, tmp_path / "run")  # the shared sweep (conftest.py): its meta.json says full
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "trace": "sample", "sample_every": 0}))
    line = f"{run}/meta.json: sample_every: must be in [1, 1099511627776], got 0"
    check_refused(main, ["report", str(run)], line, tmp_path, capsys)


@pytest.mark.slow
def test_the_plotted_cell_is_sized_by_what_it_keeps(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hetsim.scenario.config, "MAX_TRACE_ROWS", 100)  # the plotted cell: 30 steps x 4 workers
    write_sweep(tmp_path, replications=1)
    argv = ["sweep", "{tmp}/sweep.toml", "--runs", "{tmp}/runs", "--jobs", "1"]
    check_refused(main, argv, "workload: 30 steps x 4 workers = 120 trace rows, more than the 100 a run can hold: "
                              "fewer epochs or a larger global batch (or --trace none)", tmp_path, capsys)  # fmt: skip
    check_refused(main, [*argv, "--trace", "sample", "--sample-every", "1"], "workload: 30 steps x 4 workers = 120 "
                  "trace rows, more than the 100 a run can hold: fewer epochs or a larger global batch (or --trace "
                  "none)", tmp_path, capsys)  # fmt: skip
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--trace", "sample", "--sample-every", "2"]) == 0
    assert sorted(traces_table(only_run(tmp_path / "runs"))["step"].unique()) == list(range(0, STEPS, 2))
