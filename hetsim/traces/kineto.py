"""One rank's ``torch.profiler`` trace (Kineto's JSON, plain or gzipped) as the few things the
importer needs: :func:`read_rank`.

A Kineto trace is a JSON object with ``traceEvents`` (Chrome trace events, ``ts`` and ``dur`` in
microseconds) and, for a distributed job, ``distributedInfo`` (``rank``, ``world_size``,
``backend``). Of its events the importer reads:

* the steps: ``ProfilerStep#N`` slices (``user_annotation``), which ``profiler.step()`` opens and
  closes on the training loop's thread (the *main* thread here);
* the collectives as the rank issues them: ``c10d::allreduce_``, ``c10d::broadcast_``, ...
  (``cpu_op``; ``record_param_comms`` in traces that have it), on any of its threads. A
  synchronous call blocks the main thread after the issue until the collective ends (no event
  marks that wait: it is the gap after the issue op); DDP issues its buckets' all-reduces from
  inside the backward (its comm hook runs where the autograd engine runs the node: the main
  thread on CPU, the engine's thread for the device on CUDA) and waits at its end;
* where each collective really ran: on gloo, ``gloo:all_reduce``, ``gloo:broadcast``, ... slices
  on gloo's worker threads; on NCCL, the ``nccl...`` kernels on the device's streams. The k-th
  issue and the k-th of these (by start) are one collective: a process group runs its
  collectives in the order they were issued. A job of one rank runs none (NCCL launches no
  kernel for a one-rank communicator): each collective ran in no time, where its issue ended;
* the main thread's leaf operators (no operator nested inside them on that thread): the rank
  is busy while one runs, so a collective that ends while the main thread is inside another
  operator did not block it;
* the local batch: the first input's first dimension of the step's first forward operator
  (``aten::conv2d``, ``aten::linear``, ...), recorded with ``record_shapes=True``; that
  operator's start, the end of the ``optimizer.zero_grad()`` before it (``Optimizer.zero_grad#``)
  and the start of the backward's last node (``autograd::engine::evaluate_function: ...``, on
  whichever thread the engine ran it) bound the step's compute;
* on CUDA, the device's other kernels: the rank's compute on the GPU.

Times here are in seconds on the rank's own clock (:mod:`hetsim.traces.torch_profiler` aligns
the ranks). Every problem is one :class:`~hetsim.core.errors.ConfigError` naming the file.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsim.core.errors import ConfigError

STEP = re.compile(r"ProfilerStep#(\d+)$")
ISSUE_OPS = ("c10d::", "record_param_comms")  # the rank's collective calls
RUN_PREFIXES = ("gloo:", "nccl")  # where a collective ran: gloo's worker threads, NCCL's kernels
FORWARD_OPS = ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::linear", "aten::embedding",
               "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::matmul", "aten::addmm")  # fmt: skip
ZERO_GRAD_PREFIX = "Optimizer.zero_grad"  # torch.optim's annotation of optimizer.zero_grad()
BACKWARD_PREFIX = "autograd::engine::evaluate_function"  # each backward node, as the autograd engine runs it
UNTIMED = "hetsim.untimed"  # a range (torch.profiler.record_function) of work a loop keeps out of its steps' time
US = 1e-6  # Kineto's microseconds, in seconds


@dataclass(frozen=True)
class Span:
    """A slice: start and end in seconds on the rank's clock."""

    start_s: float
    end_s: float


@dataclass(frozen=True)
class Collective:
    """One collective on one rank: what it was (name and payload shape, to match it across
    ranks), when the main thread issued it and when it ran (gloo's slice or NCCL's kernel)."""

    name: str
    shape: str
    issue: Span
    ran: Span


@dataclass(frozen=True)
class RankTrace:
    """What the importer reads of one rank's trace (see the module's docstring)."""

    path: Path
    rank: int
    world_size: int
    backend: str
    host: str
    segment: str | None  # hetsim_segment, where validation's profiler wrote it
    steps: dict[int, Span]  # ProfilerStep number -> its span
    busy: list[Span]  # the main thread's leaf operators, by start
    collectives: list[Collective]  # in issue order
    batch: dict[int, int]  # step -> local batch from the recorded input shapes (steps that have one)
    forward_s: dict[int, float]  # step -> when its first forward operator started (steps that have one)
    backward_s: dict[int, float]  # step -> when its backward's last operator started (steps that have one)
    zeroed_s: dict[int, float]  # step -> when the last zero_grad before its forward ended (steps that have one)
    device_busy: list[Span]  # CUDA: the non-collective kernels (empty on CPU)
    base_ns: int | None = None  # baseTimeNanoseconds: ranks on one host with the same base share one clock
    untimed: frozenset[int] = frozenset()  # steps holding an UNTIMED range (validation's warm-up of a new size)


def load_json(path: Path) -> Any:
    """The file's JSON (gunzipped when it starts with gzip's magic bytes)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), f"cannot be read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ConfigError(str(path), f"a truncated or damaged gzip file ({exc})") from None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(str(path), f"not a Kineto trace: not JSON ({exc})") from None


def read_rank(path: Path) -> RankTrace:
    """One rank's trace, checked to be a Kineto trace of one rank of a distributed job."""
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ConfigError(str(path), "not a Kineto trace (no traceEvents list)")
    info = data.get("distributedInfo")
    if (
        not isinstance(info, dict)
        or not isinstance(info.get("rank"), int)
        or not isinstance(info.get("world_size"), int)
    ):
        raise ConfigError(str(path), "has no distributedInfo with rank and world_size (not a distributed job's trace)")
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and _timed(e)]
    negative = next((e for e in events if e["dur"] < 0), None)
    if negative is not None:
        raise ConfigError(str(path), f"event {str(negative.get('name'))!r} has a negative duration ({negative['dur']} "
                                     "us): not a trace torch.profiler wrote")  # fmt: skip
    if not 0 <= info["rank"] < info["world_size"]:
        raise ConfigError(str(path), f"rank {info['rank']} is not one of the job's {info['world_size']} ranks "
                                     "(its distributedInfo)")  # fmt: skip
    steps, main = _steps(events, path)
    every_op = [e for e in events if e.get("cat") == "cpu_op"]  # every thread's: the backward's may be the engine's
    ops = [e for e in every_op if e.get("tid") == main]
    segment = data.get("hetsim_segment")
    batch, forward = _forward(ops, steps)
    return RankTrace(
        path=path, rank=info["rank"], world_size=info["world_size"], backend=str(info.get("backend", "")),
        host=str(data.get("host_name", "")), segment=segment if isinstance(segment, str) else None,
        steps=steps, busy=_leaves(ops, main), collectives=_collectives(events, every_op, info["world_size"], path),
        batch=batch, forward_s=forward, backward_s=_backward(every_op, steps),
        zeroed_s=_zeroed(events, main, forward), device_busy=_device_busy(events),
        base_ns=data["baseTimeNanoseconds"] if isinstance(data.get("baseTimeNanoseconds"), int) else None,
        untimed=_untimed(events, steps),
    )  # fmt: skip


def _timed(event: dict[str, Any]) -> bool:
    return isinstance(event.get("ts"), (int, float)) and isinstance(event.get("dur"), (int, float))


def _span(event: dict[str, Any]) -> Span:
    return Span(event["ts"] * US, (event["ts"] + event["dur"]) * US)


def _steps(events: list[dict[str, Any]], path: Path) -> tuple[dict[int, Span], Any]:
    """ProfilerStep#N -> span, and the thread that ran them (the training loop's)."""
    marks = [(int(m.group(1)), e) for e in events if (m := STEP.match(str(e.get("name", ""))))]
    if not marks:
        raise ConfigError(str(path), "has no ProfilerStep#N slices (record with a schedule and call profiler.step())")
    threads = {e.get("tid") for _, e in marks}
    if len(threads) > 1:
        raise ConfigError(str(path), "its ProfilerStep slices are on several threads")
    steps: dict[int, Span] = {}
    for number, event in marks:
        if number in steps:
            raise ConfigError(str(path), f"ProfilerStep#{number} appears twice")
        steps[number] = _span(event)
    return dict(sorted(steps.items())), threads.pop()


def _untimed(events: list[dict[str, Any]], steps: dict[int, Span]) -> frozenset[int]:
    """The steps that hold an :data:`UNTIMED` range."""
    ranges = [_span(e) for e in events if e.get("name") == UNTIMED]
    return frozenset(n for n, s in steps.items() if any(s.start_s <= r.start_s < s.end_s for r in ranges))


def _leaves(ops: list[dict[str, Any]], main: Any) -> list[Span]:
    """The main thread's operators with no operator nested inside them, by start."""
    spans = sorted((_span(e) for e in ops), key=lambda s: (s.start_s, -s.end_s))
    leaves: list[Span] = []
    for k, span in enumerate(spans):
        nxt = spans[k + 1] if k + 1 < len(spans) else None
        if nxt is None or nxt.start_s >= span.end_s:
            leaves.append(span)
    return leaves


def _collectives(events: list[dict[str, Any]], ops: list[dict[str, Any]], world_size: int,
                 path: Path) -> list[Collective]:  # fmt: skip
    """The issues (of any thread's ``ops``) paired, in order, with where the collectives ran; in a
    job of one rank, where none ran, each with no time at its issue's end."""
    issues = sorted((e for e in ops if str(e.get("name", "")).startswith(ISSUE_OPS)), key=lambda e: e["ts"])
    issues = [e for e in issues if not _nested_issue(e, issues)]
    ran = sorted((e for e in events if _ran_event(e)), key=lambda e: e["ts"])
    if world_size == 1 and not ran:
        return [Collective(str(i["name"]), _shape(i), _span(i), Span(_span(i).end_s, _span(i).end_s)) for i in issues]
    if ran and issues:  # the window may open while a collective issued before it still runs
        ran = [e for e in ran if e["ts"] + e["dur"] >= issues[0]["ts"]]
    if len(ran) != len(issues):
        raise ConfigError(str(path), f"{len(issues)} collectives issued but {len(ran)} ran in the trace: they do "
                                     "not pair (a collective cut off at the window's edge?)")  # fmt: skip
    return [Collective(str(r["name"]), _shape(i), _span(i), _span(r)) for i, r in zip(issues, ran)]


def _nested_issue(event: dict[str, Any], issues: list[dict[str, Any]]) -> bool:
    """``record_param_comms`` inside ``c10d::...`` (or the reverse) is one collective, not two."""
    return any(o is not event and o["ts"] <= event["ts"] and event["ts"] + event["dur"] <= o["ts"] + o["dur"]
               and (o["ts"], -o["dur"]) < (event["ts"], -event["dur"]) for o in issues)  # fmt: skip


def _ran_event(event: dict[str, Any]) -> bool:
    name = str(event.get("name", ""))
    if event.get("cat") == "kernel":
        return name.lower().startswith("nccl")
    return name.startswith("gloo:")


def _shape(event: dict[str, Any]) -> str:
    dims = event.get("args", {}).get("Input Dims")
    return json.dumps(dims[0]) if isinstance(dims, list) and dims else ""


def _forward(ops: list[dict[str, Any]], steps: dict[int, Span]) -> tuple[dict[int, int], dict[int, float]]:
    """Per step, the local batch (the first input's first dimension of its first forward operator,
    where shapes were recorded) and when that operator started."""
    forward = sorted((e for e in ops if e.get("name") in FORWARD_OPS), key=lambda e: e["ts"])
    starts = [e["ts"] * US for e in forward]
    batch: dict[int, int] = {}
    first: dict[int, float] = {}
    for number, span in steps.items():
        k = bisect.bisect_left(starts, span.start_s)
        if k == len(forward) or starts[k] > span.end_s:
            continue
        first[number] = starts[k]
        dims = forward[k].get("args", {}).get("Input Dims")
        if isinstance(dims, list) and dims and isinstance(dims[0], list) and len(dims[0]) >= 2:
            batch[number] = int(dims[0][0])
    return batch, first


def _zeroed(events: list[dict[str, Any]], main: Any, forward: dict[int, float]) -> dict[int, float]:
    """Per step with a forward, when the last ``optimizer.zero_grad()`` before it ended."""
    ends = sorted((e["ts"] + e["dur"]) * US for e in events
                  if e.get("tid") == main and str(e.get("name", "")).startswith(ZERO_GRAD_PREFIX))  # fmt: skip
    out: dict[int, float] = {}
    for number, first in forward.items():
        k = bisect.bisect_right(ends, first)
        if k:
            out[number] = ends[k - 1]
    return out


def _backward(ops: list[dict[str, Any]], steps: dict[int, Span]) -> dict[int, float]:
    """Per step, when the last operator of its backward (the autograd engine's) started."""
    starts = sorted(e["ts"] * US for e in ops if str(e.get("name", "")).startswith(BACKWARD_PREFIX))
    last: dict[int, float] = {}
    for number, span in steps.items():
        k = bisect.bisect_right(starts, span.end_s)
        if k and starts[k - 1] >= span.start_s:
            last[number] = starts[k - 1]
    return last


def _device_busy(events: list[dict[str, Any]]) -> list[Span]:
    """CUDA: the kernels that are not collectives, by start (empty for a CPU trace)."""
    kernels = [e for e in events if e.get("cat") == "kernel" and not _ran_event(e)]
    return sorted((_span(e) for e in kernels), key=lambda s: s.start_s)
