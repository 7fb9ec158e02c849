"""The reference engine: a SimPy process per worker, a barrier, then the all-reduce.

Each step the coordinator asks the policy for the split and releases every worker with one
shared ``go`` event. A worker draws its noise and delay (one number from each of its own
streams, every step, in that order), holds for its compute time and reports done. The
coordinator waits for the barrier (all workers, or the first ``policy.wait_for()``), holds for
the all-reduce, records the step and tells the policy what it measured.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import simpy
from simpy.events import Condition

from hetsim.policies.base import Policy, StepInfo, StepRecord
from hetsim.trace import Trace, TraceBuilder
from hetsim.workers import WorkerSpec, WorkerStreams

if TYPE_CHECKING:
    from hetsim.config import Scenario


class _Step:
    """What the coordinator hands the workers for one step."""

    __slots__ = ("batches", "done", "row")

    def __init__(self, batches: tuple[int, ...], done: list[simpy.Event], row: int) -> None:
        self.batches, self.done, self.row = batches, done, row


def run_simpy(scenario: "Scenario", policy: Policy, seed: int | None = None) -> Trace:
    """Simulate ``scenario`` under ``policy`` (reset here) and return its trace."""
    workers = scenario.workers
    n = len(workers)
    wl = scenario.workload
    streams = WorkerStreams.spawn(scenario.seed if seed is None else seed, n)
    policy.reset(n, wl.global_batch, scenario.hints())
    trace = TraceBuilder(policy.name, n, wl.total_steps)
    env = simpy.Environment()
    go: list[simpy.Event] = [env.event()]  # go[0] is always the next step's release event

    def worker(i: int, spec: WorkerSpec, rng: WorkerStreams) -> Generator[simpy.Event, object, None]:
        compute_row = trace.compute_s
        while True:
            step: _Step = yield go[0]
            b = step.batches[i]
            noise = spec.noise.sample(rng.noise)
            delay = spec.delay.sample(rng.delay)
            compute = spec.compute_s(b, noise, delay)
            compute_row[step.row, i] = compute
            yield env.timeout(compute)
            step.done[i].succeed()

    def coordinator() -> Generator[simpy.Event, object, None]:
        comm_s = scenario.allreduce_s()
        row = 0
        for epoch in range(wl.epochs):
            for k in range(wl.steps_per_epoch):
                info = StepInfo(row, epoch, k, wl.steps_per_epoch)
                batches = tuple(policy.partition(info))
                done = [env.event() for _ in range(n)]
                release, go[0] = go[0], env.event()
                start = env.now
                release.succeed(_Step(batches, done, row))
                need = policy.wait_for()
                yield Condition(env, lambda evs, count: count >= need, done)
                barrier = env.now
                yield env.timeout(comm_s)
                compute = trace.compute_s[row]
                finished = start + compute
                included = tuple((b > 0) and bool(f <= barrier) for b, f in zip(batches, finished))
                trace.local_batch[row] = batches
                trace.wait_s[row] = barrier - finished.clip(max=barrier)
                trace.included[row] = included
                trace.epoch[row], trace.start_s[row], trace.comm_s[row] = epoch, start, comm_s
                policy.observe(StepRecord(info, batches, tuple(compute.tolist()), included))
                row += 1

    for i, (spec, rng) in enumerate(zip(workers, streams)):
        env.process(worker(i, spec, rng))
    env.run(env.process(coordinator()))
    return trace.finish()
