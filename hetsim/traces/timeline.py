"""Where every slice of a trace lies on a viewer's time axis, in integer nanoseconds.

A trace row says how long a worker computed, waited and exchanged in a step, and when the step
began; it does not say in which order. The layout draws each row as one step slice holding its
parts, end to end:

* a barrier step, worker up at the step's start: compute from the step's start, then its wait
  (idle at the barrier), then the all-reduce left after the barrier (``comm_s``);
* a worker down at the step's start (``up`` false): its wait first, then compute, then the
  all-reduce. The trace adds the repair and any idle time after computing into one ``wait_s``;
  drawing it first is exact when the worker was the last to finish (the barrier waited for it)
  or was cut at the barrier, the usual cases;
* an update without a barrier (``async``): its down time (``wait_s``), compute, then its exchange.

Each boundary is rounded to the nanosecond, so a slice lasts what the trace says to a
nanosecond, a part of zero length has none, and a step's parts tile it exactly. A
worker's steps follow each other on its track: one that would begin before the previous one
ended (rounding, or a real run whose rows rank 0 timed) is moved later by the overlap, never
shortened (:func:`no_overlap`).

With DDP-style buckets (:class:`hetsim.model.network.Buckets`) each bucket's all-reduce is laid out as
the engines compute it (see :mod:`hetsim.model.network`): bucket k of the waited-for workers is ready
at ``finish_i - compute_i * backlog_k``, starts when it is ready and bucket k-1 is done. A step
whose buckets do not end where the trace's ``comm_s`` says (a trace of another scenario, or a
worker down at the step's start that finished early) gets no bucket slices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsim.model.network import Buckets
from hetsim.model.trace import Trace

NS_PER_S = 1_000_000_000
BUCKET_TOLERANCE_S = 1e-7  # buckets drawn only where their end is the trace's to 0.1 us
ADJACENT_NS = 1_000  # two steps 1 us apart or less are one stretch of an episode


def to_ns(seconds: np.ndarray | float | tuple[float, ...]) -> np.ndarray:
    """Seconds to integer nanoseconds, rounded to nearest."""
    return np.rint(np.asarray(seconds, dtype=float) * NS_PER_S).astype(np.int64)


def no_overlap(start_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """How much later each slice of one track must begin so that none begins before the previous
    one ended (slices in order). The shift follows Lindley's recursion ``d_j = max(0, d_{j-1} +
    end_{j-1} - start_j)``, whose solution is the running sum of the overlaps less its running
    minimum."""
    overlap = np.zeros(len(start_ns), dtype=np.int64)
    overlap[1:] = start_ns[:-1] + dur_ns[:-1] - start_ns[1:]
    total = np.cumsum(overlap)
    return total - np.minimum.accumulate(np.minimum(total, 0))


def _up(trace: Trace) -> np.ndarray:
    assert trace.up is not None  # Trace fills it in
    return trace.up


@dataclass(frozen=True)
class WorkerLayout:
    """The slices of the rows ``rows`` (indices into the trace, ordered by worker, then by step):
    where each step slice and each of its parts begins, and how long each part lasts."""

    rows: np.ndarray
    start_ns: np.ndarray
    compute_ns: np.ndarray
    wait_ns: np.ndarray
    comm_ns: np.ndarray
    compute_dur_ns: np.ndarray
    wait_dur_ns: np.ndarray
    comm_dur_ns: np.ndarray

    @property
    def step_dur_ns(self) -> np.ndarray:
        return self.compute_dur_ns + self.wait_dur_ns + self.comm_dur_ns

    def starts_by_row(self, n_rows: int) -> np.ndarray:
        """Each step slice's start at its row's index in the trace (0 for rows not laid out)."""
        out = np.zeros(n_rows, dtype=np.int64)
        out[self.rows] = self.start_ns
        return out


def layout_workers(trace: Trace, rows: np.ndarray) -> WorkerLayout:
    """The step slices of ``rows`` of ``trace`` and their parts (the module docstring's rules)."""
    rows = rows[np.argsort(trace.worker[rows], kind="stable")]
    start_s, compute_s, wait_s, comm_s = (getattr(trace, c)[rows] for c in ("start_s", "compute_s", "wait_s", "comm_s"))
    wait_first = ~_up(trace)[rows] if trace.synchronous else np.ones(len(rows), dtype=np.bool_)
    # The boundaries, each rounded: a part of zero length stays zero, and a step that ends where
    # the next begins (the engines' clock) ends at the same nanosecond.
    start = to_ns(start_s)
    middle = to_ns(start_s + np.where(wait_first, wait_s, compute_s))
    barrier = to_ns(start_s + compute_s + wait_s)
    end = to_ns(start_s + compute_s + wait_s + comm_s)
    worker = trace.worker[rows]
    edges = [0, *(np.flatnonzero(np.diff(worker)) + 1), len(rows)]
    shift = np.zeros(len(rows), dtype=np.int64)
    for lo, hi in zip(edges, edges[1:]):  # one track per worker
        shift[lo:hi] = no_overlap(start[lo:hi], end[lo:hi] - start[lo:hi])
    first, second = middle - start, barrier - middle
    return WorkerLayout(
        rows=rows,
        start_ns=start + shift,
        compute_ns=start + shift + np.where(wait_first, first, 0),
        wait_ns=start + shift + np.where(wait_first, 0, first),
        comm_ns=barrier + shift,
        compute_dur_ns=np.where(wait_first, second, first),
        wait_dur_ns=np.where(wait_first, first, second),
        comm_dur_ns=end - barrier,
    )


@dataclass(frozen=True)
class BucketLayout:
    """Bucket all-reduce slices, in order of time: the trace's step, the bucket's index, start
    and duration; ``steps_drawn`` of ``steps`` steps had buckets that agree with the trace."""

    step: np.ndarray
    bucket: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    steps_drawn: int
    steps: int


def layout_buckets(trace: Trace, rows: np.ndarray, buckets: Buckets, layout: WorkerLayout) -> BucketLayout:
    """Each bucket's all-reduce in the steps of ``rows`` (whole steps of a barrier trace, in the
    trace's order), from the step's start as ``layout`` draws it."""
    grid = np.sort(rows).reshape(-1, trace.n_workers)  # (steps, workers)
    compute, wait = trace.compute_s[grid], trace.wait_s[grid]
    waited = trace.included[grid]
    waited = np.where(waited.any(axis=1, keepdims=True), waited, True)  # none kept: the step waits for all
    finish = np.where(_up(trace)[grid], compute, wait + compute)  # since the step's start, as drawn
    barrier = np.where(waited, finish, -np.inf).max(axis=1)
    end = np.full(len(grid), -np.inf)
    starts = []
    for time_s, backlog in zip(buckets.times_s, buckets.backlog):
        ready = np.where(waited, finish - compute * backlog, -np.inf).max(axis=1)
        starts.append(np.maximum(ready, end))
        end = starts[-1] + time_s
    agree = np.abs(end - barrier - trace.comm_s[grid[:, 0]]) <= BUCKET_TOLERANCE_S
    origin = layout.starts_by_row(len(trace.step))[grid[agree, 0]]
    start = (origin[:, None] + to_ns(np.array(starts).T[agree])).ravel()
    n_buckets = len(buckets.times_s)
    dur = np.tile(to_ns(buckets.times_s), int(agree.sum()))
    return BucketLayout(
        step=np.repeat(trace.step[grid[agree, 0]], n_buckets),
        bucket=np.tile(np.arange(n_buckets), int(agree.sum())),
        start_ns=start + no_overlap(start, dur),
        dur_ns=dur,
        steps_drawn=int(agree.sum()),
        steps=len(grid),
    )


@dataclass(frozen=True)
class Spans:
    """Episodes on a worker's own track: the worker, start, duration and a value (the slowdown
    factor; 0 for a failure)."""

    worker: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    value: np.ndarray


def slowdown_spans(trace: Trace, layout: WorkerLayout) -> Spans:
    """One span per stretch of a worker's adjacent steps computed under the same slowdown
    factor (not 1), from the first one's start to the last one's end."""
    assert trace.slowdown is not None  # Trace fills it in
    factor, worker = trace.slowdown[layout.rows], trace.worker[layout.rows]
    end = layout.start_ns + layout.step_dur_ns
    active = factor != 1.0
    joins = active[:-1] & active[1:] & (factor[1:] == factor[:-1]) & (worker[1:] == worker[:-1])
    joins &= layout.start_ns[1:] - end[:-1] <= ADJACENT_NS
    first = active & ~np.concatenate([[False], joins])
    last = active & ~np.concatenate([joins, [False]])
    start = layout.start_ns[first]
    return Spans(worker[first], start, end[last] - start, factor[first])


def failure_spans(trace: Trace, layout: WorkerLayout) -> Spans:
    """A worker's time down: a barrier step it was down at the start of (its wait, drawn first),
    an update it waited for a repair before computing."""
    rows = layout.rows
    down = ~_up(trace)[rows] if trace.synchronous else np.ones(len(rows), dtype=np.bool_)
    down &= layout.wait_dur_ns > 0
    return Spans(trace.worker[rows][down], layout.start_ns[down], layout.wait_dur_ns[down], np.zeros(int(down.sum())))
