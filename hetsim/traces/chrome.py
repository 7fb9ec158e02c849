"""Chrome trace-event JSON (the "Trace Event Format" that Perfetto and chrome://tracing open) of
hetsim runs.

One process per policy (``pid`` 1, 2, ... in the order given), one thread per worker, named as
the scenario names it (``v100#0``). On a worker's track each step is a complete event (``ph``
``X``) ``step N`` (an update without a barrier: ``update N``) whose ``args`` give step, epoch,
local batch and whether its gradient was kept; inside it, ``compute``, ``wait`` and the
exposed ``all-reduce`` (``exchange`` for an update), with categories ``compute``, ``wait`` and
``comm``: summed per step they give back the trace's ``compute_s``, ``wait_s`` and ``comm_s``
(laid out by :mod:`hetsim.traces.timeline`). With DDP-style buckets, a track ``all-reduce
buckets`` per policy holds each bucket's all-reduce, overlapping the backward pass. Slowdown
episodes and failures are spans on tracks of their own per worker (``v100#0 slowdown``,
``v100#0 down``). A counter ``batch share`` per policy holds each worker's share of the global
batch, one event where the split changes. Times are microseconds (``ts``, ``dur``, fractions to
the nanosecond); metadata events (``M``) name and order every process and thread.

:data:`MAX_EVENTS` bounds a file: chrome://tracing loads about a million events (its JSON is
one JavaScript string, at most 256-512 MB), and Perfetto's in-browser trace processor has about
2 GB, which a JSON trace inflates into several times its size. At about 130 bytes an event, a
million events is a file of ~130 MB, which both open.
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.files import atomic_write
from hetsim.model.network import Buckets
from hetsim.model.trace import Trace
from hetsim.traces.timeline import (
    BucketLayout,
    Spans,
    WorkerLayout,
    failure_spans,
    layout_buckets,
    layout_workers,
    slowdown_spans,
)

MAX_EVENTS = 1_000_000
DUMP_CHUNK = 10_000  # events encoded at once
Event = dict[str, Any]


@dataclass(frozen=True)
class ExportRun:
    """One policy's trace to export: the worker names (by worker index), the overlap plan its
    scenario had (None: the all-reduce after the barrier, or unknown) and a label saying where
    it came from."""

    trace: Trace
    worker_names: tuple[str, ...] = ()
    buckets: Buckets | None = None
    label: str = ""

    def name(self, worker: int) -> str:
        return self.worker_names[worker] if 0 <= worker < len(self.worker_names) else f"worker {worker}"


@dataclass(frozen=True)
class Laid:
    """One run laid out: its rows' slices, bucket slices and episode spans."""

    run: ExportRun
    workers: WorkerLayout
    buckets: BucketLayout | None
    slowdowns: Spans
    failures: Spans

    def count(self) -> int:
        """The events :func:`run_events` makes of it (metadata included)."""
        w = self.workers
        slices = len(w.rows) + sum(int(np.count_nonzero(d)) for d in (w.compute_dur_ns, w.wait_dur_ns, w.comm_dur_ns))
        tracks = len(np.unique(self.run.trace.worker[w.rows])) + len(np.unique(self.slowdowns.worker))
        tracks += len(np.unique(self.failures.worker)) + (self.buckets is not None)
        counters = len(_share_changes(self.run.trace, w.rows)) if self.run.trace.synchronous else 0
        bucket_slices = 0 if self.buckets is None else len(self.buckets.start_ns)
        spans = len(self.slowdowns.start_ns) + len(self.failures.start_ns)
        return slices + bucket_slices + spans + counters + 2 * tracks + 3


def lay_out(run: ExportRun, rows: np.ndarray) -> Laid:
    """``run``'s rows ``rows`` (whole steps) laid out on the time axis."""
    workers = layout_workers(run.trace, rows)
    buckets = None
    if run.buckets is not None and run.trace.synchronous:
        buckets = layout_buckets(run.trace, rows, run.buckets, workers)
    return Laid(run, workers, buckets, slowdown_spans(run.trace, workers), failure_spans(run.trace, workers))


def _lanes(trace: Trace) -> int:
    """The workers' count, for the buckets' track after every worker's three (a worker index, not
    the number of workers seen: an async trace may lack a worker's rows)."""
    return int(trace.worker.max()) + 1


WORKER, SLOWDOWN, DOWN = 1, 2, 3  # a worker's three tracks: ``_tid(w, kind) = kind + 3 w``, in their sort order


def _tid(worker: Any, kind: int) -> Any:
    """The track of worker(s) ``worker`` for ``kind`` (:data:`WORKER`, :data:`SLOWDOWN`, :data:`DOWN`)."""
    return kind + 3 * worker


def _us(ns: int | np.integer) -> float:
    """Nanoseconds as the format's microseconds (a float: exact to the nanosecond below 2^53 ns)."""
    return int(ns) / 1000


def _meta(kind: str, pid: int, tid: int, **args: Any) -> Event:
    return {"name": kind, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _slice(name: str, cat: str, pid: int, tid: int, start_ns: int, dur_ns: int, args: dict[str, Any]) -> Event:
    return {"name": name, "cat": cat, "ph": "X", "ts": _us(start_ns), "dur": _us(dur_ns), "pid": pid, "tid": tid,
            "args": args}  # fmt: skip


def worker_events(laid: Laid, pid: int) -> Iterator[Event]:
    """Every step slice and its parts, on the tracks ``1 + 3 worker`` (:func:`metadata_events`)."""
    trace, w = laid.run.trace, laid.workers
    sync = trace.synchronous
    step_word, comm_word = ("step", "all-reduce") if sync else ("update", "exchange")
    exposed = {"exposed": True} if laid.buckets is not None else {}
    rows = w.rows
    arrays = (_tid(trace.worker[rows], WORKER), trace.step[rows], trace.epoch[rows], trace.local_batch[rows],
              trace.included[rows], w.start_ns, w.step_dur_ns, w.compute_ns, w.compute_dur_ns, w.wait_ns, w.wait_dur_ns,
              w.comm_ns, w.comm_dur_ns)  # fmt: skip
    columns = zip(*(a.tolist() for a in arrays))  # plain Python numbers: no NumPy scalar per event
    for tid, step, epoch, batch, kept, start, dur, c_at, c_dur, w_at, w_dur, m_at, m_dur in columns:
        args: dict[str, Any] = {"step": step, "epoch": epoch, "local_batch": batch}
        if sync:
            args["included"] = kept
        yield _slice(f"{step_word} {step}", "step", pid, tid, start, dur, args)
        if c_dur > 0:
            yield _slice("compute", "compute", pid, tid, c_at, c_dur, {"step": step})
        if w_dur > 0:
            yield _slice("wait", "wait", pid, tid, w_at, w_dur, {"step": step})
        if m_dur > 0:
            yield _slice(comm_word, "comm", pid, tid, m_at, m_dur, {"step": step, **exposed})


def episode_events(laid: Laid, pid: int) -> Iterator[Event]:
    """Slowdown spans on the tracks ``2 + 3 worker``, failures on ``3 + 3 worker``."""
    for s in range(len(laid.slowdowns.start_ns)):
        worker, factor = int(laid.slowdowns.worker[s]), float(laid.slowdowns.value[s])
        yield _slice(f"slowdown x{factor:g}", "slowdown", pid, _tid(worker, SLOWDOWN), laid.slowdowns.start_ns[s],
                     int(laid.slowdowns.dur_ns[s]), {"factor": factor})  # fmt: skip
    for s in range(len(laid.failures.start_ns)):
        worker = int(laid.failures.worker[s])
        yield _slice("down", "failure", pid, _tid(worker, DOWN), laid.failures.start_ns[s],
                     int(laid.failures.dur_ns[s]), {})  # fmt: skip


def bucket_events(laid: Laid, pid: int) -> Iterator[Event]:
    """Each bucket's all-reduce on the track ``1 + 3n``."""
    b, plan = laid.buckets, laid.run.buckets
    if b is None or plan is None:
        return
    tid = _tid(_lanes(laid.run.trace), WORKER)  # after every worker's tracks
    for s in range(len(b.start_ns)):
        k = int(b.bucket[s])
        yield _slice(f"bucket {k}", "bucket", pid, tid, b.start_ns[s], int(b.dur_ns[s]),
                     {"step": int(b.step[s]), "bucket": k, "size_mb": plan.sizes_mb[k]})  # fmt: skip


def _share_changes(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The positions (in whole steps of ``rows``, sorted) where the split differs from the step before."""
    batch = trace.local_batch[np.sort(rows)].reshape(-1, trace.n_workers)
    return np.flatnonzero(np.concatenate([[True], (batch[1:] != batch[:-1]).any(axis=1)]))


def counter_events(laid: Laid, pid: int) -> Iterator[Event]:
    """The ``batch share`` counter: each worker's share of the global batch, where it changes."""
    trace, run = laid.run.trace, laid.run
    if not trace.synchronous:
        return
    grid = np.sort(laid.workers.rows).reshape(-1, trace.n_workers)
    starts = laid.workers.starts_by_row(len(trace.step))
    names = [run.name(int(i)) for i in trace.worker[grid[0]]]
    for j in _share_changes(trace, laid.workers.rows).tolist():
        batch = trace.local_batch[grid[j]]
        total = int(batch.sum()) or 1
        args = {name: int(b) / total for name, b in zip(names, batch.tolist())}
        yield {"name": "batch share", "ph": "C", "ts": _us(starts[grid[j]].min()), "pid": pid, "tid": 0, "args": args}


def metadata_events(laid: Laid, pid: int) -> Iterator[Event]:
    """Names and order of the process and of every track it uses: a worker's track, then its
    slowdowns' and its failures', then the buckets'. The track ids follow that order too, for a
    viewer that reads no sort index (Perfetto's JSON import names tracks, and orders them by id)."""
    run, n = laid.run, _lanes(laid.run.trace)
    yield _meta("process_name", pid, 0, name=run.trace.policy)
    yield _meta("process_sort_index", pid, 0, sort_index=pid)
    yield _meta("process_labels", pid, 0, labels=run.label or "hetsim trace")
    tracks = {_tid(w, WORKER): run.name(w) for w in np.unique(run.trace.worker[laid.workers.rows]).tolist()}
    tracks.update({_tid(w, SLOWDOWN): f"{run.name(w)} slowdown" for w in laid.slowdowns.worker.tolist()})
    tracks.update({_tid(w, DOWN): f"{run.name(w)} down" for w in laid.failures.worker.tolist()})
    if laid.buckets is not None:
        tracks[_tid(n, WORKER)] = "all-reduce buckets"
    for tid, name in sorted(tracks.items()):
        yield _meta("thread_name", pid, tid, name=name)
        yield _meta("thread_sort_index", pid, tid, sort_index=tid - 1)  # the ids are in the sort order


def all_events(laid_runs: Sequence[Laid]) -> Iterator[Event]:
    """Every event of every run; run k is process ``k + 1``."""
    for pid, laid in enumerate(laid_runs, start=1):
        yield from metadata_events(laid, pid)
        yield from counter_events(laid, pid)
        yield from worker_events(laid, pid)
        yield from bucket_events(laid, pid)
        yield from episode_events(laid, pid)


def write_chrome(target: Path, laid_runs: Sequence[Laid], other: dict[str, Any]) -> None:
    """The JSON document to ``target`` (gzipped when it ends in ``.gz``; Perfetto opens both),
    atomically, events streamed a line each. ``other`` goes to ``otherData`` (what made it)."""

    def write(tmp: str) -> None:
        opener: Any = gzip.open if str(target).endswith(".gz") else open
        with opener(tmp, "wt", encoding="utf-8") as f:
            _dump(f, laid_runs, other)

    atomic_write(Path(target), write)


def _dump(f: IO[str], laid_runs: Sequence[Laid], other: dict[str, Any]) -> None:
    f.write('{"displayTimeUnit": "ms", "otherData": ' + json.dumps(other, default=str) + ',\n"traceEvents": [\n')
    events = all_events(laid_runs)
    first = True
    while chunk := list(itertools.islice(events, DUMP_CHUNK)):  # one encoder call a chunk, not an event
        f.write(("" if first else ",\n") + json.dumps(chunk, separators=(",", ":"))[1:-1].replace("},{", "},\n{"))
        first = False
    f.write("\n]}\n")


def check_size(laid_runs: Sequence[Laid], steps_text: str) -> int:
    """The number of events; more than :data:`MAX_EVENTS` is a ConfigError on ``--steps`` that
    says how many steps fit (``steps_text`` describes the steps chosen)."""
    counts = [laid.count() for laid in laid_runs]
    total = sum(counts)
    if total <= MAX_EVENTS:
        return total
    # each run's events spread evenly over its own steps (an async run numbers its updates, many more than a
    # barrier run's steps): the longest range from the first step whose events fit, with 5% to spare for
    # the events that do not grow with the steps and for steps that hold more than their share
    runs = [(np.unique(laid.run.trace.step[laid.workers.rows]), n) for laid, n in zip(laid_runs, counts)]
    first = min(int(steps[0]) for steps, _ in runs)

    def events_before(stop: int) -> float:
        return sum(count / len(steps) * int(np.searchsorted(steps, stop)) for steps, count in runs)

    lo, hi = first + 1, max(int(steps[-1]) for steps, _ in runs) + 1  # events_before(hi) = total > MAX_EVENTS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if events_before(mid) <= 0.95 * MAX_EVENTS else (lo, mid)
    fit = lo - first
    raise ConfigError(
        "--steps",
        f"{steps_text} make {total} trace events, more than the {MAX_EVENTS} a viewer opens; pick fewer steps with "
        f"--steps A:B (about {fit} fit, e.g. --steps {first}:{first + fit}) or one policy with --policy",
    )


def select_steps(trace: Trace, first: int | None, stop: int | None) -> np.ndarray:
    """The rows whose step is in ``[first, stop)`` (None: unbounded), in the trace's order."""
    keep = np.ones(len(trace.step), dtype=np.bool_)
    if first is not None:
        keep &= trace.step >= first
    if stop is not None:
        keep &= trace.step < stop
    return np.flatnonzero(keep)
