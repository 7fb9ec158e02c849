"""The reference engine: a SimPy process per worker, a barrier, then the all-reduce.

Each step the coordinator asks the policy for the split (telling it which workers are up) and
releases every worker with one shared ``go`` event, handing out the step's draws (every
worker's noise factor and delay, :class:`hetsim.model.draws.StepDraws`). If a worker is down it first waits
for its repair; then it holds for its compute time, slowed by the episode in force when it
starts, and reports done. The coordinator waits for the barrier (all workers, or the first
k = ``policy.wait_for()`` of those with samples, cancelling the rest: exactly k gradients are
kept, and of workers finishing at the barrier's instant the lowest-indexed), holds for the
all-reduce (with buckets, for what of it is still running:
:meth:`hetsim.model.network.Buckets.exposed_s`), records the step and tells the policy what it
measured. A worker's failure state is read at the start of each step: a failure that begins
mid-step takes effect at the next one.

Policies without a barrier (``async``) run on :func:`run_simpy_async`: every worker loops on
compute, push, compute, ... and each push is one update; on a network with a shared link (the
parameter server's) the pushes queue for it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import numpy as np
import simpy
from simpy.events import Condition

from hetsim.core.registry import ENGINES
from hetsim.engines.base import Engine, Epochs, begin
from hetsim.model.draws import StepDraws
from hetsim.model.trace import Recorder, Trace, TraceBuilder, async_trace
from hetsim.model.workers import WorkerSpec, WorkerStreams
from hetsim.policies.base import Policy, StepInfo, StepRecord, check_split, check_wait_for

if TYPE_CHECKING:
    from hetsim.scenario.scenario import Scenario


FLUSH_STEPS = 4096  # steps kept as Python rows before they go to the recorder as one block


class _Step:
    """What the coordinator hands the workers for one step, and what they write back."""

    __slots__ = ("batches", "compute", "delay", "done", "noise", "slowdown", "start")

    def __init__(self, batches: tuple[int, ...], done: list[simpy.Event], start: float, noise: list[float],
                 delay: list[float]) -> None:  # fmt: skip
        n = len(batches)
        self.batches, self.done, self.start = batches, done, start
        self.noise, self.delay = noise, delay  # every worker's draws of the step
        self.compute = [0.0] * n  # each worker's compute time (until cancelled, if it was)
        self.slowdown = [1.0] * n  # the episode factor at each worker's compute start


@ENGINES.register
class SimPyEngine(Engine):
    """The reference: every policy, one SimPy process per worker."""

    name = "simpy"

    def run(self, scenario: Scenario, policy: Policy, seed: int | None = None) -> Trace:
        return run_simpy(scenario, policy, seed)

    def record(self, scenario: Scenario, policy: Policy, recorder: Recorder, seed: int | None = None) -> None:
        record_simpy(scenario, policy, recorder, seed)


def _at_least(k: int) -> Callable[[tuple[simpy.Event, ...], int], bool]:
    """A SimPy condition: ``k`` of its events have happened."""
    return lambda events, count: count >= k


def run_simpy(scenario: Scenario, policy: Policy, seed: int | None = None) -> Trace:
    """Simulate ``scenario`` under ``policy`` (reset here) and return its trace."""
    if not policy.synchronous:
        return run_simpy_async(scenario, policy, *begin(scenario, policy, seed))
    trace = TraceBuilder(policy.name, scenario.n_workers, scenario.workload.total_steps, 1, policy.weighted_gradients)
    record_simpy(scenario, policy, trace, seed)
    return trace.finish()


def record_simpy(scenario: Scenario, policy: Policy, recorder: Recorder, seed: int | None = None) -> None:
    """Simulate ``scenario`` under the barrier ``policy`` (reset here), handing ``recorder`` its
    steps every :data:`FLUSH_STEPS` steps."""
    _BarrierRun(scenario, policy, *begin(scenario, policy, seed)).run(recorder)


class _BarrierRun:
    """One run of a barrier policy: a coordinator process and one process per worker."""

    def __init__(self, scenario: Scenario, policy: Policy, streams: list[WorkerStreams], draws: StepDraws) -> None:
        self.scenario, self.policy, self.streams, self.draws = scenario, policy, streams, draws
        self.n = scenario.n_workers
        self.env = simpy.Environment()
        self.go: simpy.Event = self.env.event()  # always the next step's release event
        self.began = [0.0] * self.n  # when each worker's compute began in the current step
        self.rows: list[tuple[object, ...]] = []  # the trace's columns of each step not yet flushed
        self.flushed = 0  # steps handed to the recorder
        self.comm_s = scenario.allreduce_s()
        self.buckets = scenario.buckets()
        self.may_fail = any(rng.failure is not None for rng in streams)
        self.checked: tuple[int, ...] | None = None  # the last split check_split passed (checked when it changes)
        self.processes = [
            self.env.process(self.worker(i, spec, rng)) for i, (spec, rng) in enumerate(zip(scenario.workers, streams))
        ]

    def run(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.env.run(self.env.process(self.coordinator()))
        self.flush()

    def flush(self) -> None:
        """Hand the steps recorded since the last flush to the recorder, as one block."""
        if not self.rows:
            return
        epoch, start, batches, compute, wait, included, slowdown, up, comm = (np.array(c) for c in zip(*self.rows))
        self.recorder.add_block(self.flushed, epoch, start, batches, compute, wait, included, slowdown, up, comm)
        self.flushed += len(self.rows)
        self.rows = []

    def worker(self, i: int, spec: WorkerSpec, rng: WorkerStreams) -> Generator[simpy.Event, _Step, None]:
        env, began = self.env, self.began
        episodes, failures = rng.slowdown is not None, rng.failure is not None
        while True:
            step = yield self.go
            b = step.batches[i]
            began[i] = step.start
            factor = step.slowdown[i] = rng.factor_at(spec, step.start) if episodes else 1.0
            try:
                if b > 0 and failures and rng.down_at(step.start):
                    yield env.timeout(rng.repaired_at(step.start) - step.start)  # stalled until repaired
                    began[i] = env.now
                    factor = step.slowdown[i] = rng.factor_at(spec, env.now)
                compute = step.compute[i] = spec.compute_s(b, step.noise[i], step.delay[i], factor)
                yield env.timeout(compute)
                step.done[i].succeed()
            except simpy.Interrupt:  # cancelled: the step completed without this gradient
                if step.compute[i] > 0:
                    step.compute[i] = env.now - began[i]

    def coordinator(self) -> Generator[simpy.Event, object, None]:
        wl = self.scenario.workload
        epochs = Epochs(wl.dataset_size, self.policy)
        for row in range(wl.total_steps):
            yield from self.step(epochs.info(row))

    def step(self, info: StepInfo) -> Generator[simpy.Event, object, None]:
        """Release the workers, wait for the barrier (cancelling the rest), then the all-reduce."""
        env, n, policy = self.env, self.n, self.policy
        start = env.now
        available = tuple(not rng.down_at(start) for rng in self.streams) if self.may_fail else (True,) * n
        info = info._replace(available=None if not self.may_fail or all(available) else available)  # None: all up
        batches = policy.partition(info)
        if batches is not self.checked:
            check_split(policy, batches)
            self.checked = batches = tuple(batches)
        done = [env.event() for _ in range(n)]
        release, self.go = self.go, env.event()
        noise, delay = self.draws.rows(info.step, self.scenario.workload.total_steps - info.step)  # the rest, ahead
        step = _Step(batches, done, start, noise[0].tolist(), delay[0].tolist())
        release.succeed(step)
        need = check_wait_for(policy, policy.wait_for())
        first_k = need < n and need < sum(b > 0 for b in batches)  # else: wait for every worker with samples
        if first_k:  # a worker without samples is done at once: it is not one of the k
            yield Condition(env, _at_least(need), [d for b, d in zip(batches, done) if b > 0])
        else:
            yield Condition(env, _at_least(n), done)
        included = [b > 0 and d.triggered for b, d in zip(batches, done)]
        if first_k:
            self.keep_first(included, step, need)
        comm = self.comm_s if self.buckets is None else self.exposed(start, step, included if first_k else None)
        if first_k:
            for i, d in enumerate(done):
                if not d.triggered:
                    self.processes[i].interrupt()
        barrier = env.now
        yield env.timeout(comm)
        # Idle at the barrier: after computing, and before it while stalled by a failure.
        wait = [max(barrier - (t + c), 0.0) + max(t - start, 0.0) for t, c in zip(self.began, step.compute)]
        kept = tuple(included)
        self.rows.append((info.epoch, start, batches, step.compute, wait, kept, step.slowdown, available, comm))
        if len(self.rows) >= FLUSH_STEPS:
            self.flush()
        policy.observe(StepRecord(info, batches, tuple(step.compute), kept))

    def keep_first(self, included: list[bool], step: _Step, k: int) -> None:
        """Exactly ``k`` gradients: where more than ``k`` workers with samples are done at the
        barrier, the extra ones finished at its very instant (ties: fewer than ``k`` finished
        before it, or the barrier would have come sooner); of those, the lowest-indexed are kept
        and the rest cut (``included`` set false in place). They finished, so they are not
        interrupted, and their compute time is the time they worked until the barrier, all of it."""
        extra = sum(included) - k
        barrier, began, compute = self.env.now, self.began, step.compute
        for i in range(self.n - 1, -1, -1):  # the highest-indexed ties first
            if extra <= 0:
                break
            if included[i] and began[i] + compute[i] == barrier:
                included[i] = False
                extra -= 1

    def exposed(self, start: float, step: _Step, waited: list[bool] | None) -> float:
        """With buckets: the all-reduce left at the barrier, from each worker's finish (since the
        step's start) and compute time; waited for: the workers whose gradients are kept (None:
        every worker, when the policy waits for all)."""
        compute = np.array(step.compute)
        finish = (np.array(self.began) - start) + compute
        assert self.buckets is not None
        return float(self.buckets.exposed_s(finish, compute, None if waited is None else np.array(waited)))


def run_simpy_async(scenario: Scenario, policy: Policy, streams: list[WorkerStreams], draws: StepDraws) -> Trace:
    """No barrier: each worker computes on ``B/n`` samples, pushes, and starts again.

    One trace row per update, in the order updates are applied; ``step`` is the update index
    and ``comm_s`` the worker's push-and-pull exchange. On a network whose workers share a link
    (:meth:`~hetsim.model.network.NetworkModel.update_link_s`, the parameter server's) every exchange
    holds that link, one at a time, first come first served (a SimPy ``Resource`` of capacity
    1), and ``comm_s`` is the time queued for it plus the transfer; otherwise each exchange is
    the network's two-party all-reduce, uncontended. An epoch is ``steps_per_epoch * n``
    updates, so a run applies as many samples as the synchronous policies do.
    """
    workers = scenario.workers
    n = len(workers)
    wl = scenario.workload
    total = wl.total_steps * n
    per_epoch = wl.steps_per_epoch * n
    env = simpy.Environment()
    finished = env.event()
    exchange_s = scenario.network.exchange_s(wl.gradient_mb)
    link = None if scenario.network.update_link_s(wl.gradient_mb) is None else simpy.Resource(env, capacity=1)
    applied = [0]
    batches = policy.partition(StepInfo(0, 0, 0, per_epoch))
    check_split(policy, batches)
    rows: list[tuple[int, int, float, float, float, float, float]] = []  # + down, factor, comm

    def worker(i: int, spec: WorkerSpec, rng: WorkerStreams) -> Generator[simpy.Event, object, None]:
        for n_th in itertools.count():
            if applied[0] >= total:
                return
            start = env.now
            noise, delay = draws.at(i, n_th)  # its n-th compute's
            down_s = 0.0
            if rng.down_at(start):
                down_s = rng.repaired_at(start) - start
                yield env.timeout(down_s)
            factor = rng.factor_at(spec, env.now)
            compute = spec.compute_s(batches[i], noise, delay, factor)
            comm = exchange_s
            if link is None:
                yield env.timeout(compute + exchange_s)
            else:
                yield env.timeout(compute)
                with link.request() as turn:  # queue for the shared link
                    yield turn
                    yield env.timeout(exchange_s)
                comm = env.now - (start + down_s + compute)
            if applied[0] >= total:
                return
            rows.append((i, batches[i], start, compute, down_s, factor, comm))
            applied[0] += 1
            if applied[0] == total:
                finished.succeed()

    for i, (spec, rng) in enumerate(zip(workers, streams)):
        env.process(worker(i, spec, rng))
    env.run(finished)
    return async_trace(policy.name, n, list(zip(*rows)), per_epoch)
