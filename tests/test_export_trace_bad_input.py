"""``hetsim export-trace`` refusing bad input: one line naming the field, exit status 2, nothing
written (the format itself: tests/test_export_trace.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from hetsim.cli.main import main
from hetsim.model.trace import write_trace_table
from hetsim.policies import Equal
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario
from tests.refusals import check_refused
from tests.test_export_trace import two_workers_with_buckets


def write_trace(tmp_path: Path, **columns: Any) -> None:
    frame = simulate(build_scenario(two_workers_with_buckets()), Equal()).to_frame()
    write_trace_table(frame.assign(**columns), tmp_path / "t.csv")


@pytest.mark.parametrize(
    "prepare, argv, line",
    [
        (None, ["{tmp}/nope"], "{tmp}/nope: no such file or folder"),
        ("folder", ["{tmp}/empty"], "{tmp}/empty: not a simulate --out, sweep or validation run folder (no "
                                    "summary.json, sweep.toml or meta.json)"),  # fmt: skip
        ("text", ["{tmp}/notes.txt"], "{tmp}/notes.txt: not a trace file (.csv, .parquet, .pq) nor a run folder"),
        ("trace", ["{tmp}/t.csv", "--policy", "adaptive"], "--policy: 'adaptive' is not in {tmp}/t.csv (it holds "
                                                           "equal)"),  # fmt: skip
        ("trace", ["{tmp}/t.csv", "--steps", "4:4"], "--steps: 4:4 is an empty step range (B must be larger than A)"),
        ("trace", ["{tmp}/t.csv", "--steps", "2:99"], "--steps: 2:99 ends beyond the last step, 5 (use 2:6)"),
        ("trace", ["{tmp}/t.csv", "--steps", "7:"], "--steps: 7: starts after the last step, 5"),
        ("trace", ["{tmp}/t.csv", "--steps", "a-b"], "--steps: 'a-b' is not A:B (steps A to B-1, e.g. 0:100)"),
        ("trace", ["{tmp}/t.csv", "--steps=-1:3"],
         "--steps: '-1:3' is not A:B (steps A to B-1, e.g. 0:100): steps count from 0"),
        ("no-compute", ["{tmp}/t.csv"], "compute_s: missing column in {tmp}/t.csv (a trace needs step, worker, "
                                        "local_batch, start_s, compute_s, wait_s, comm_s)"),  # fmt: skip
        ("duplicate", ["{tmp}/t.csv"], "{tmp}/t.csv: policy equal: step 0 has two rows of one worker: not a trace"),
        ("no-policy", ["{tmp}/t.csv"], "policy: empty in data row 1 in {tmp}/t.csv: every row names the policy it ran"),
        ("trace", ["{tmp}/t.csv", "-o", "{tmp}"], "--out: {tmp} is the input or a folder: name a file to write"),
        ("trace", ["{tmp}/t.csv", "-o", "{tmp}/x.txt"], "--out: {tmp}/x.txt: unknown file type (use .json, or "
                                                        ".json.gz gzipped)"),  # fmt: skip
    ],
    ids=["missing", "empty-folder", "not-a-table", "unknown-policy", "empty-range", "beyond-the-end",
         "after-the-end", "not-a-range", "negative-start", "no-compute-column", "two-rows-of-a-worker", "empty-policy",
         "out-is-a-folder", "out-kind"],
)  # fmt: skip
def test_bad_input_is_one_line_and_nothing_written(tmp_path, capsys, prepare, argv, line):
    if prepare == "folder":
        (tmp_path / "empty").mkdir()
    elif prepare == "text":
        (tmp_path / "notes.txt").write_text("hello\n")
    elif prepare == "trace":
        write_trace(tmp_path)
    elif prepare == "no-compute":
        write_trace(tmp_path)
        pd.read_csv(tmp_path / "t.csv").drop(columns="compute_s").to_csv(tmp_path / "t.csv", index=False)
    elif prepare == "duplicate":
        write_trace(tmp_path, worker=0)
    elif prepare == "no-policy":  # a traceback before
        write_trace(tmp_path)
        pd.read_csv(tmp_path / "t.csv").assign(policy="").to_csv(tmp_path / "t.csv", index=False)
    if "-o" not in argv:
        argv = [*argv, "-o", "{tmp}/out.json"]
    check_refused(main, ["export-trace", *argv], line, tmp_path, capsys)


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_a_run_folders_own_file_is_not_written_over(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["simulate", "workstation", "--policy", "equal", "--set", "workload.epochs=1", "--out", str(run)]) == 0
    before = (run / "summary.json").read_bytes()
    capsys.readouterr()
    assert main(["export-trace", str(run), "-o", str(run / "summary.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out: {run}/summary.json is a file of the folder being exported" in err
    assert (run / "summary.json").read_bytes() == before
    assert main(["export-trace", str(run)]) == 0 and main(["export-trace", str(run)]) == 0  # its own export: again
