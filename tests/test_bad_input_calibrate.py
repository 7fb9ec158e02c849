"""``hetsim calibrate``: every bad or hostile trace and option, and the one line it gets (exit
status 2, no scenario written, no process left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from hetsim.cli.main import main
from tests.refusals import HUGE, case, check_refused, write_files

HEADER = "worker,local_batch,compute_s,comm_s\n"
GOOD = {"t.csv": HEADER + "0,4,0.1,0\n0,8,0.2,0\n1,4,0.1,0\n1,8,0.2,0\n0,8,0.21,0\n1,8,0.19,0\n"}
NO_COMM = {"t.csv": "worker,local_batch,compute_s\n0,4,0.1\n0,8,0.2\n"}  # calibrate warns: no comm_s column
TWO_POLICIES = {"t.csv": "worker,local_batch,compute_s,comm_s,policy\n0,4,0.1,0,equal\n0,8,0.2,0,dynamic\n"}
TRACE = "{tmp}/t.csv"


def parquet(**columns: object) -> bytes:
    """A Parquet table of ``columns`` as bytes (column types a CSV cannot carry)."""
    buffer = io.BytesIO()
    pd.DataFrame(columns).to_parquet(buffer, index=False)
    return buffer.getvalue()


def rows(*lines: str) -> dict[str, str]:
    """``t.csv``: the header and these data rows."""
    return {"t.csv": HEADER + "".join(f"{line}\n" for line in lines)}


CASES = [
    # the trace file
    case("no-such-file", ["{tmp}/absent.csv"], "{tmp}/absent.csv: no such file"),
    case("a-folder", ["{tmp}/folder"], "{tmp}/folder: a folder: name its trace file (a simulate --out or validation "
         "run folder holds trace.parquet)", {"folder/x": ""}),
    case("a-profiler-trace", ["{tmp}/rank0.json"], "{tmp}/rank0.json: a JSON file, not a trace table: a "
         "torch.profiler trace goes through hetsim import-trace first (its CSV or Parquet output is the trace)",
         {"rank0.json": '{"traceEvents": []}'}),
    case("empty", [TRACE], "{tmp}/t.csv: not a readable CSV table: No columns to parse from file", {"t.csv": ""}),
    case("header-only", [TRACE], "{tmp}/t.csv: the table has no rows", rows()),
    case("binary", [TRACE],
         "{tmp}/t.csv: not a readable CSV table: 'utf-8' codec can't decode byte 0xff in position 10: "
         "invalid start byte",
         {"t.csv": b"\x00\x01\x02garbage\xff\xfe"}),
    case("garbage-parquet", ["{tmp}/t.parquet"],
         "{tmp}/t.parquet: not a readable Parquet table: Could not open Parquet input source '{tmp}/t.parquet': "
         "Parquet magic bytes not found in footer. Either the file is corrupted or this is not a parquet file.",
         {"t.parquet": b"PAR1garbage"}),
    case("missing-column", [TRACE],
         "local_batch: missing column in {tmp}/t.csv (a trace needs worker, local_batch, compute_s)",
         {"t.csv": "worker,compute_s\n0,0.1\n"}),
    case("semicolons", [TRACE], "worker: missing column in {tmp}/t.csv (a trace needs worker, local_batch, compute_s)",
         {"t.csv": "a;b;c\n1;2;3\n"}),
    case("included-not-a-flag", [TRACE],  # the file's row, not its place once sorted by worker and step
         "included: not true or false: 'maybe' in data row 1 in {tmp}/t.csv",
         {"t.csv": "worker,local_batch,compute_s,included\n1,4,0.1,maybe\n0,4,0.1,true\n1,8,0.2,true\n"}),
    case("empty-policy", [TRACE], "policy: empty in data row 2 in {tmp}/t.csv: every row names the policy it ran",
         {"t.csv": "policy,worker,local_batch,compute_s\nequal,0,4,0.1\n,1,4,0.1\n"}),
    case("dates-for-seconds", ["{tmp}/t.parquet"],  # taken as nanoseconds since 1970 before
         "compute_s: holds datetime64[us] values in {tmp}/t.parquet, not numbers",
         {"t.parquet": parquet(worker=[0, 0], local_batch=[4, 8], compute_s=pd.date_range("2026-01-01", periods=2))}),
    case("text-in-compute", [TRACE], "compute_s: non-numeric value 'slow' in data row 2 in {tmp}/t.csv",
         rows("0,4,0.1,0", "0,8,slow,0")),
    case("text-in-comm", [TRACE], "comm_s: non-numeric value 'x' in data row 2 in {tmp}/t.csv",
         rows("0,4,0.1,0", "0,8,0.2,x")),
    case("nan-compute", [TRACE], "compute_s: non-numeric value 'nan' in data row 1 in {tmp}/t.csv",
         rows("0,4,nan,0", "0,8,0.2,0")),
    case("inf-compute", [TRACE], "compute_s: non-numeric value 'inf' in data row 1 in {tmp}/t.csv",
         rows("0,4,inf,0", "0,8,0.2,0")),
    case("negative-compute", [TRACE], "compute_s: negative value -0.1 in data row 1 in {tmp}/t.csv",
         rows("0,4,-0.1,0", "0,8,0.2,0")),
    case("negative-batch", [TRACE], "local_batch: negative value -4 in data row 1 in {tmp}/t.csv",
         rows("0,-4,0.1,0", "0,8,0.2,0")),
    case("fractional-batch", [TRACE], "local_batch: non-integer value 4.5 in data row 1 in {tmp}/t.csv",
         rows("0,4.5,0.1,0", "0,8,0.2,0")),
    case("negative-worker", [TRACE], "worker: negative value -1 in data row 1 in {tmp}/t.csv",
         rows("-1,4,0.1,0", "-1,8,0.2,0")),
    case("no-samples", [TRACE], "compute_s: no worker has 2 complete computes (rows with samples, included): one "
         "step fits neither a worker's noise nor two parameters",
         rows("0,0,0.1,0", "0,0,0.2,0")),
    case("huge-batch", [TRACE], f"local_batch: value {HUGE} in data row 1 in {{tmp}}/t.csv is beyond 2^40",
         rows(f"0,{HUGE},0.1,0", "0,8,0.2,0")),
    case("huge-compute", [TRACE], "compute_s: 1e+300 s in data row 1 in {tmp}/t.csv is longer than 1e+09 s: check "
         "the units", rows("0,4,1e300,0", "0,8,2e300,0")),
    # options
    case("two-policies", [TRACE],
         "--policy: the trace holds 2 policies (equal, dynamic); calibrate one at a time, chosen by its label",
         TWO_POLICIES),
    case("policy-not-in-trace", [TRACE, "--policy", "nope"],
         "--policy: no rows of 'nope' in the trace (it has: equal, dynamic)", TWO_POLICIES),
    case("policy-without-column", [TRACE, "--policy", "nope"],
         "--policy: the trace has no policy column to choose rows by", GOOD),
    case("unknown-model", [TRACE, "--model", "spline"],
         "--model: unknown model 'spline' (choose auto, affine, hinge, table)", GOOD),
    case("empty-name", [TRACE, "--name", " "],
         "--name: empty: name the scenario, or leave --name out for calibrated-<trace file>", GOOD),
    case("empty-model", [TRACE, "--model", ""], "--model: unknown model '' (choose auto, affine, hinge, table)", GOOD),
    case("hinge-on-two-sizes", [TRACE, "--model", "hinge"],
         "--model: worker 0 was seen at 2 batch size(s); hinge needs 3 or more", GOOD),
    case("out-yaml", [TRACE, "-o", "{tmp}/out.yaml"],
         "--out: {tmp}/out.yaml: unknown file type '.yaml' (use .toml, .json)", GOOD),
    case("out-is-the-trace", ["{tmp}/t.toml", "-o", "{tmp}/t.toml"],  # the trace was replaced by its fit
         "--out: {tmp}/t.toml is a file calibrate reads: name another to write", {"t.toml": GOOD["t.csv"]}),
    case("out-is-the-runs-record", [TRACE, "-o", "{tmp}/summary.json"],
         "--out: {tmp}/summary.json is a file calibrate reads: name another to write", GOOD),
    case("out-a-folder", [TRACE, "-o", "{tmp}/folder"], "--out: {tmp}/folder is a folder",
         {**GOOD, "folder/x": ""}),
    case("out-in-a-file", [TRACE, "-o", "{tmp}/t.csv/out.toml"],
         "--out: cannot write {tmp}/t.csv/out.toml: {tmp}/t.csv is not a folder", GOOD),
    case("out-in-a-file-after-a-warning", [TRACE, "-o", "{tmp}/t.csv/out.toml"],
         "--out: cannot write {tmp}/t.csv/out.toml: {tmp}/t.csv is not a folder", NO_COMM),
    case("out-folders-not-left", [TRACE, "--model", "hinge", "-o", "{tmp}/new/sub/out.toml"],  # were made, and left
         "--model: worker 0 was seen at 2 batch size(s); hinge needs 3 or more", GOOD),
    case("no-trace", [], "hetsim calibrate: the following arguments are required: trace"),
    case("out-twice-attached", [TRACE, "-o{tmp}/a.toml", "-o{tmp}/b.toml"],  # the last one was written, silently
         "hetsim calibrate: argument -o/--out: given twice (give it once)", GOOD),
    case("out-twice-short-and-long", [TRACE, "-o", "{tmp}/a.toml", "--out={tmp}/b.toml"],
         "hetsim calibrate: argument -o/--out: given twice (give it once)", GOOD),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_calibrate_refuses_bad_input(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    out = [] if "-o" in argv or not argv else ["-o", "{tmp}/out.toml"]
    check_refused(main, ["calibrate", *argv, *out], line, tmp_path, capsys)
