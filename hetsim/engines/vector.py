"""The vector engine: the SimPy engine's model, computed with NumPy a block of steps at a time.

It runs every policy and gives the trace the SimPy engine gives, to the last bit: the barrier
policies as below, ``async`` by merging each worker's own update times
(:mod:`hetsim.engines.vector_async`; a run with a shared link, failures or episodes goes
through the SimPy engine's event loop).

How it stays identical to :func:`hetsim.engines.simpy_engine.run_simpy`:

* *Draws.* Each worker's noise and delay of a step are those both engines read from
  :class:`hetsim.model.draws.StepDraws` (counter-based: they depend on the worker and the step
  only), here as (steps x workers) arrays, so a step's draws never depend on how steps are
  grouped here.
* *Blocks.* ``policy.steady_steps(info)`` says for how many steps the split may be taken to
  stay what ``partition`` just returned; those steps are computed together, as (steps x
  workers) arrays, and reported with one ``policy.observe_steps`` (equivalent to the SimPy
  engine's ``observe`` per step, with the same StepRecords). A policy that re-decides every
  step, as ``adaptive`` does, gives a guess and takes only the steps up to the one after which
  its split changed; the steps after it are dropped and computed again with the new split
  (their draws are the same: they are kept by step).
* *Clock.* SimPy adds each timeout to the current time. A step's barrier is
  ``start + compute`` of the k-th worker to finish; rounding is monotone, so that equals
  ``start + (k-th smallest compute)``, and the next start is ``barrier + comm``. One
  ``np.cumsum`` (a sequential sum) over ``start, M_0, comm, M_1, comm, ...`` makes exactly those
  additions, in that order, for a whole block.
* *Buckets.* With an overlapped all-reduce, ``comm`` is each step's exposed part, computed by
  the function the SimPy engine calls (:meth:`hetsim.model.network.Buckets.exposed_s`) on the same
  arrays: each worker's finish since the step's start (its compute, in a step without stalls)
  and compute time. It needs only those when every worker is waited for, so a block stays one
  ``cumsum``; for ``backup`` and ``ksync`` the waited-for workers are those whose gradients are
  kept (below), whose absolute finish decides ties, so :func:`_first_k_clock` checks the ties it
  assumed and redoes a step (then the rest) where rounding decided one otherwise.
* *Episodes and failures.* Every worker's slowdown and failure state is constant until the first
  change on any of their timelines (the *horizon*); a block ends at the first step that starts
  at or after it. A step in which a worker with samples is down (it stalls until its repair and
  starts computing at the factor then in force) is computed alone, by :func:`_stalled_step`.
* *Cancellation.* ``backup`` and ``ksync`` keep exactly k gradients a step (k =
  ``policy.wait_for()``, or every worker with samples when fewer have them; a worker without
  samples is never one of the k), those of the first k workers to finish by (absolute finish,
  worker index): where several finish at the barrier's instant the lowest-indexed are kept
  (:func:`_first_k`, which looks again only at the steps with more than k done). The others
  were cancelled at the barrier: their compute time is the time they worked until then (all of
  it for a tied one, 0 if still stalled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.registry import ENGINES
from hetsim.engines.base import Engine, Epochs, begin
from hetsim.engines.simpy_engine import run_simpy_async
from hetsim.engines.vector_async import run_vector_async
from hetsim.model.costs import check_times
from hetsim.model.network import Buckets
from hetsim.model.trace import Recorder, Trace, TraceBuilder
from hetsim.model.workers import Timeline, WorkerSpec, WorkerStreams, cost_groups
from hetsim.policies.base import Policy, check_split, check_wait_for

if TYPE_CHECKING:
    from hetsim.scenario.scenario import Scenario


@ENGINES.register
class VectorEngine(Engine):
    """The SimPy engine's traces, a block of steps at a time with NumPy (async: merged update
    times, :mod:`hetsim.engines.vector_async`)."""

    name = "vector"
    priority = 1

    def run(self, scenario: Scenario, policy: Policy, seed: int | None = None) -> Trace:
        return run_vector(scenario, policy, seed)

    def record(self, scenario: Scenario, policy: Policy, recorder: Recorder, seed: int | None = None) -> None:
        record_vector(scenario, policy, recorder, seed)


def run_vector(scenario: Scenario, policy: Policy, seed: int | None = None) -> Trace:
    """Simulate ``scenario`` under ``policy`` (reset here); the trace of :func:`run_simpy`."""
    if not policy.synchronous:
        return run_async(scenario, policy, seed)
    trace = TraceBuilder(policy.name, scenario.n_workers, scenario.workload.total_steps, 1, policy.weighted_gradients)
    record_vector(scenario, policy, trace, seed)
    return trace.finish()


def run_async(scenario: Scenario, policy: Policy, seed: int | None = None) -> Trace:
    """An async run: merged update times where no worker waits on anything but its own work,
    else (a shared link, failures, episodes, a tie) the SimPy engine's event loop, afresh."""
    trace = run_vector_async(scenario, policy, *begin(scenario, policy, seed))
    if trace is not None:
        return trace
    return run_simpy_async(scenario, policy, *begin(scenario, policy, seed))


def record_vector(scenario: Scenario, policy: Policy, recorder: Recorder, seed: int | None = None) -> None:
    """Simulate ``scenario`` under the barrier ``policy`` (reset here), handing ``recorder`` its steps."""
    if not policy.synchronous:
        raise ConfigError("engine", f"{policy.name!r} has no barrier: its steps cannot be recorded as blocks")
    workers = scenario.workers
    n = len(workers)
    wl = scenario.workload
    total = wl.total_steps
    streams, draws = begin(scenario, policy, seed)
    epochs = Epochs(wl.dataset_size, policy)
    buckets = scenario.buckets()
    comm: float | Buckets = scenario.allreduce_s() if buckets is None else buckets
    timelines = _Timelines(workers, streams)
    costs = cost_groups(workers)
    names = [w.name for w in workers]

    row, start = 0, 0.0
    batches: tuple[int, ...] = ()
    while row < total:
        factor, down, horizon = timelines.at(start)
        available = tuple((~down).tolist()) if down.any() else None  # (None: every worker up)
        info = epochs.info(row, available)
        split = policy.partition(info)
        if split is not batches:  # a new split (static policies hand back the same tuple)
            check_split(policy, split)
            batches = tuple(split)
            b = np.array(batches, dtype=np.int64)
            works = b > 0
            working = int(np.count_nonzero(works))
            base = np.empty(n)  # compute = base * noise * factor + delay, base = cost(b)
            for model, idx in costs:
                base[idx] = model.time_s(b[idx])
            check_times(base, b, names, works)
        need = check_wait_for(policy, policy.wait_for())
        first = need if need < working else None  # the first k of the workers with samples, or all
        noise, delay = draws.rows(row, min(policy.steady_steps(info), total - row))
        if (works & down).any():
            stalled = [(int(i), workers[i], streams[i]) for i in np.flatnonzero(works & down)]
            steps, start = _stalled_step(start, comm, base, works, noise[0], delay[0], factor, first, stalled)
        else:
            steps, start = _block(start, comm, base, works, noise, delay, factor, first, horizon)
        taken = policy.observe_steps(info, _Row(split, b), steps.compute_s, steps.included)
        if taken < len(steps.start_s):  # the split changed after step `taken - 1`: the rest again
            start, steps = float(steps.start_s[taken]), steps.head(taken)
        epoch = info.epoch + (info.step_in_epoch + np.arange(len(steps.start_s))) // info.steps_per_epoch
        up = None if available is None else ~down
        recorder.add_block(info.step, epoch, steps.start_s, b, steps.compute_s, steps.wait_s, steps.included,
                           steps.slowdown, up, steps.comm_s)  # fmt: skip
        row += taken


class _Steps:
    """The computed rows of a block: (steps x workers) arrays, or rows that broadcast to them."""

    __slots__ = ("comm_s", "compute_s", "included", "slowdown", "start_s", "wait_s")

    def __init__(
        self, start_s: np.ndarray, compute_s: np.ndarray, wait_s: np.ndarray, included: np.ndarray,
        slowdown: np.ndarray, comm_s: float | np.ndarray,
    ) -> None:  # fmt: skip
        self.start_s, self.compute_s, self.wait_s, self.included, self.slowdown = (
            start_s,
            compute_s,
            wait_s,
            included,
            slowdown,
        )
        self.comm_s = comm_s  # the all-reduce after each step's barrier (one number for every step)

    def head(self, k: int) -> _Steps:
        """The first ``k`` steps."""

        def rows(x: Any) -> Any:
            return x[:k] if isinstance(x, np.ndarray) and x.ndim == 2 else x

        comm = self.comm_s[:k] if isinstance(self.comm_s, np.ndarray) else self.comm_s
        return _Steps(self.start_s[:k], self.compute_s[:k], self.wait_s[:k], rows(self.included), rows(self.slowdown),
                      comm)  # fmt: skip


def _block(
    start: float,
    comm: float | Buckets,
    base: np.ndarray,
    works: np.ndarray,
    noise: np.ndarray,
    delay: np.ndarray,
    factor: np.ndarray,
    first: int | None,
    horizon: float,
) -> tuple[_Steps, float]:
    """Up to ``len(noise)`` steps with one split and no stalled worker, cut at the first step
    that starts at or after ``horizon``; returns them and the start of the step after. ``first``:
    the step waits for the first ``first`` workers with samples to finish (None: for all)."""
    n_steps, n = noise.shape
    compute = base * noise
    if not (factor == 1.0).all():
        compute *= factor
    compute += delay
    if not works.all():
        compute[:, ~works] = 0.0  # a worker without samples sits the step out
    if first is None:
        kth = compute.max(axis=1)
    else:  # a worker without samples is not one of the k
        ranked = compute if works.all() else np.where(works, compute, np.inf)
        kth = np.partition(ranked, first - 1, axis=1)[:, first - 1]
    comm_s: float | np.ndarray
    if isinstance(comm, Buckets) and first is not None:
        clock, comm_s = _first_k_clock(start, compute, kth, comm, works, first)
    else:
        comm_s = comm.exposed_s(compute, compute) if isinstance(comm, Buckets) else comm
        clock = np.empty(2 * n_steps + 1)  # start, kth_0, comm_0, kth_1, comm_1, ...
        clock[0], clock[1::2], clock[2::2] = start, kth, comm_s
        clock = np.cumsum(clock)  # start_0, barrier_0, start_1, barrier_1, ..., start after the last
    starts = clock[0:-1:2]
    k = int(np.searchsorted(starts, horizon, side="left"))  # steps starting before the horizon (>= 1)
    if k < 1:  # a clock of nan (inputs are checked where they are made): the loop would not move on
        raise RuntimeError(f"a step starting at {start!r} s has no end: a time of nan reached the engine")
    starts, barriers, compute = starts[:k, None], clock[1 : 2 * k : 2, None], compute[:k]
    end = starts + compute
    if first is None:
        included = works
    else:
        finished = end <= barriers
        included = _first_k(finished & works, end, barriers, first)
        if not finished.all():  # cancelled at the barrier: the time worked until then
            compute = np.where(finished, compute, barriers - starts)
            end = starts + compute
    wait = np.maximum(barriers - end, 0.0)
    comm_s = comm_s[:k] if isinstance(comm_s, np.ndarray) else comm_s
    return _Steps(starts[:, 0], compute, wait, included, factor, comm_s), float(clock[2 * k])


def _first_k(done: np.ndarray, end: np.ndarray, barrier: np.ndarray, k: int) -> np.ndarray:
    """The workers whose gradients are kept, exactly ``k`` a step: ``done`` (steps x workers: with
    samples and finished by the barrier, the k-th such finish, so at least ``k`` a step) where it
    holds ``k`` a step; where it holds more, the extra ones finished at the barrier's instant
    (``end == barrier``: fewer than ``k`` finished before it), and of those the lowest-indexed
    are kept, the rest cut. One count of the whole array says whether any step holds more; only
    those steps are looked at again. ``done`` is changed in place and returned."""
    if np.count_nonzero(done) > k * len(done):  # a tie at some step's barrier
        over = np.flatnonzero(np.count_nonzero(done, axis=1) > k)
        rows = done[over]
        tied = rows & (end[over] == barrier[over])
        room = k - np.count_nonzero(rows & ~tied, axis=1)  # places left after those finished before
        rows &= ~tied | (np.cumsum(tied, axis=1) <= room[:, None])
        done[over] = rows
    return done


def _first_k_clock(
    start: float, compute: np.ndarray, kth: np.ndarray, buckets: Buckets, works: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The clock of :func:`_block` and each step's exposed all-reduce for a policy that waits for
    the first k: the workers whose gradients are kept (:func:`_first_k`: done at the barrier,
    ``start + compute <= start + kth``, ties by absolute time as in the SimPy engine, then by
    index) are the ones waited for. Computed for all steps at once with finishes compared as
    ``compute`` against ``kth``, then checked: from the first step where rounding at the
    absolute time decided a tie otherwise, that step is redone with its true waited-for set and
    the rest again (the same additions as one step at a time)."""
    n_steps = len(kth)
    clock, comm_s = np.empty(2 * n_steps + 1), np.empty(n_steps)
    clock[0], j = start, 0
    while j < n_steps:
        rest, kth_rest = compute[j:], kth[j:, None]
        waited = _first_k((rest <= kth_rest) & works, rest, kth_rest, k)
        comm_s[j:] = buckets.exposed_s(rest, rest, waited)
        part = clock[2 * j :]  # a view: start_j, then kth_j, comm_j, kth_j+1, ...
        part[1::2], part[2::2] = kth[j:], comm_s[j:]
        part[:] = np.cumsum(part)
        end, barriers = part[0:-1:2, None] + rest, part[1::2, None]
        wrong = np.flatnonzero((_first_k((end <= barriers) & works, end, barriers, k) != waited).any(axis=1))
        if not wrong.size:
            break
        j += int(wrong[0])  # steps before j are right; step j's start and barrier too
        now, barrier = clock[2 * j], clock[2 * j + 1 : 2 * j + 2, None]
        end = (now + compute[j])[None]
        comm_s[j] = buckets.exposed_s(compute[j], compute[j], _first_k((end <= barrier) & works, end, barrier, k)[0])
        clock[2 * j + 2] = clock[2 * j + 1] + comm_s[j]
        j += 1
    return clock, comm_s


def _stalled_step(
    start: float,
    comm: float | Buckets,
    base: np.ndarray,
    works: np.ndarray,
    noise: np.ndarray,
    delay: np.ndarray,
    factor: np.ndarray,
    first: int | None,
    stalled: list[tuple[int, WorkerSpec, WorkerStreams]],
) -> tuple[_Steps, float]:
    """One step in which the ``stalled`` workers (down, with samples) wait for their repair,
    then compute at the slowdown factor in force when they start (``first``: as in :func:`_block`)."""
    began = np.full(len(base), start)
    slowdown = factor.copy()
    for i, spec, rng in stalled:
        began[i] = start + (rng.repaired_at(start) - start)
        slowdown[i] = rng.factor_at(spec, began[i])
    compute = np.where(works, base * noise * slowdown + delay, 0.0)
    end = began + compute
    barrier = end.max() if first is None else np.partition(np.where(works, end, np.inf), first - 1)[first - 1]
    finished = end <= barrier
    if first is None:
        kept = works
    else:
        kept = _first_k((finished & works)[None], end[None], np.full((1, 1), barrier), first)[0]
    if isinstance(comm, Buckets):  # from the finishes since the start, as the SimPy engine has them
        comm_s = float(comm.exposed_s((began - start) + compute, compute, None if first is None else kept))
    else:
        comm_s = comm
    resumed = began <= barrier  # a worker still stalled at the barrier never started computing
    compute = np.where(finished, compute, np.where(resumed, barrier - began, 0.0))
    began = np.where(resumed, began, start)
    slowdown = np.where(resumed, slowdown, factor)
    wait = np.maximum(barrier - (began + compute), 0.0) + np.maximum(began - start, 0.0)
    steps = _Steps(np.array([start]), compute[None], wait[None], kept[None], slowdown[None], comm_s)
    return steps, float(barrier + comm_s)


class _Row(tuple[int, ...]):
    """A tuple (what a StepRecord holds) that also keeps the NumPy row it was made from, so a
    policy's ``np.asarray(record.compute_s)`` costs a copy instead of a conversion per element."""

    array: np.ndarray

    def __new__(cls, values: tuple[int, ...], array: np.ndarray) -> _Row:
        row = super().__new__(cls, values)
        row.array = array
        return row

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        return np.array(self.array, dtype=dtype, copy=True)  # a copy: the policy may write to it

    def __reduce__(self) -> tuple[type, tuple[tuple[int, ...]]]:
        return tuple, (tuple(self),)  # pickled and copied as the plain tuple it stands for


class _Timelines:
    """The workers' slowdown and failure timelines, queried at increasing times: the state in
    force and the horizon, the first change on any of them after the time asked."""

    def __init__(self, workers: tuple[WorkerSpec, ...], streams: list[WorkerStreams]) -> None:
        n = len(workers)
        self.lines: list[Timeline] = []
        index: dict[int, int] = {}

        def line(tl: Timeline | None) -> int:
            if tl is None:
                return -1
            if id(tl) not in index:  # a slowdown group's members share one timeline
                index[id(tl)] = len(self.lines)
                self.lines.append(tl)
            return index[id(tl)]

        self.ones, self.none_down = np.ones(n), np.zeros(n, dtype=bool)
        if all(s.slowdown is None and s.failure is None for s in streams):
            return  # no timelines (most large clusters): at() answers at once
        self.slow = np.array([line(s.slowdown) for s in streams], dtype=np.int64)
        self.fail = np.array([line(s.failure) for s in streams], dtype=np.int64)
        self.factors = np.array([w.slowdown.factor if w.slowdown is not None else 1.0 for w in workers], dtype=float)
        self.active = np.zeros(len(self.lines) + 1, dtype=bool)  # the last entry stands for "no timeline" (-1)
        self.next = np.full(len(self.lines), -np.inf)

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray, float]:
        """(slowdown factor per worker, down per worker, horizon) at ``t``."""
        if not self.lines:
            return self.ones, self.none_down, np.inf
        for j in np.flatnonzero(self.next <= t):
            self.active[j] = self.lines[j].active(t)
            self.next[j] = self.lines[j].next_change(t)
        factor = np.where(self.active[self.slow], self.factors, 1.0)
        return factor, self.active[self.fail], float(self.next.min())
