"""The ``async`` prediction: how fast updates arrive when no barrier holds the workers.

Worker i loops: compute (mean ``E[X_i]``), exchange, compute, ... Which model applies is asked
of the network (:meth:`~hetsim.model.network.NetworkModel.update_link_s`), never its name:

* no shared link (``ring``, ``constant``, ``hierarchical``): every exchange takes the same
  ``exchange`` seconds, uncontended, so worker i renews every ``E[X_i] + exchange`` seconds and
  updates arrive at the rate ``sum_i 1/(E[X_i] + exchange)`` (renewal-reward theorem);
* a link every update holds for ``S`` seconds, one at a time, first come first served (``ps``):
  a closed queueing network, each worker a customer of its own that spends ``E[X_i]`` at a
  delay station (its compute) and then queues for the link, a single FIFO server with the
  deterministic service time ``S``. :func:`link_rates` solves it by mean value analysis:

      R_c(N) = S (1 + Q(N - e_c) - U(N - e_c)) + (S/2) U(N - e_c)
      X_c(N) = N_c / (Z_c + R_c(N)),   Q(N) = sum_c X_c R_c,   U(N) = S sum_c X_c

  over classes c of workers with equal mean compute ``Z_c`` (``N_c`` of them), where a worker
  arriving at the link waits a full ``S`` for each update queued ahead of it and ``S/2`` (the
  mean residual of a deterministic service) for the one in service (the arrival theorem, with
  Reiser's residual-life correction for a non-exponential FIFO server). The recursion visits
  every population vector below ``N``: exact MVA when there are at most
  :data:`MAX_STATES` of them, else Bard–Schweitzer's approximation ``Q_j(N - e_c) = Q_j(N)``,
  ``Q_c(N - e_c) = (N_c - 1)/N_c Q_c(N)``, iterated to its fixed point. The link carries at most
  ``1/S`` updates a second: where the recursion gives more (the residual correction overshoots
  at saturation), every update waits the same ``R`` (a saturated FIFO queue treats everyone
  alike) with ``sum_c N_c/(Z_c + R) = 1/S``.

How close it comes to the simulation (``python benchmarks/async_link.py``; the figures are in
docs/architecture.md, "async"): close away from the knee of the offered load
``S sum_i 1/(E[X_i] + S)``, a few percent off near it, where MVA's residual-service term
misjudges how nearly periodic or noisy arrivals queue, and optimistic from lighter loads on
with few workers of unequal speed, whose arrivals collide more than it counts.

``mean_step_s`` is the mean time between updates. The distribution of that time (a
superposition of renewal processes) has no closed form: ``p95_step_s`` is NaN.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import optimize

from hetsim.analysis.orderstats import ComputeTime
from hetsim.analysis.prediction import Prediction

if TYPE_CHECKING:
    from hetsim.scenario.scenario import Scenario

MAX_STATES = 65_536  # population vectors exact MVA may visit (16 distinct workers); beyond, Bard–Schweitzer
SCHWEITZER_TOL = 1e-13  # the fixed point's tolerance on every class's residence, in services
SCHWEITZER_ITERATIONS = 100_000


def predict_async(scenario: Scenario, name: str, batches: tuple[int, ...]) -> Prediction:
    """The ``async`` prediction (see the module docstring); ``allreduce_s`` is the mean exchange
    of an update (on a shared link: the time queued plus the transfer)."""
    workers = scenario.workers
    wl = scenario.workload
    means = np.array([ComputeTime.of(w, b).mean() for w, b in zip(workers, batches)])
    link = scenario.network.update_link_s(wl.gradient_mb)
    if link is None or link <= 0:
        exchange = scenario.network.exchange_s(wl.gradient_mb)
        rates = 1.0 / (means + exchange)
    else:
        rates, residence = link_rates(means, link)
        exchange = float(rates @ residence / rates.sum())
    interval = 1.0 / float(rates.sum())
    updates = wl.total_steps * len(workers)
    util = tuple(float(u) for u in means * rates)
    return Prediction(
        policy=name,
        steps=updates,
        epochs=wl.epochs,
        mean_step_s=interval,
        p95_step_s=math.nan,
        throughput_sps=float(np.dot(batches, rates)),
        utilization=util,
        idle_fraction=0.0,
        final_batches=batches,
        steady_step_s=interval,
        allreduce_s=exchange,
        trajectory=(batches,) * wl.epochs,
    )


def link_rates(think_s: np.ndarray, service_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Each worker's update rate and its mean residence at the link (queued plus served), for
    workers computing ``think_s`` on average between updates and a FIFO link that serves each
    update in ``service_s`` (> 0): mean value analysis, see the module docstring."""
    think = np.asarray(think_s, dtype=float)
    z, index, counts = np.unique(think, return_inverse=True, return_counts=True)
    if math.prod(int(c) + 1 for c in counts) <= MAX_STATES:
        residence = _exact_mva(z, counts, service_s)
    else:
        residence = _schweitzer(z, counts, service_s)
    rates = 1.0 / (z + residence)
    if float(counts @ rates) * service_s > 1.0:  # beyond the link's capacity: saturated
        residence = np.full(len(z), _common_wait(z, counts, service_s))
        rates = 1.0 / (z + residence)
    return rates[index], residence[index]


def _common_wait(z: np.ndarray, counts: np.ndarray, service_s: float) -> float:
    """The residence ``R`` at a saturated link that every update shares (FIFO: each finds, on
    average, the same queue), filling the link: ``sum_c N_c / (Z_c + R) = 1/S``."""

    def excess(r: float) -> float:
        return service_s * float(counts @ (1.0 / (z + r))) - 1.0

    hi = float(counts.sum()) * service_s  # the whole population queued: the link is full
    if excess(hi) >= 0:  # the root itself (no worker thinks at all), to rounding
        return hi
    return float(optimize.brentq(excess, service_s, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def _residence(service_s: float, queued: Any, busy: Any) -> Any:
    """The time at the link of an update that finds ``queued`` updates there on average, one of
    them in service with probability ``busy``: a full service for each waiting one, half of one
    (the mean residual of a deterministic service) for the one in service, then its own."""
    return service_s * (1.0 + queued - busy) + 0.5 * service_s * busy


def _exact_mva(z: np.ndarray, counts: np.ndarray, service_s: float) -> np.ndarray:
    """Every class's residence at the full population, by the MVA recursion over every
    population vector (in lexicographic order, so ``N - e_c`` always comes first)."""
    shape = tuple(int(c) + 1 for c in counts)
    strides = [math.prod(shape[c + 1 :]) for c in range(len(shape))]
    queued, busy = np.zeros(math.prod(shape)), np.zeros(math.prod(shape))
    residence = np.zeros(len(z))
    for flat, pop in enumerate(np.ndindex(*shape)):
        if flat == 0:
            continue
        rates = np.zeros(len(z))
        for c, n_c in enumerate(pop):
            if n_c:
                prev = flat - strides[c]
                residence[c] = _residence(service_s, queued[prev], busy[prev])
                rates[c] = n_c / (z[c] + residence[c])
        queued[flat] = float(rates @ residence)
        busy[flat] = service_s * float(rates.sum())
    return residence


def _schweitzer(z: np.ndarray, counts: np.ndarray, service_s: float) -> np.ndarray:
    """Every class's residence by Bard–Schweitzer: an update of class c finds the queue of the
    full population less its own share, ``Q - Q_c/N_c`` (the link busy likewise, ``U -
    U_c/N_c``); iterated, damped, to the fixed point."""
    residence = np.full(len(z), service_s)
    for _ in range(SCHWEITZER_ITERATIONS):
        rates = counts / (z + residence)
        queue, busy = rates * residence, service_s * rates
        new = _residence(service_s, queue.sum() - queue / counts, busy.sum() - busy / counts)
        if float(np.max(np.abs(new - residence))) <= SCHWEITZER_TOL * service_s:
            return new
        residence = 0.5 * (residence + new)
    return residence
