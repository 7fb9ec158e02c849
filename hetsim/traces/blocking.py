"""When a rank was blocked in its collectives, and what of a step is its compute: the rules of
:mod:`hetsim.traces.torch_profiler` (its docstring, 3. and 4.), on one rank's
:class:`~hetsim.traces.kineto.RankTrace`.

**Blocked.** While a collective runs (gloo's slice, or NCCL's kernel), the rank's main thread
either works (the collective overlaps its compute: DDP's earlier buckets during the backward)
or waits for it. The wait is a gap in the main thread's operators: of the gaps after the rank
issued the collective, the one that overlaps the collective's run the most is where it waited,
and the wait ends when the thread runs its next operator. (Not when gloo's slice ends: a worker
thread records its end after it has woken the waiting thread, so on a busy machine the main
thread may resume before the recorded end; a thread woken late was still in the call.) A
synchronous call's wait starts with the call itself: its first gap runs from the call's start,
so a thread stuck inside the call while the collective ran was blocked, not working. On CUDA
the same rule runs on the device: the gaps between compute kernels, from the NCCL kernel's
start. Two collectives that end in one gap (DDP's last buckets) share it: each wait
starts where the one before ended, so no time is counted twice.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from hetsim.traces.kineto import Collective, RankTrace, Span


def blocked_spans(rank: RankTrace) -> list[Span | None]:
    """Per collective (in order), the span the rank was blocked on it; None where it was not."""
    out: list[Span | None] = []
    last_end = float("-inf")
    for c in rank.collectives:
        span = _blocked(rank, c)
        if span is not None and span.start_s < last_end:  # a gap another collective's wait has taken
            span = Span(last_end, span.end_s) if span.end_s > last_end else None
        if span is not None:
            last_end = span.end_s
        out.append(span)
    return out


def _blocked(rank: RankTrace, c: Collective) -> Span | None:
    cuda = bool(rank.device_busy)
    busy = rank.device_busy if cuda else rank.busy
    own = c.ran if cuda else c.issue  # the collective's own slice on the timeline that is searched
    gap_start = own.start_s  # the call itself is part of its first gap (a thread stuck in it was not working)
    best, best_overlap = None, 0.0
    for b in busy[bisect.bisect_left(busy, own.start_s, key=lambda s: s.start_s) :]:
        if not cuda and own.start_s <= b.start_s and b.end_s <= own.end_s:
            continue  # the issue's own operators
        if b.start_s > gap_start:
            overlap = min(b.start_s, c.ran.end_s) - max(gap_start, c.ran.start_s)
            if overlap > best_overlap:
                best, best_overlap = Span(gap_start, b.start_s), overlap
        if b.start_s > c.ran.end_s:
            break
        gap_start = max(gap_start, b.end_s)
    else:  # the trace ends inside the wait
        overlap = c.ran.end_s - max(gap_start, c.ran.start_s)
        if overlap > best_overlap:
            best = Span(gap_start, c.ran.end_s)
    return best


def compute_time(
    step: Span, forward_s: float, backward_s: float, blocked: Sequence[Span | None], zeroed_s: float | None = None
) -> float:
    """The rank's compute in ``step``: from the end of its last blocked span before the forward
    (``forward_s``), or of the ``zero_grad`` between them (``zeroed_s``), or the step's start, to
    the start of its first blocked span that starts after the backward's last operator started
    (``backward_s``: DDP's wait for its last buckets, the flat path's gradient all-reduce; or the
    step's end), less the blocked time in between (DDP's earlier buckets)."""
    spans = [s for s in blocked if s is not None and s.end_s > step.start_s and s.start_s < step.end_s]
    start = max([s.end_s for s in spans if s.end_s <= forward_s] + [step.start_s])
    if zeroed_s is not None and start <= zeroed_s <= forward_s:
        start = zeroed_s
    end = min([s.start_s for s in spans if s.start_s >= max(backward_s, start)] + [step.end_s])
    inside = sum(max(0.0, min(s.end_s, end) - max(s.start_s, start)) for s in spans)
    return max(0.0, end - start - inside)
