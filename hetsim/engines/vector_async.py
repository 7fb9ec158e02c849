"""``async`` on the vector engine: the SimPy engine's trace (:func:`run_simpy_async`) without
its event loop, where no worker waits for anything but its own work.

Without a barrier, a link shared by the updates, failures or slowdown episodes, worker i's
updates are applied at the running sum of its own ``compute + exchange`` times, from 0 (SimPy
adds each timeout to the clock; ``np.cumsum`` makes the same additions in the same order), and
the run's updates are those times merged in order, up to the run's ``steps x workers``. The
workers' draws (:class:`~hetsim.model.draws.StepDraws`, worker i's n-th compute taking its draws of
"step" n) are taken for as many updates per worker as the fastest is expected to make (from
the means), and doubled until every worker's reach past the run's last update; where that
would draw more than :data:`DRAW_LIMIT` times the run's updates (one worker far faster than the rest), the
event loop, which draws only what each worker uses, is cheaper. SimPy breaks a tie between two
updates applied at the same instant by the order in which their timeouts were scheduled; rather
than replay that, a run with a tie among the updates it keeps goes to the SimPy engine, as does
a run with a shared link, failures or episodes (:func:`run_vector_async` returns None for all
of these).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from hetsim.model.costs import check_times
from hetsim.model.draws import StepDraws
from hetsim.model.trace import Trace, async_trace
from hetsim.model.workers import WorkerStreams, cost_groups
from hetsim.policies.base import Policy, StepInfo, check_split

if TYPE_CHECKING:
    from hetsim.scenario.scenario import Scenario

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
    split = policy.partition(StepInfo(0, 0, 0, per_epoch))
    check_split(policy, split)
    batches = np.asarray(split, dtype=np.int64)
    base = np.zeros(n)
    for model, idx in cost_groups(workers):
        base[idx] = model.time_s(batches[idx])
    check_times(base, batches, [w.name for w in workers])
    means = np.array([(h.noise_mean, h.delay_s) for h in policy.hints])  # the workers' (reset from the scenario)
    expected_s = base * means[:, 0] + means[:, 1] + exchange_s
    if not (expected_s > 0).all():  # updates that take no time: ties, for the event loop
        return None
    need = math.ceil(total / np.sum(1.0 / expected_s) / expected_s.min())  # the fastest worker's updates, expected
    compute = ends = np.empty((n, 0))  # (workers x updates): each worker's computes and update times
    while True:  # draw until every worker's drawn updates reach past the run's last one
        have = ends.shape[1]
        more = max(16, int(1.1 * need) + 16 - have, have)
        if n * (have + more) > DRAW_LIMIT * total:  # very uneven workers: the event loop draws less
            return None
        noise, delay = draws.take(have, more)
        drawn = base * noise  # then * 1.0 (no episode) + delay, as WorkerSpec.compute_s: x * 1.0 is x
        drawn += delay
        if not (batches > 0).all():
            drawn[:, batches == 0] = 0.0  # a worker without samples computes nothing
        drawn = drawn.T.copy()
        steps = np.empty((n, more + 1))  # the last update time so far, then each update's compute + exchange
        steps[:, 0] = ends[:, -1] if have else 0.0
        np.add(drawn, exchange_s, out=steps[:, 1:])
        drawn_ends = np.cumsum(steps, axis=1, out=steps)[:, 1:]
        compute, ends = (np.hstack([compute, drawn]), np.hstack([ends, drawn_ends])) if have else (drawn, drawn_ends)
        last = np.partition(ends.ravel(), total - 1)[total - 1] if ends.size >= total else np.inf
        if (ends[:, -1] > last).all():
            break
    flat = np.ascontiguousarray(ends).ravel()
    kept = np.flatnonzero(flat <= last)  # worker * updates + update, worker by worker
    if len(kept) != total:  # a tie at the run's last update
        return None
    order = np.argsort(flat[kept])
    kept = kept[order]
    times = flat[kept]
    if (np.diff(times) == 0).any():  # a tie SimPy would order by its schedule: replay it there
        return None
    who, k = np.divmod(kept, ends.shape[1])
    start = np.where(k > 0, flat[kept - 1], 0.0)  # the worker's previous update (k > 0: in its own row)
    computed = np.ascontiguousarray(compute).ravel()[kept]
    columns = (who, batches[who], start, computed, np.zeros(total), np.ones(total), np.full(total, exchange_s))
    return async_trace(policy.name, n, columns, per_epoch)
