"""``hetsim import-trace --format torch-profiler``: bad traces and options, and the one line each
gets (exit status 2, nothing written, no process left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from hetsim.cli.main import main
from tests.kineto_builder import rank_events, trace
from tests.refusals import case, check_refused, write_files

STEPS = [[3000.0, 7000.0], [5000.0, 4000.0], [2000.0, 6000.0]]
CMD = ["import-trace", "--format", "torch-profiler"]
OUT = ["-o", "{tmp}/trace.csv"]


def rank(r: int, world: int = 2, steps: list[list[float]] = STEPS, **kw: Any) -> dict[str, Any]:
    return trace(r, world, rank_events(r, steps, [64] * len(steps[0]), **kw))


def gz(data: Any) -> bytes:
    return gzip.compress(json.dumps(data).encode(), mtime=0)


def both(**kw: Any) -> dict[str, str | bytes]:
    return {"r0.json.gz": gz(rank(0, **kw)), "r1.json.gz": gz(rank(1, **kw))}


def edited(r: int, change: Any) -> dict[str, str | bytes]:
    """Both ranks, rank ``r``'s trace changed by ``change(data)``."""
    files = both()
    data = rank(r)
    change(data)
    files[f"r{r}.json.gz"] = gz(data)
    return files


def drop_step(data: dict[str, Any]) -> None:
    data["traceEvents"] = [e for e in data["traceEvents"] if e["name"] != "ProfilerStep#3"]


def negative_duration(data: dict[str, Any]) -> None:
    next(e for e in data["traceEvents"] if e["name"] == "aten::linear")["dur"] = -200


def no_collectives(data: dict[str, Any]) -> None:
    data["traceEvents"] = [e for e in data["traceEvents"] if not e["name"].startswith(("c10d", "gloo"))]


def without_collectives(r: int) -> dict[str, Any]:
    data = rank(r)
    no_collectives(data)
    return data


def other_payload(data: dict[str, Any]) -> None:
    for e in data["traceEvents"]:
        if e["name"] == "c10d::allreduce_":
            e["args"]["Input Dims"] = [[[99]], [], []]


def drifting(data: dict[str, Any]) -> None:
    """Rank 1's clock runs 50 ms further off every step: no one offset fits."""
    for e in data["traceEvents"]:
        e["ts"] += 50_000.0 * ((e["ts"] - 1_000_000.0) // 20_000.0)


R0, R1 = "{tmp}/r0.json.gz", "{tmp}/r1.json.gz"
NOT_JSON = "not a Kineto trace: not JSON (Expecting value: line 1 column 1 (char 0))"
ARGS = [*CMD, R0, R1, *OUT]

CASES = [
    case("not-json", [*CMD, "{tmp}/x.json", R1, *OUT], f"{{tmp}}/x.json: {NOT_JSON}", {**both(), "x.json": "hello"}),
    case("no-trace-events", [*CMD, "{tmp}/x.json", R1, *OUT], "{tmp}/x.json: not a Kineto trace (no traceEvents list)",
         {**both(), "x.json": json.dumps({"schemaVersion": 1})}),
    case("no-distributed-info", ARGS, "{tmp}/r0.json.gz: has no distributedInfo with rank and world_size (not a "
         "distributed job's trace)", edited(0, lambda d: d.pop("distributedInfo"))),
    case("truncated-gzip", ARGS, "{tmp}/r1.json.gz: a truncated or damaged gzip file (Compressed file ended before "
         "the end-of-stream marker was reached)", {**both(), "r1.json.gz": gz(rank(1))[:300]}),
    case("no-steps", ARGS, "{tmp}/r0.json.gz: has no ProfilerStep#N slices (record with a schedule and call "
         "profiler.step())", edited(0, lambda d: d.update(traceEvents=[e for e in d["traceEvents"]
                                                                          if "Step" not in e["name"]]))),
    case("rank-twice", [*CMD, R0, R0, *OUT], "{tmp}/r0.json.gz: rank 0 twice (also {tmp}/r0.json.gz)", both()),
    case("rank-missing", [*CMD, R0, *OUT], "PATH: rank 1 of the job's 2 is missing (pass one trace per rank)",
         both()),
    case("different-world-size", ARGS, "{tmp}/r1.json.gz: traces of different jobs: world size 3 here, 2 in "
         "{tmp}/r0.json.gz", edited(1, lambda d: d["distributedInfo"].update(world_size=3))),
    case("different-collectives", ARGS, "{tmp}/r1.json.gz: traces of different jobs: collective 0 is gloo:all_reduce "
         "[[99]] here, gloo:all_reduce [[36]] on rank 0", edited(1, other_payload)),
    case("step-missing", ARGS, "{tmp}/r1.json.gz: ProfilerStep#3 is missing on rank 1 (every rank needs the same "
         "steps)", edited(1, drop_step)),
    case("no-collectives", ARGS, "{tmp}/r0.json.gz: has no collectives: not a data-parallel job's trace",
         {"r0.json.gz": gz(without_collectives(0)), "r1.json.gz": gz(without_collectives(1))}),
    case("clocks-unalignable", ARGS, "PATH: the ranks' clocks cannot be aligned: after the best offsets, 2 of 3 "
         "all-reduces end on a rank before the last rank issued them (by up to 48.0 ms): not traces of one run?",
         edited(1, drifting)),
    case("no-shapes-no-batch", ARGS, "--batch: rank 0, ProfilerStep#1: no recorded input shape gives the local batch "
         "(record with record_shapes=True, or pass --batch RANK=B,...)", {
             f"r{r}.json.gz": gz(trace(r, 2, rank_events(r, STEPS, [64, 64], shapes=False))) for r in range(2)}),
    case("bad-batch", [*ARGS, "--batch", "0=64,1=lots"], "--batch: '1=lots' is not RANK=B (e.g. 0=64,1=32)", both()),
    case("negative-duration", ARGS, "{tmp}/r0.json.gz: event 'aten::linear' has a negative duration (-200 us): not "
         "a trace torch.profiler wrote", edited(0, negative_duration)),
    case("rank-beyond-world", ARGS, "{tmp}/r1.json.gz: rank 5 is not one of the job's 2 ranks (its distributedInfo)",
         {"r0.json.gz": gz(rank(0)), "r1.json.gz": gz(trace(5, 2, rank_events(1, STEPS, [64, 64])))}),
    case("other-runs-steps", ARGS, "{tmp}/r1.json.gz: traces of different jobs: rank 1 profiled steps 11-13, rank 0 "
         "1-3", {"r0.json.gz": gz(rank(0)), "r1.json.gz": gz(trace(1, 2, rank_events(1, STEPS, [64, 64],
                                                                                     steps=[11, 12, 13])))}),
    case("batch-rank-twice", [*ARGS, "--batch", "0=32,0=16"], "--batch: rank 0 is given twice", both()),
    case("batch-huge", [*ARGS, "--batch", "0=99999999999999"],
         "--batch: rank 0's batch 99999999999999 is beyond 1099511627776", both()),
    case("batch-not-a-rank", [*ARGS, "--batch", "5=3"], "--batch: rank 5 is not one of the job's 2 ranks (0-1)",
         both()),
    case("batch-all-zero", [*ARGS, "--batch", "0=0,1=0"], "--batch: every rank's batch is 0 in every step: the trace "
         "would hold no samples", both()),
    case("out-kind", [*CMD, R0, R1, "-o", "{tmp}/trace.txt"], "--out: {tmp}/trace.txt: unknown file type '.txt' "
         "(use .csv, .parquet, .pq)", both()),
    case("no-such-file", [*CMD, R0, "{tmp}/r9.json.gz", *OUT], "{tmp}/r9.json.gz: no such file or folder", both()),
    case("reference-logs-with-batch", ["import-trace", "--format", "reference-logs", "{tmp}/run", "--batch", "0=8",
         *OUT], "--batch: only for --format torch-profiler (reference logs record the batches)", both()),
    case("reference-logs-with-policy", ["import-trace", "--format", "reference-logs", "{tmp}/run", "--policy", "equal",
         *OUT], "--policy: only for --format torch-profiler (reference logs record the policy)", both()),
    case("folder-of-two-segments", [*CMD, "{tmp}/prof", *OUT], "--policy: the traces are of 2 segments (a, b): pick "
         "one with --policy", {"prof/a-rank0.json.gz": gz(rank(0)), "prof/b-rank0.json.gz": gz(rank(0))}),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_refused(argv: list[str], line: str, files: dict[str, str | bytes], tmp_path: Any,
                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    write_files(tmp_path, files)
    check_refused(main, argv, line, tmp_path, capsys)


PROFILE_CASES = [
    case("profile-beyond-an-epoch", ["run", "--profile", "50", "--out", "{tmp}/run"], "--profile: 50 steps and the "
         "profiler's warm-up step are more than an epoch's 11 steps (each policy is profiled in its first epoch)"),
    case("profile-text", ["run", "--profile", "lots", "--out", "{tmp}/run"],
         "--profile: must be an integer, got a string ('lots')"),
    case("profile-negative", ["run", "--profile", "-1", "--out", "{tmp}/run"],
         "--profile: must be in [0, 1000], got -1"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), PROFILE_CASES)
def test_validation_run_profile_refused(argv: list[str], line: str, files: dict[str, str | bytes], tmp_path: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """``validation run --profile``: refused before any rank starts, nothing written."""
    from validation.cli import main as validation_main

    check_refused(validation_main, argv, line, tmp_path, capsys, prog="validation")
