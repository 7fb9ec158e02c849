"""A data-parallel job's ``torch.profiler`` traces (one per rank) as hetsim's trace:
:func:`import_traces`, behind ``python -m hetsim import-trace --format torch-profiler``.

Each rank's trace is read by :mod:`hetsim.traces.kineto`. Then:

1. **Checks.** One trace per rank of one job (same world size, backend and collectives, in the
   same order with the same payloads), the same ``ProfilerStep`` numbers on every rank, at least
   one collective. Anything else is one :class:`~hetsim.core.errors.ConfigError`.
2. **Clocks.** An all-reduce ends on every rank at about the same moment (the last rank's data
   completes it everywhere), so rank r's clock offset is the median over all-reduces of its end
   minus rank 0's. After the offsets no all-reduce may end on a rank before the last rank issued
   it (by more than :data:`CAUSALITY_TOL_S`) in more than :data:`MAX_ACAUSAL` of them: otherwise the
   clocks cannot be aligned (the traces are not of one run, or a clock jumped).
3. **Blocked time** (:mod:`hetsim.traces.blocking`). Of the gaps in a rank's main-thread
   operators after it issued a collective, the one that overlaps the collective's run the most
   is where it waited for it, until the thread ran its next operator; a synchronous call's wait
   starts with the call. A collective that ran while the rank worked (DDP's earlier buckets
   during the backward) blocked it only in the gaps between operators. On CUDA the same rule
   runs on the device: the gaps between compute kernels, from the NCCL kernel's start.
4. **Compute.** A step's ``compute_s`` is the rank's work from the end of its last blocked span
   before the step's first forward operator, or of the ``optimizer.zero_grad()`` between them
   (loops zero the gradients just before the forward), or the step's start, to the start of its
   first blocked span after its backward's last node started (or the step's end): the forward,
   the backward (with DDP, up to its wait for the last buckets), whatever the loop did in
   between (an injected delay) and before it (data loading, when neither comes first), less the
   blocked time inside. The rest of the step (the collectives, the optimizer's update, the
   split's broadcast, copying the reduced gradient back) is waiting and communication, as
   ``validation run`` books it: a per-step cost outside the ranks' compute.
5. **Wait and exposed communication**, in hetsim's terms (a barrier step): the step lasts rank
   0's ``ProfilerStep`` span (as in ``validation run``'s traces, rank 0's is the step's), or the
   slowest rank's compute where that is longer (a peer that began its step before rank 0: the
   span then holds no communication); ``comm_s``, the same in every row of the step, is that
   less the slowest rank's compute; a rank's ``wait_s`` is the slowest rank's compute less its
   own. So every row adds up to the step, and the step is the slowest compute plus the
   communication, as hetsim models it.

Rows: one per rank per step, ``step`` the ``ProfilerStep`` number, ``start_s`` rank 0's start of
the step from its first (so a step ends where rank 0's next begins), ``local_batch`` from the
recorded input shapes or ``batch``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.model.trace import Trace
from hetsim.traces.blocking import blocked_spans, compute_time
from hetsim.traces.kineto import UNTIMED, RankTrace, Span, read_rank

CAUSALITY_TOL_S = 2e-3  # an all-reduce may seem to end this much before its last issue (clock jitter)
MAX_ACAUSAL = 0.1  # the share of all-reduces allowed to break causality by more than that


@dataclass(frozen=True)
class Imported:
    """The imported trace, each rank's clock offset from rank 0's (seconds) and the collectives
    per rank (for the report)."""

    trace: Trace
    offsets_s: tuple[float, ...]
    collectives: int
    batch_from: str  # "input shapes", "--batch" or both
    same_clock: bool = False  # the ranks shared one clock (one host, one base): no offsets estimated
    untimed: tuple[int, ...] = ()  # steps left out: they held work the loop kept out of its time


def import_traces(
    paths: Sequence[Path], batch: Mapping[int, int] | None = None, policy: str | None = None, name: str | None = None
) -> Imported:
    """The traces of ``paths`` (one per rank) as one :class:`~hetsim.model.trace.Trace` of ``policy``
    (else the segment the traces record, else ``name``, else ``profiled``)."""
    ranks = check_job([read_rank(Path(p)) for p in paths])
    stray = sorted(set(batch or {}) - {r.rank for r in ranks})
    if stray:
        raise ConfigError("--batch", f"rank {stray[0]} is not one of the job's {len(ranks)} ranks (0-{len(ranks) - 1})")
    offsets, same_clock = align(ranks)
    untimed = sorted(set().union(*(r.untimed for r in ranks)))
    steps = [n for n in ranks[0].steps if n not in untimed]
    if not steps:
        raise ConfigError(str(ranks[0].path), f"every step holds a {UNTIMED} range (work its loop keeps out of its "
                                              "time): no step to import")  # fmt: skip
    first_start = ranks[0].steps[steps[0]].start_s - offsets[0]
    columns: dict[str, list[float]] = {c: [] for c in ("step", "worker", "local_batch", "start_s", "compute_s",
                                                        "wait_s", "comm_s")}  # fmt: skip
    blocked = {r.rank: blocked_spans(r) for r in ranks}
    sources = set()
    for number in steps:
        span = ranks[0].steps[number]  # rank 0's step is the job's, as validation's
        start = span.start_s - offsets[0] - first_start
        computes = [_compute(r, number, blocked[r.rank]) for r in ranks]
        comm = max(span.end_s - span.start_s, max(computes)) - max(computes)
        for r, compute in zip(ranks, computes):
            local, source = local_batch(r, number, batch)
            sources.add(source)
            row = (number, r.rank, local, start, compute, max(computes) - compute, comm)
            for key, value in zip(columns, row):
                columns[key].append(value)
    if not any(columns["local_batch"]):
        raise ConfigError("--batch", "every rank's batch is 0 in every step: the trace would hold no samples")
    return Imported(_trace(columns, policy or ranks[0].segment or name or "profiled", len(ranks)), tuple(offsets),
                    len(ranks[0].collectives), " and ".join(sorted(sources)), same_clock, tuple(untimed))  # fmt: skip


def _trace(columns: dict[str, list[float]], policy: str, n_workers: int) -> Trace:
    def ints(c: str) -> np.ndarray:
        return np.asarray(columns[c], dtype=np.int64)

    def floats(c: str) -> np.ndarray:
        return np.asarray(columns[c], dtype=np.float64)

    n = len(columns["step"])
    return Trace(policy=policy, n_workers=n_workers, epoch=np.zeros(n, dtype=np.int64), step=ints("step"),
                 worker=ints("worker"), local_batch=ints("local_batch"), start_s=floats("start_s"),
                 compute_s=floats("compute_s"), wait_s=floats("wait_s"), comm_s=floats("comm_s"),
                 included=np.ones(n, dtype=np.bool_))  # fmt: skip


def check_job(ranks: list[RankTrace]) -> list[RankTrace]:
    """The ranks in order, checked to be all the ranks of one job with the same steps."""
    first = ranks[0]
    for r in ranks[1:]:
        for what, mine, theirs in (("world size", first.world_size, r.world_size), ("backend", first.backend,
                                   r.backend), ("segment", first.segment, r.segment)):  # fmt: skip
            if mine != theirs:
                raise ConfigError(str(r.path), f"traces of different jobs: {what} {theirs!r} here, {mine!r} in "
                                               f"{first.path}")  # fmt: skip
    by_rank: dict[int, RankTrace] = {}
    for r in ranks:
        if r.rank in by_rank:
            raise ConfigError(str(r.path), f"rank {r.rank} twice (also {by_rank[r.rank].path})")
        by_rank[r.rank] = r
    missing = sorted(set(range(first.world_size)) - set(by_rank))
    if missing or len(by_rank) != first.world_size:
        raise ConfigError("PATH", f"rank {missing[0] if missing else '?'} of the job's {first.world_size} is missing "
                                  "(pass one trace per rank)")  # fmt: skip
    ordered = [by_rank[k] for k in range(first.world_size)]
    for r in ordered[1:]:
        lost = sorted(set(ordered[0].steps) ^ set(r.steps))
        if lost and not set(ordered[0].steps) & set(r.steps):
            raise ConfigError(str(r.path), f"traces of different jobs: rank {r.rank} profiled steps "
                                           f"{_steps_text(r)}, rank 0 {_steps_text(ordered[0])}")  # fmt: skip
        if lost:
            where = r if lost[0] in ordered[0].steps else ordered[0]
            raise ConfigError(str(where.path), f"ProfilerStep#{lost[0]} is missing on rank {where.rank} (every rank "
                                               "needs the same steps)")  # fmt: skip
    if not first.collectives:
        raise ConfigError(str(first.path), "has no collectives: not a data-parallel job's trace")
    _check_same_collectives(ordered)
    return ordered


def _steps_text(rank: RankTrace) -> str:
    numbers = sorted(rank.steps)
    return f"{numbers[0]}-{numbers[-1]}" if numbers else "none"


def _check_same_collectives(ranks: list[RankTrace]) -> None:
    first = ranks[0]
    for r in ranks[1:]:
        if len(r.collectives) != len(first.collectives):
            raise ConfigError(str(r.path), f"traces of different jobs: {len(r.collectives)} collectives here, "
                                           f"{len(first.collectives)} on rank {first.rank}")  # fmt: skip
        for k, (a, b) in enumerate(zip(first.collectives, r.collectives)):
            if (a.name, a.shape) != (b.name, b.shape):
                raise ConfigError(str(r.path), f"traces of different jobs: collective {k} is {b.name} {b.shape} "
                                               f"here, {a.name} {a.shape} on rank {first.rank}")  # fmt: skip
        if r.host == first.host and _disjoint(r, first):
            raise ConfigError(str(r.path), f"traces of different jobs: recorded on {r.host} at another time than "
                                           f"{first.path}")  # fmt: skip


def _disjoint(a: RankTrace, b: RankTrace) -> bool:
    a0, a1 = min(s.start_s for s in a.steps.values()), max(s.end_s for s in a.steps.values())
    b0, b1 = min(s.start_s for s in b.steps.values()), max(s.end_s for s in b.steps.values())
    return a1 < b0 or b1 < a0


def _reduces(ranks: list[RankTrace]) -> list[int]:
    """The indices of the all-reduces (every collective when there are none)."""
    names = [c.name for c in ranks[0].collectives]
    picked = [k for k, n in enumerate(names) if "all_reduce" in n or "allreduce" in n.lower()]
    return picked or list(range(len(names)))


def one_clock(ranks: list[RankTrace]) -> bool:
    """Whether the ranks ran on one host and their traces count from the same base: one clock."""
    return ranks[0].host != "" and ranks[0].base_ns is not None and len({(r.host, r.base_ns) for r in ranks}) == 1


def align(ranks: list[RankTrace]) -> tuple[list[float], bool]:
    """Each rank's clock minus rank 0's, and whether they share one clock: 0 where they do
    (:func:`one_clock`, and the all-reduces agree), else from the all-reduces' ends (where a
    loaded rank's end is late, by milliseconds); refused when they disagree."""
    picked = _reduces(ranks)
    ends = np.array([[r.collectives[k].ran.end_s for k in picked] for r in ranks])
    issues = np.array([[r.collectives[k].issue.start_s for k in picked] for r in ranks])
    # one clock, unless the all-reduces say otherwise (two hosts of one name whose traces share a base)
    if one_clock(ranks) and _acausal(issues, ends, [0.0] * len(ranks))[0] <= MAX_ACAUSAL * len(picked):
        return [0.0] * len(ranks), True
    estimated = [float(np.median(row - ends[0])) for row in ends]
    bad, lag = _acausal(issues, ends, estimated)
    if bad > MAX_ACAUSAL * len(picked):
        worst = int(np.argmax(lag))
        raise ConfigError("PATH", f"the ranks' clocks cannot be aligned: after the best offsets, {bad} of "
                                  f"{len(picked)} all-reduces end on a rank before the last rank issued them (by up "
                                  f"to {1e3 * lag[worst]:.1f} ms): not traces of one run?")  # fmt: skip
    return estimated, False


def _acausal(issues: np.ndarray, ends: np.ndarray, offsets: Sequence[float]) -> tuple[int, np.ndarray]:
    """How many all-reduces end on a rank before the last rank issued them under ``offsets``, and
    by how much each (rows: ranks; columns: all-reduces)."""
    shift = np.c_[offsets]
    lag = (issues - shift).max(axis=0) - (ends - shift).min(axis=0)  # > 0: it ended before the last issue
    return int((lag > CAUSALITY_TOL_S).sum()), lag


def _compute(rank: RankTrace, number: int, blocked: list[Span | None]) -> float:
    span = rank.steps[number]
    forward = rank.forward_s.get(number, span.start_s)
    return compute_time(span, forward, rank.backward_s.get(number, forward), blocked, rank.zeroed_s.get(number))


def local_batch(rank: RankTrace, step: int, batch: Mapping[int, int] | None) -> tuple[int, str]:
    """The rank's local batch in ``step``: ``batch``'s where it names the rank (what the user says
    wins: a model whose first input dimension is not the batch, a DDP rank with no samples whose
    zero-weighted pass has shape 1), else the input shapes'."""
    if batch is not None and rank.rank in batch:
        return batch[rank.rank], "--batch"
    if step in rank.batch:
        return rank.batch[step], "input shapes"
    raise ConfigError("--batch", f"rank {rank.rank}, ProfilerStep#{step}: no recorded input shape gives the local "
                                 "batch (record with record_shapes=True, or pass --batch RANK=B,...)")  # fmt: skip


def offsets_line(offsets: Sequence[float], same_clock: bool = False) -> str:
    """``clock offsets from rank 0: rank 1 +0.012 ms, ...``"""
    if same_clock and len(offsets) > 1:
        return "clock offsets from rank 0: none (the ranks ran on one host, on one clock)"
    parts = [f"rank {r} {1e3 * o:+.3f} ms" for r, o in enumerate(offsets) if r > 0]
    return "clock offsets from rank 0 (from the all-reduces' ends): " + (", ".join(parts) or "none (one rank)")
