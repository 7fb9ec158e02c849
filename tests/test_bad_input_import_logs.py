"""``hetsim import-logs``: every bad or hostile reference-run folder and option, and the one line
it gets (exit status 2, no trace written, no process left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetsim.cli.main import main
from tests.refusals import HUGE, case, check_refused, deep, write_files

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


SUCCESS_TXT = "{tmp}/run/success.txt"
MEANS = f"{TIMER}:mean_batch_process_times"
DP_DIVIDES = "(the DP rule divides by each epoch's mean)"
COUNT_RANGE = "must be in [1, 1099511627776]"

CASES = [
    # the folder
    case("no-such-folder", ["{tmp}/nothing"], "{tmp}/nothing: no such folder"),
    case("a-file", ["{tmp}/run.txt"], "{tmp}/run.txt: a file, not a folder (a reference run's folder holds "
         "success.txt)", {"run.txt": ""}),
    case("empty-folder-name", [""], "hetsim import-logs: argument run_dir: an empty path: name a file or folder"),
    case("one-folder-twice", ["{tmp}/run", "{tmp}/run/"],  # as two nodes it doubled the workers
         "{tmp}/run: given twice (several folders are the nodes of one run, each once)", {"run/success.txt": ""}),
    case("no-success-txt", ["{tmp}/run"], "{tmp}/run/success.txt: missing (a reference run folder holds success.txt)",
         run(None)),
    case("second-node-without-success-txt", ["{tmp}/run", "{tmp}/other"],
         "{tmp}/other/success.txt: missing (a reference run folder holds success.txt)", {**run(), "other/x": ""}),
    case("no-batch-size", ["{tmp}/run"],  # it was taken as 256
         "{tmp}/run/success.txt:batch_size: missing (the run's global batch, 'batch_size : B')",
         {"run/success.txt": "num_epochs : 2\n"}),
    case("no-timers", ["{tmp}/run"], "{tmp}/run: no timer_summary_<rank>.json files", {"run/success.txt": SUCCESS}),
    # success.txt
    case("batch-size-text", ["{tmp}/run"], f"{SUCCESS_TXT}:batch_size: must be an integer, got a string ('lots')",
         run("batch_size : lots\nnum_epochs : 2\n")),
    case("batch-size-zero", ["{tmp}/run"], f"{SUCCESS_TXT}:batch_size: {COUNT_RANGE}, got 0",
         run("batch_size : 0\nnum_epochs : 2\n")),
    case("batch-size-float", ["{tmp}/run"], f"{SUCCESS_TXT}:batch_size: must be an integer, got float (64.5)",
         run("batch_size : 64.5\nnum_epochs : 2\n")),
    case("batch-size-boolean", ["{tmp}/run"], f"{SUCCESS_TXT}:batch_size: must be an integer, got a boolean (true)",
         run("batch_size : True\nnum_epochs : 2\n")),
    case("num-epochs-zero", ["{tmp}/run"], f"{SUCCESS_TXT}:num_epochs: {COUNT_RANGE}, got 0",
         run("batch_size : 64\nnum_epochs : 0\n")),
    case("batch-size-huge", ["{tmp}/run"], f"{SUCCESS_TXT}:batch_size: {COUNT_RANGE}, got {HUGE}",
         run(f"batch_size : {HUGE}\nnum_epochs : 2\n")),
    case("dynamic-partition-text", ["{tmp}/run"],
         f"{SUCCESS_TXT}:dynamic_partition: must be True or False, got a string ('yes')",
         run(SUCCESS + "dynamic_partition : yes\n")),
    case("num-epochs-missing-per-step", ["{tmp}/run"],
         f"{SUCCESS_TXT}:num_epochs: missing (the timer summaries have no mean_batch_process_times)",
         run("batch_size : 64\n", *[timer(mean_batch_process_times=None, process_times=[0.1] * 4)] * 2)),
    case("num-epochs-above-steps", ["{tmp}/run"], f"{SUCCESS_TXT}:num_epochs: must be <= the 4 steps logged, got 5",
         run("batch_size : 64\nnum_epochs : 5\n", *[timer(mean_batch_process_times=None, process_times=[0.1] * 4)]
             * 2)),
    # timer summaries
    case("timer-not-json", ["{tmp}/run"],
         f"{TIMER}: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
         run(SUCCESS, "{not json", "{not json")),
    case("timer-list", ["{tmp}/run"], f"{TIMER}: must hold a JSON object", run(SUCCESS, "[1, 2]", "[1, 2]")),
    case("timer-bom", ["{tmp}/run"],
         f"{TIMER}: not valid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)",
         run(SUCCESS, "\ufeff{}", "\ufeff{}")),
    case("timer-deep", ["{tmp}/run"], f"{TIMER}: not valid JSON: nested too deeply",
         run(SUCCESS, deep(".json"), deep(".json"))),
    case("timer-integer-too-long", ["{tmp}/run"],
         f"{TIMER}: not valid JSON: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 "
         "digits; use sys.set_int_max_str_digits() to increase the limit", run(SUCCESS, "1" * 5000, "1" * 5000)),
    case("timer-a-folder", ["{tmp}/run"], f"{TIMER}: cannot read: Is a directory",
         {"run/success.txt": SUCCESS, "run/timer_summary_0.json/x": ""}),
    case("timer-without-process", ["{tmp}/run"], f"{TIMER}:batch.process: missing", both(**{"batch.process": None})),
    case("means-text", ["{tmp}/run"], f"{MEANS}.0: must be a number, got a string ('a')",
         both(mean_batch_process_times=["a", 0.1])),
    case("means-negative", ["{tmp}/run"], f"{MEANS}.0: must be >= 0 s, got -1",
         both(mean_batch_process_times=[-1, 0.1])),
    case("means-nan", ["{tmp}/run"], f"{MEANS}.0: must be finite, got nan",
         both(mean_batch_process_times=[float("nan"), 0.1])),
    case("means-empty", ["{tmp}/run"], f"{MEANS}: needs at least one value", both(mean_batch_process_times=[])),
    case("means-null", ["{tmp}/run"], f"{MEANS}: must be a list of numbers, got null",
         run(SUCCESS, *[json.dumps({**timer(), "mean_batch_process_times": None})] * 2)),
    case("means-a-table", ["{tmp}/run"], f"{MEANS}: must be a list of numbers, got a table",
         both(mean_batch_process_times={"0": 0.1})),
    case("means-infinity", ["{tmp}/run"], f"{MEANS}.0: must be finite, got inf",
         both(mean_batch_process_times=[float("inf"), 0.1])),
    case("means-boolean", ["{tmp}/run"], f"{MEANS}.0: must be a number, got a boolean (true)",
         both(mean_batch_process_times=[True, 0.1])),
    case("means-huge", ["{tmp}/run"], f"{MEANS}.0: 1e+308 s is longer than 1e+09 s: check the units",
         both(mean_batch_process_times=[1e308, 1e308])),
    case("process-times-nan", ["{tmp}/run"], f"{TIMER}:process_times.0: must be finite, got nan",
         both(mean_batch_process_times=None, process_times=[float("nan")] * 4)),
    case("reduce-times-short", ["{tmp}/run"],
         f"{TIMER}:reduce_times: length 3, but process_times has length 4",
         both(mean_batch_process_times=None, process_times=[0.1] * 4, reduce_times=[0.01] * 3)),
    case("average-duration-text", ["{tmp}/run"],
         f"{TIMER}:batch.reduce.average_duration: must be a number, got a string ('slow')",
         both(**{"batch.reduce": {"average_duration": "slow", "n_events": 99, "total_time": 1.0}})),
    case("average-duration-null", ["{tmp}/run"],
         f"{TIMER}:batch.process.average_duration: must be a number, got null",
         both(**{"batch.process": {"average_duration": None, "n_events": 99, "total_time": 1.0}})),
    case("n-events-text", ["{tmp}/run"], f"{TIMER}:batch.process.n_events: must be an integer, got a string ('many')",
         both(**{"batch.process": {"average_duration": 0.1, "n_events": "many", "total_time": 1.0}})),
    case("n-events-missing", ["{tmp}/run"], f"{TIMER}:batch.process.n_events: missing",
         both(**{"batch.process": {"average_duration": 0.1, "total_time": 1.0}})),
    case("n-events-huge", ["{tmp}/run"],
         f"{TIMER}:batch.process.n_events: must be in [0, 1099511627776], got {HUGE}",
         both(**{"batch.process": {"average_duration": 0.1, "n_events": HUGE, "total_time": 1.0}})),
    case("ranks-disagree", ["{tmp}/run"],
         "{tmp}/run/timer_summary_1.json:mean_batch_process_times: length 1, but {tmp}/run/timer_summary_0.json "
         "has length 2: the ranks must log the same epochs or steps",
         run(SUCCESS, timer(), timer(mean_batch_process_times=[0.1]))),
    case("dp-means-zero", ["{tmp}/run"], f"{MEANS}.0: must be >= 1e-09 s, got 0 {DP_DIVIDES}",
         run(DP, timer(mean_batch_process_times=[0.0, 0.0]), timer(mean_batch_process_times=[0.0, 0.0]))),
    case("dp-means-subnormal", ["{tmp}/run"], f"{MEANS}.0: must be >= 1e-09 s, got 9.99989e-321 {DP_DIVIDES}",
         run(DP, timer(mean_batch_process_times=[1e-320, 1e-320]), timer(mean_batch_process_times=[1e-320, 1e-320]))),
    case("dp-process-times-zero", ["{tmp}/run"], f"{TIMER}:process_times.0: must be >= 1e-09 s, got 0 {DP_DIVIDES}",
         run(DP, *[timer(mean_batch_process_times=None, process_times=[0.0] * 4)] * 2)),
    # options
    case("out-txt", ["{tmp}/run", "-o", "{tmp}/t.txt"],
         "--out: {tmp}/t.txt: unknown file type '.txt' (use .csv, .parquet, .pq)", run()),
    case("out-a-folder", ["{tmp}/run", "-o", "{tmp}/run"],
         "--out: {tmp}/run is a folder", run()),
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
