"""``hetsim import-logs``: every bad or hostile reference-run folder and option, and the one line
it gets (exit status 2, no trace written, no process left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetsim.cli import main
from tests.test_bad_input import HUGE, case, check_refused, deep, write_files, xfail

SUCCESS = "batch_size : 64\nnum_epochs : 2\n"
DP = SUCCESS + "dynamic_partition : True\n"
TIMER = "{tmp}/run/timer_summary_0.json"


def timer(**fields: Any) -> dict[str, Any]:
    """A rank's timer summary: ``fields`` replace the defaults (None: left out)."""
    data = {"batch.process": {"average_duration": 0.1, "n_events": 99, "total_time": 10.0},
            "batch.reduce": {"average_duration": 0.01, "n_events": 99, "total_time": 1.0},
            "mean_batch_process_times": [0.1, 0.1], **fields}  # fmt: skip
    return {k: v for k, v in data.items() if v is not None}


def run(success: str | None = SUCCESS, *timers: dict[str, Any] | str) -> dict[str, str]:
    """A reference run folder ``run/``: success.txt and one timer summary per rank (two equal
    default ones unless given; a string is written as it is)."""
    files = {} if success is None else {"run/success.txt": success}
    for rank, data in enumerate(timers or (timer(), timer())):
        text = data if isinstance(data, str) else json.dumps(data)
        files[f"run/timer_summary_{rank}.json"] = text
    return files


def both(**fields: Any) -> dict[str, str]:
    """Both ranks' timers with ``fields``."""
    return run(SUCCESS, timer(**fields), timer(**fields))


NOT_A_LIST = f"{TIMER}:mean_batch_process_times: must be a non-empty list of non-negative numbers"

CASES = [
    # the folder
    case("no-such-folder", ["{tmp}/nothing"], "{tmp}/nothing: no such folder"),
    case("no-success-txt", ["{tmp}/run"], "{tmp}/run/success.txt: missing (a reference run folder holds success.txt)",
         run(None)),
    case("second-node-without-success-txt", ["{tmp}/run", "{tmp}/other"],
         "{tmp}/other/success.txt: missing (a reference run folder holds success.txt)", {**run(), "other/x": ""}),
    case("no-timers", ["{tmp}/run"], "{tmp}/run: no timer_summary_<rank>.json files", {"run/success.txt": SUCCESS}),
    # success.txt
    case("batch-size-text", ["{tmp}/run"], "batch_size: must be an integer, got a string ('lots')",
         run("batch_size : lots\nnum_epochs : 2\n")),
    case("batch-size-zero", ["{tmp}/run"], "batch_size: must be >= 1, got 0", run("batch_size : 0\nnum_epochs : 2\n")),
    case("batch-size-float", ["{tmp}/run"], "batch_size: must be an integer, got float (64.5)",
         run("batch_size : 64.5\nnum_epochs : 2\n")),
    case("num-epochs-zero", ["{tmp}/run"], "num_epochs: must be >= 1, got 0", run("batch_size : 64\nnum_epochs : 0\n")),
    case("batch-size-huge", ["{tmp}/run"], f"batch_size: must be in [1, 1099511627776], got {HUGE}",
         run(f"batch_size : {HUGE}\nnum_epochs : 2\n"),
         marks=xfail("exit 0 with a NumPy RuntimeWarning (invalid value encountered in cast); writes a trace")),
    # timer summaries
    case("timer-not-json", ["{tmp}/run"],
         f"{TIMER}: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
         run(SUCCESS, "{not json", "{not json")),
    case("timer-list", ["{tmp}/run"], f"{TIMER}: must hold a JSON object", run(SUCCESS, "[1, 2]", "[1, 2]")),
    case("timer-bom", ["{tmp}/run"],
         f"{TIMER}: not valid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)",
         run(SUCCESS, "\ufeff{}", "\ufeff{}")),
    case("timer-deep", ["{tmp}/run"], f"{TIMER}: not valid JSON: nested too deeply",
         run(SUCCESS, deep(".json"), deep(".json")),
         marks=xfail("RecursionError traceback (the scenario reader catches it; the timer reader does not)")),
    case("timer-without-process", ["{tmp}/run"], f"{TIMER}:batch.process: missing", both(**{"batch.process": None})),
    case("means-text", ["{tmp}/run"], NOT_A_LIST, both(mean_batch_process_times=["a", 0.1])),
    case("means-negative", ["{tmp}/run"], NOT_A_LIST, both(mean_batch_process_times=[-1, 0.1])),
    case("means-nan", ["{tmp}/run"], NOT_A_LIST, both(mean_batch_process_times=[float("nan"), 0.1])),
    case("means-empty", ["{tmp}/run"], NOT_A_LIST, both(mean_batch_process_times=[])),
    case("means-null", ["{tmp}/run"], NOT_A_LIST,
         run(SUCCESS, *[json.dumps({**timer(), "mean_batch_process_times": None})] * 2),
         marks=xfail("TypeError traceback (object of type 'NoneType' has no len())")),
    case("means-infinity", ["{tmp}/run"], NOT_A_LIST, both(mean_batch_process_times=[float("inf"), 0.1]),
         marks=xfail("exit 0 with a NumPy RuntimeWarning (invalid value encountered in subtract); writes a trace")),
    case("means-boolean", ["{tmp}/run"], NOT_A_LIST, both(mean_batch_process_times=[True, 0.1]),
         marks=xfail("true is taken as 1.0: exit 0, writes a trace")),
    case("means-huge", ["{tmp}/run"],
         f"{TIMER}:mean_batch_process_times: 1e+308 s is longer than 1e9 s: check the units",
         both(mean_batch_process_times=[1e308, 1e308]),
         marks=xfail("exit 0 with a NumPy RuntimeWarning (overflow encountered in multiply); writes a trace")),
    case("process-times-nan", ["{tmp}/run"],
         f"{TIMER}:process_times: must be a non-empty list of non-negative numbers",
         both(mean_batch_process_times=None, process_times=[float("nan")] * 4)),
    case("average-duration-text", ["{tmp}/run"], f"{TIMER}:batch.reduce.average_duration: must be a number, got 'slow'",
         both(**{"batch.reduce": {"average_duration": "slow", "n_events": 99, "total_time": 1.0}}),
         marks=xfail("ValueError traceback (could not convert string to float: 'slow')")),
    case("n-events-text", ["{tmp}/run"], f"{TIMER}:batch.process.n_events: must be an integer, got 'many'",
         both(**{"batch.process": {"average_duration": 0.1, "n_events": "many", "total_time": 1.0}}),
         marks=xfail("ValueError traceback (invalid literal for int() with base 10: 'many')")),
    case("ranks-disagree", ["{tmp}/run"], "{tmp}/run: the ranks logged different numbers of epochs or steps",
         run(SUCCESS, timer(), timer(mean_batch_process_times=[0.1]))),
    case("dp-means-zero", ["{tmp}/run"],
         "mean_batch_process_times: must be positive: the DP rule divides by each epoch's mean",
         run(DP, timer(mean_batch_process_times=[0.0, 0.0]), timer(mean_batch_process_times=[0.0, 0.0]))),
    case("dp-means-subnormal", ["{tmp}/run"],
         "mean_batch_process_times: must be positive: the DP rule divides by each epoch's mean",
         run(DP, timer(mean_batch_process_times=[1e-320, 1e-320]), timer(mean_batch_process_times=[1e-320, 1e-320])),
         marks=xfail("exit 0 with NumPy RuntimeWarnings (overflow and invalid value encountered in divide, invalid "
                     "value in cast); writes a trace")),
    # options
    case("out-txt", ["{tmp}/run", "-o", "{tmp}/t.txt"],
         "--out: {tmp}/t.txt: unknown file type '.txt' (use .csv, .parquet, .pq)", run()),
    case("out-a-folder", ["{tmp}/run", "-o", "{tmp}/run"],
         "--out: {tmp}/run: unknown file type '' (use .csv, .parquet, .pq)", run()),
    case("out-in-a-file", ["{tmp}/run", "-o", "{tmp}/run/success.txt/t.csv"],
         "{tmp}/run/success.txt/t.csv: cannot write here: File exists", run()),
    case("no-out", ["{tmp}/run"], "hetsim import-logs: the following arguments are required: -o/--out", run()),
    case("no-folder", ["-o", "{tmp}/t.csv"], "hetsim import-logs: the following arguments are required: run_dir"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_import_logs_refuses_bad_input(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    out = [] if "-o" in argv or line.endswith("-o/--out") else ["-o", "{tmp}/t.csv"]
    check_refused(main, ["import-logs", *argv, *out], line, tmp_path, capsys)
