"""A results folder heals before a resume or a report: damaged parts run again, temporary files
of killed writes go, edited seeds are refused; files get the umask's mode; SIGTERM stops a
sweep and its pool workers."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pandas as pd
import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from hetsim.cli.main import main
from hetsim.sweep.run import LocalExecutor, expand
from hetsim.sweep.spec import _inline, load_sweep
from tests.test_sweep import only_run, write_sweep


def finished_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, pd.DataFrame, str]:
    sweep = write_sweep(tmp_path)
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    run = only_run(tmp_path / "runs")
    return run, pd.read_parquet(run / "results.parquet"), capsys.readouterr().out


@pytest.mark.slow
def test_a_damaged_part_and_stale_temporaries_are_healed_on_resume(tmp_path, capsys):
    run, expected, table = finished_run(tmp_path, capsys)
    (run / "parts" / "cell-00004.parquet").write_bytes(b"not parquet at all")  # a disk error
    short = pd.read_parquet(run / "parts" / "cell-00007.parquet").head(1)  # a copy cut short
    short.to_parquet(run / "parts" / "cell-00007.parquet", index=False)
    shutil.copy(run / "parts" / "cell-00000.parquet", run / "parts" / "cell-00010.parquet")  # another cell's rows
    (run / "parts" / ".cell-00009.parquet.abc123.tmp").write_bytes(b"half")  # a killed write
    (run / "plots" / ".gantt.png.xyz.tmp").write_bytes(b"half")
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if line.startswith("hetsim: note:")]
    assert len(notes) == 3
    assert "parts/cell-00004.parquet cannot be read" in notes[0] and notes[0].endswith("its cell runs again")
    assert "parts/cell-00007.parquet holds 1 rows, not the 2 replications of cell 7" in notes[1]
    assert "parts/cell-00010.parquet holds rows of cell 0, not of cell 10" in notes[2]
    assert "3 of 12 cells to run" in captured.err
    assert captured.out == table  # the same report
    pd.testing.assert_frame_equal(pd.read_parquet(run / "results.parquet"), expected)
    assert not list(run.rglob("*.tmp"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new"),
    [("seed = 11", "seed = 12"), ("replications = 2", "replications = 3"), ("epochs = 3", "epochs = 2")],
)
def test_a_sweep_toml_edited_since_the_sweep_began_is_refused(old, new, tmp_path, capsys):
    """Its finished cells were run from the sweep as it was: a resume or a report would put
    them, under the same labels, beside cells of the edited one (a review replaced a grid value,
    the base's epochs and the whole file, and the resume exited 0 with the two mixed)."""
    run, _, _ = finished_run(tmp_path, capsys)
    text = (run / "sweep.toml").read_text()
    assert old in text
    (run / "sweep.toml").write_text(text.replace(old, new))
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    said = ("sweep.toml: edited since the sweep began (its finished cells were run from the sweep as it was): "
            "restore it, or start a new sweep from the edited file\n")  # fmt: skip
    assert err.count("\n") == 1 and err.endswith(said)
    assert main(["report", str(run)]) == 2
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before
    (run / "sweep.toml").write_text(text)  # restored: the same folder resumes (nothing left to run)
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 0


@pytest.mark.slow
def test_a_folder_without_the_fingerprint_still_refuses_edited_seeds(tmp_path, capsys):
    """A folder of an earlier version (no sweep_sha256 in meta.json): the parts' seeds are checked."""
    import json

    run, _, _ = finished_run(tmp_path, capsys)
    meta = json.loads((run / "meta.json").read_text())
    del meta["sweep_sha256"]
    (run / "meta.json").write_text(json.dumps(meta))
    (run / "sweep.toml").write_text((run / "sweep.toml").read_text().replace("seed = 11", "seed = 12"))
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its seed or replications no longer match parts/cell-00000.parquet" in err


@pytest.mark.slow
def test_written_files_get_the_umasks_mode(tmp_path, capsys):
    run, _, _ = finished_run(tmp_path, capsys)
    umask = os.umask(0)
    os.umask(umask)
    for name in ("sweep.toml", "meta.json", "results.parquet", "summary.csv", "plots/gantt.png"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o666 & ~umask, name


def _default_interrupt() -> None:
    """In the sweep's process before it starts: SIGINT at its default, as in a terminal's
    foreground job. A shell without job control starts background jobs with SIGINT ignored, and
    Python then keeps ignoring it (run that way, the sweep ran on to its end, 11-13 s)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.multiprocess
@pytest.mark.serial  # the sweep gone within 10 s of the signal
@pytest.mark.parametrize(
    ("signum", "whole_group", "scheduler"),
    [(signal.SIGTERM, False, []), (signal.SIGINT, True, []), (signal.SIGINT, True, ["--scheduler", "local"])],
    ids=["term", "ctrl-c", "ctrl-c-dask-local"],  # a LocalCluster's workers are in the group too
)
def test_a_signal_stops_the_sweep_and_its_pool_workers_at_once_with_the_resume_hint(
    signum, whole_group, scheduler, tmp_path
):
    # Cells of several seconds each, a sweep of a minute or more: stopping must not wait for them.
    sweep = write_sweep(tmp_path, steps_per_epoch=250, epochs=40, replications=3)
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "hetsim", "sweep", str(sweep), "--runs", str(runs), "--jobs", "2", "--engine",
               "simpy", *scheduler]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_interrupt)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(runs.glob("*/sweep.toml")):
        time.sleep(0.01)
    time.sleep(1.0)  # the pool is busy with its first cells
    if whole_group:  # what a terminal's Ctrl-C does
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10, (out, err)
    # 128 + the signal (130 for Ctrl-C, 143 for SIGTERM, as a shell reports a death by it), or the
    # signal's own death: a shell shows both alike. Once in a quiet serial lane the
    # SIGTERM run ended by SIGINT (-2) after its one-line hint and no traceback, so after the
    # interpreter had restored SIGINT's default at exit; nothing in hetsim sends SIGINT (not found).
    assert proc.returncode in ((128 + signum, -signum) if signum == signal.SIGTERM else (130, -signal.SIGINT)), err
    assert "interrupted:" in err and "--resume" in err and "Traceback" not in err
    assert _group_gone(proc.pid, within_s=5.0)  # no process of the sweep's group is left


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_sweep_started_with_ctrl_c_ignored_ignores_it_on_a_local_cluster_too(tmp_path):
    # A script's background job starts with SIGINT ignored: the local pool's sweep runs on through
    # a Ctrl-C; the LocalCluster's workers were ended by it and the sweep died with a traceback.
    sweep = write_sweep(tmp_path, steps_per_epoch=40, epochs=5, replications=2)
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "hetsim", "sweep", str(sweep), "--runs", str(runs), "--jobs", "2", "--engine",
               "simpy", "--scheduler", "local"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(runs.glob("*/sweep.toml")):
        time.sleep(0.01)
    workers = _workers(proc.pid)
    assert len(workers) == 2
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.5)
    assert all(_alive(pid) for pid in workers)  # not ended (and started again by their nannies)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert (only_run(runs) / "results.parquet").is_file()


def _workers(group: int) -> list[int]:
    """The process group's Dask worker processes (multiprocessing's spawned children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == group and b"spawn_main" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _group_gone(group: int, within_s: float) -> bool:
    """Whether process group ``group`` has no process left within ``within_s`` seconds. Not at
    once: multiprocessing's resource tracker (which a LocalCluster's spawned workers start) ends
    with the command, unwaited for, and is reaped by init a moment later."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.multiprocess
def test_closing_the_executor_between_cells_stops_the_pool(tmp_path):
    # An interrupt that lands in the caller while it handles a cell never reaches the executor's
    # generator; the command's close() must still stop the workers, not leave them running the
    # queued cells (which the interpreter's exit would then wait for).
    spec = dataclasses.replace(
        load_sweep(write_sweep(tmp_path, steps_per_epoch=250, epochs=40, replications=3)), engine="simpy"
    )
    executor = LocalExecutor(2)
    before = set(threading.enumerate())
    cells = executor.run(spec, expand(spec))
    next(cells)  # the first cell done; the pool is busy with the next ones
    assert multiprocessing.active_children()
    executor.close()
    # the pool's manager thread is joined, not left to end on its own: CPython 3.11's exit hook
    # writes to its wake-up pipe unlocked, and raced its closing ("Bad file descriptor" after a
    # failed cell's one line)
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not multiprocessing.active_children()  # each left cell takes seconds: a pool left running shows
    executor.close()  # twice is harmless


@pytest.mark.slow
@pytest.mark.parametrize("edit", ["grid", "policies"])
def test_a_folder_without_a_fingerprint_refuses_parts_of_another_grid_or_policy(edit, tmp_path, capsys):
    """An earlier version's meta.json has no fingerprint to refuse an edited sweep.toml by: each
    part's own grid labels and policy are checked against its cell's now (a review removed the
    fingerprint and a part, changed a grid value, and the resume mixed the old value's cells with
    the new's). Without meta.json at all nothing vouches for sweep.toml: refused."""
    run, _, _ = finished_run(tmp_path, capsys)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "sweep_sha256"}))
    (run / "parts" / "cell-00011.parquet").unlink()
    text = (run / "sweep.toml").read_text()
    old, new = {"grid": ("0.002", "0.003"), "policies": ('"dynamic"', '"proportional"')}[edit]
    assert old in text
    (run / "sweep.toml").write_text(text.replace(old, new))
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ran another: restore it or start a new sweep" in err, err
    assert not (run / "parts" / "cell-00011.parquet").exists()
    (run / "meta.json").unlink()
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 2
    assert capsys.readouterr().err == (f"hetsim: error: {run / 'meta.json'}: missing, so whether sweep.toml was "
                                       "edited since the cells in parts/ ran cannot be told: restore it, or start a "
                                       "new sweep\n")  # fmt: skip


@pytest.mark.slow
@pytest.mark.filterwarnings("error:constrained_layout not applied")  # long labels squeezed the panels away
def test_an_axis_of_tables_runs_reports_and_resumes(tmp_path, capsys):
    """A grid axis whose values (or a named axis whose labels) are tables records each as its
    inline TOML text: the report grouped by the tables themselves and died (unhashable dict),
    and a resume compared Parquet's arrays with the file's lists. The plotted cell is named by
    the table; a text in it is a TOML string (a quote escaped)."""
    slow = [{"every_s": 5.0, "duration_s": 1.0, "factor": 2.0}, {"every_s": 10.0, "duration_s": 1.0, "factor": 3.0}]
    sweep = {"name": "tables", "base": "paper", "policies": ["equal", "optimal"], "replications": 2, "seed": 1,
             "grid": {"length": {"values": [{"n": 1, "note": 'say "one"'}], "workload.epochs": [1]},  # a named axis
                      "workers.0.delay": [{"dist": "empirical", "samples": [0.01, 0.02]}],
                      "workers.1.slowdown": slow},
             "plots": {"cell": {"workers.1.slowdown": slow[1]}}}  # fmt: skip
    (tmp_path / "s.toml").write_text(tomli_w.dumps(sweep))
    assert main(["sweep", str(tmp_path / "s.toml"), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    run = only_run(tmp_path / "runs")
    table = capsys.readouterr().out
    assert '| {dist = "empirical", samples = [0.01, 0.02]} |' in table
    assert "| {every_s = 5.0, duration_s = 1.0, factor = 2.0} |" in table
    label = '{n = 1, note = "say \\"one\\""}'
    assert f"| {label} |" in table and tomllib.loads(f"x = {label}")["x"] == sweep["grid"]["length"]["values"][0]
    (run / "parts" / "cell-00003.parquet").unlink()
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 0
    assert "1 of 4 cells to run" in capsys.readouterr().err
    assert main(["report", str(run)]) == 0


SCALARS = (st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.booleans()
           | st.text(st.characters(blacklist_categories=("Cs",)), max_size=8))  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), inner,
                                        max_size=3), max_leaves=8)  # fmt: skip


@pytest.mark.slow
@given(st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), VALUES, max_size=4))
def test_a_tables_label_is_toml_that_reads_back_as_the_table(table):
    """A table-valued axis is labelled by its inline TOML: keys that are not bare (a space, a dot,
    none at all, non-ASCII) were written unquoted, and DEL raw, so some labels were not TOML."""
    assert tomllib.loads(f"x = {_inline(table)}")["x"] == table
