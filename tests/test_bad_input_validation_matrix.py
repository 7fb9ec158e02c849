"""``validation`` itself and ``validation matrix``: every bad or hostile input and the one line it
gets (exit status 2, before any run starts: no results folder, no process left;
:func:`tests.test_bad_input.check_refused`). A matrix folder in use by another run is
tests/test_matrix.py's (it needs a second process)."""

from __future__ import annotations

import pytest

from tests.refusals import HUGE, case, check_refused, write_files
from validation.cli import cuda_devices, main

CASES = [
    # validation
    case("no-command", [], "the following arguments are required: command"),
    case("unknown-command", ["frobnicate"],
         "argument command: invalid choice: 'frobnicate' (choose from 'run', 'compare', 'matrix', "
         "'profile', 'batch-sweep', 'gpu-check')"),
    # matrix
    case("busy-negative", ["matrix", "--busy", "-1"], "--busy: must be in [0, 64], got -1"),
    case("busy-too-many", ["matrix", "--busy", "65"], "--busy: must be in [0, 64], got 65"),
    case("busy-huge", ["matrix", "--busy", str(HUGE)], f"--busy: must be in [0, 64], got {HUGE}"),
    case("busy-text", ["matrix", "--busy", "x"], "validation matrix: argument --busy: invalid int value: 'x'"),
    case("busy-nan", ["matrix", "--json", "--busy", "nan"],
         "validation matrix: argument --busy: invalid int value: 'nan'"),
    case("gpu-without-cuda", ["matrix", "--gpu"], "--gpu: no CUDA device on this machine"),
    case("out-is-a-file", ["matrix", "--out", "{tmp}/file"], "--out: {tmp}/file exists and is not a folder",
         {"file": "x"}),
    case("quick-out-is-a-file", ["matrix", "--quick", "--out", "{tmp}/file"],
         "--out: {tmp}/file exists and is not a folder", {"file": "x"}),
    case("out-in-a-file", ["matrix", "--out", "{tmp}/file/sub"],
         "--out: cannot write in {tmp}/file/sub: Not a directory",
         {"file": "x"}),
    # a folder that is not a matrix's: a rerun deletes unfinished runs' folders, so nothing else may be there
    case("out-holds-a-run", ["matrix", "--quick", "--out", "{tmp}/run"],
         "--out: {tmp}/run holds meta.json, not a validation matrix's file: give a new folder",
         {"run/meta.json": "{}", "run/trace.csv": "x"}),
    case("out-runs-holds-other", ["matrix", "--quick", "--out", "{tmp}/m"],
         "--out: {tmp}/m/runs holds mine, not a validation matrix's file: give a new folder", {"m/runs/mine/x": "x"}),
    case("out-run-holds-notes", ["matrix", "--quick", "--out", "{tmp}/m"],
         "--out: {tmp}/m/runs/digits-injected holds notes.txt, not a validation run's file: give a new folder",
         {"m/runs/digits-injected/notes.txt": "precious", "m/runs/digits-injected/meta.json": "{}"}),
    case("argument", ["matrix", "extra"], "unrecognized arguments: extra"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_matrix_refuses_bad_input_before_any_run_starts(argv, line, files, tmp_path, capsys, monkeypatch):
    if "--gpu" in argv and cuda_devices():
        pytest.skip("this machine has CUDA: matrix --gpu would run")
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)  # the default results folder, runs/matrix-<time>, would be made here
    check_refused(main, argv, line, tmp_path, capsys, prog="validation")


def test_a_run_folder_holding_export_traces_default_output_is_still_the_matrixs(tmp_path):
    from validation.matrix import check_matrix_folder

    write_files(tmp_path, {"m/runs/digits-injected/meta.json": "{}", "m/runs/digits-injected/trace.json": "{}"})
    check_matrix_folder(tmp_path / "m")  # `hetsim export-trace RUN` writes RUN/trace.json, as the Perfetto guide shows
