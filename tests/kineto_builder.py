"""Synthetic Kineto traces of a data-parallel job with known timings, for the importer's tests
(tests/test_import_trace*.py).

Each rank's step ``k`` (times in microseconds on the rank's own clock, ``shift_us`` added):

    ProfilerStep#k  [T, T + STEP_US]
    aten::linear    [T + 100, +dims (b, 8)]              the forward (local batch b)
    c10d::allreduce_ [T + c, T + c + 10]                  the rank issues the gradient all-reduce
    gloo:all_reduce  [T + c + 5, E] on gloo's thread      E = T + max(c) + COMM_US on every rank
    aten::add_      [E + RESUME_US, + 100]               the optimizer, once the rank resumes

so the rank computes ``c`` (from the step's start to its issue), waits ``max(c) - c`` for the
last rank, and the rest of the step, ``STEP_US - max(c)``, is communication (the exchange, the
wake-up, the optimizer).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STEP_US = 20_000.0
COMM_US = 2_000.0
RESUME_US = 50.0


def rank_events(rank: int, computes_us: Sequence[Sequence[float]], batches: Sequence[int], shift_us: float = 0.0,
                steps: Sequence[int] | None = None, shapes: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """Rank ``rank``'s events; ``computes_us[k][r]``: rank r's compute in the k-th step."""
    events: list[dict[str, Any]] = []
    numbers = list(steps) if steps is not None else list(range(1, len(computes_us) + 1))
    for k, (number, computes) in enumerate(zip(numbers, computes_us)):
        t = 1_000_000.0 + k * STEP_US + shift_us
        c = computes[rank]
        end = t + max(computes) + COMM_US

        def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", **args: Any) -> None:
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur,
                           "args": args})  # fmt: skip

        op(f"ProfilerStep#{number}", t, STEP_US, cat="user_annotation")
        dims = {"Input Dims": [[batches[rank], 8], [4, 8], [4]]} if shapes else {}
        op("aten::linear", t + 100, 200, **dims)
        op("c10d::allreduce_", t + c, 10, **{"Input Dims": [[[36]], [], []]})
        op("gloo:all_reduce", t + c + 5, end - (t + c + 5), tid=2, cat="user_annotation", **{"Input Dims": [[36]]})
        op("aten::add_", end + RESUME_US, 100)
    return events


def trace(rank: int, world: int, events: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A whole Kineto JSON object of one rank."""
    head = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
            "host_name": "testhost"}  # fmt: skip
    return {**head, **top, "traceEvents": events}


def write(path: Path, data: Any, gz: bool = True) -> Path:
    """``data`` as JSON at ``path`` (gzipped when ``gz``)."""
    raw = json.dumps(data).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw, mtime=0) if gz else raw)
    return path


def job(folder: Path, computes_us: Sequence[Sequence[float]], batches: Sequence[int],
        shifts_us: Sequence[float] | None = None, gz: bool = True) -> list[Path]:  # fmt: skip
    """One trace per rank in ``folder`` (``equal-rank<R>.json.gz``)."""
    world = len(batches)
    shifts = shifts_us or [0.0] * world
    suffix = ".json.gz" if gz else ".json"
    hosts = [f"node{r}" if any(shifts) else "testhost" for r in range(world)]  # clocks apart: apart machines
    return [write(folder / f"equal-rank{r}{suffix}", trace(r, world, rank_events(r, computes_us, batches, shifts[r]),
                                                            host_name=hosts[r]), gz) for r in range(world)]  # fmt: skip
