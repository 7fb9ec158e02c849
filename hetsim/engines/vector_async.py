"""``async`` on the vector engine: the SimPy engine's trace (:func:`run_simpy_async`) without
its event loop, where no worker waits for anything but its own work.

Without a barrier, a link shared by the updates, failures or slowdown episodes, worker i's
updates are applied at the running sum of its own ``compute + exchange`` times, from 0 (SimPy
adds each timeout to the clock; ``np.cumsum`` makes the same additions in the same order), and
the run's updates are those times merged in order, up to the run's ``steps x workers``. The
workers' draws (:class:`~hetsim.draws.StepDraws`, worker i's n-th compute taking its draws of
"step" n) are taken for as many updates per worker, doubled until every worker's reach past the
run's last update; where that would draw
more than :data:`DRAW_LIMIT` times the run's updates (one worker far faster than the rest), the
event loop, which draws only what each worker uses, is cheaper. SimPy breaks a tie between two
updates applied at the same instant by the order in which their timeouts were scheduled; rather
than replay that, a run with a tie among the updates it keeps goes to the SimPy engine, as does
a run with a shared link, failures or episodes (:func:`run_vector_async` returns None for all
of these).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from hetsim.draws import StepDraws
from hetsim.policies.base import Policy, StepInfo
from hetsim.trace import Trace, async_trace
from hetsim.workers import WorkerStreams

if TYPE_CHECKING:
    from hetsim.scenario import Scenario

DRAW_LIMIT = 8  # draws (workers x updates each) at most this many times the run's updates, else SimPy


def runs_without_events(scenario: Scenario, streams: Sequence[WorkerStreams]) -> bool:
    """Whether every worker's update times depend on its own draws only."""
    no_link = scenario.network.update_link_s(scenario.workload.gradient_mb) is None
    return no_link and all(rng.slowdown is None and rng.failure is None for rng in streams)


def run_vector_async(
    scenario: Scenario, policy: Policy, streams: Sequence[WorkerStreams], draws: StepDraws
) -> Trace | None:
    """The trace of :func:`~hetsim.engines.simpy_engine.run_simpy_async` for ``policy`` (reset),
    or None where that needs the event loop (see the module's docstring)."""
    if not runs_without_events(scenario, streams):
        return None
    workers, wl = scenario.workers, scenario.workload
    n = len(workers)
    total, per_epoch = wl.total_steps * n, wl.steps_per_epoch * n
    exchange_s = scenario.network.exchange_s(wl.gradient_mb)
    batches = np.asarray(policy.partition(StepInfo(0, 0, 0, per_epoch)), dtype=np.int64)
    base = np.array([float(w.cost.time_s(int(b))) if b > 0 else 0.0 for w, b in zip(workers, batches)])
    compute = np.empty((n, 0))
    ends = np.empty((n, 0))
    while True:  # draw until every worker's drawn updates reach past the run's last one
        if n * compute.shape[1] > DRAW_LIMIT * total:  # very uneven workers: the event loop draws less
            return None
        more = max(8, 2 * total // n - compute.shape[1], compute.shape[1])
        noise, delay = draws.take(compute.shape[1], more)
        drawn = np.where(batches[:, None] > 0, base[:, None] * noise.T * 1.0 + delay.T, 0.0)  # as WorkerSpec.compute_s
        compute = np.concatenate([compute, drawn], axis=1)
        steps = np.concatenate([ends[:, -1:] if ends.size else np.zeros((n, 1)), drawn + exchange_s], axis=1)
        ends = np.concatenate([ends, np.cumsum(steps, axis=1)[:, 1:]], axis=1)
        last = np.partition(ends.ravel(), total - 1)[total - 1] if ends.size >= total else np.inf
        if (ends[:, -1] > last).all():
            break
    flat = ends.ravel()
    first = np.argpartition(flat, total)[: total + 1] if flat.size > total else np.arange(flat.size)
    order = first[np.argsort(flat[first], kind="stable")]  # the run's updates (and the next), in time order
    times = flat[order]
    if (np.diff(times) == 0).any():  # a tie SimPy would order by its schedule: replay it there
        return None
    who, k = np.divmod(order[:total], ends.shape[1])
    start = np.where(k > 0, ends[who, np.maximum(k - 1, 0)], 0.0)
    rows = np.column_stack([who, batches[who], start, compute[who, k], np.zeros(total), np.ones(total),
                            np.full(total, exchange_s)])  # fmt: skip
    return async_trace(policy.name, n, rows, per_epoch)
