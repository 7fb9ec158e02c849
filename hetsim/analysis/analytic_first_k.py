"""The ``backup`` / ``K-sync`` prediction: a barrier that waits for the first k of n gradients.

The step ends at the k-th order statistic ``X_(k)`` of the working workers' compute times (a
worker without samples is never one of the k, and with fewer than k working the step waits for
all of them, as the engines do); worker i computes for ``min(X_i, X_(k))`` (cancelled after) and
its samples count when it is among the first k, a tie going to the lower index. The inclusion
probability, ``P(fewer than k others are ahead of i)``, is a Stieltjes sum over the cells of a
fine grid holding every atom: in the cell ending at ``t`` a lower-indexed worker is ahead when
it has finished by ``t``, a higher-indexed one when it finished before (its CDF at the cell's
middle), and the count of those ahead comes from their product polynomial (:func:`_counts`).
Everything else is an integral of products of CDFs.

With ``[workload.efficiency]`` a step advances training by the gain of the gradients it keeps
(:mod:`hetsim.model.efficiency`): their effective batch, the kept workers' samples (combined as the
policy's ``weighted_gradients`` says, as the simulator's summaries do), depends on which workers
were first. It depends only on how many kept workers have each distinct batch size (the equal
split has one size, or two when the batch does not divide; caps add more), so
:func:`kept_batches` gives the law of that count vector: the probability that a set ``A`` of k
workers is the first is ``P(max_A X < min_{not A} X)``, summed over the grid's cells as
``[prod_A F(t_{j+1}) - prod_A F(t_j)] prod_{not A} (1 - F(mid_j))`` (the last of A finishes in
the cell, no other before it), and the sum over the sets with a given count vector is a
coefficient of ``prod_i (1 - F_i(mid) + F_i(t) z_{size(i)})``, a product of one polynomial per
size. With one size the effective batch is certain. The expected progress then adds each step's
expected gain, at the noise scale of the expected progress before it (exact in expectation for a
constant noise scale, and whenever the effective batch is certain); a step takes the expected
step time, so the target is reached at the end of the first step whose expected progress meets
it. Ties in which workers are first (discrete times only) are not modelled there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hetsim.analysis.analytic_buckets import expected_end
from hetsim.analysis.orderstats import (
    TAIL_Q,
    ComputeTime,
    KthOf,
    MaxOf,
    TimeDistribution,
    expected_kth,
    integrate_survival,
    kth_cdf,
    quantile,
)
from hetsim.analysis.prediction import NoClosedForm, Prediction, learning_fields
from hetsim.model.efficiency import Efficiency, effective_batch
from hetsim.policies import Policy

if TYPE_CHECKING:
    from hetsim.scenario.scenario import Scenario

GRID_POINTS = 20_001
ATOM = 1e-12  # relative: a time within this of a grid point is at it (a CDF at its own atom may round below)


def _fewer_than(dists: Sequence[TimeDistribution], k: int, t: Any) -> Any:
    """P(fewer than k of ``dists`` have finished by t)."""
    if k > len(dists):
        return np.ones_like(np.asarray(t, dtype=float))
    return 1.0 - kth_cdf(dists, k, t).reshape(np.shape(t))


def _busy_survival(dist: TimeDistribution, others: Sequence[TimeDistribution], k: int) -> Callable[[Any], Any]:
    """P(a worker is still computing at t): it has not finished, and fewer than k others have."""
    return lambda t: (1.0 - dist.cdf(t)) * _fewer_than(others, k, t)


def _grid(dists: Sequence[TimeDistribution]) -> np.ndarray:
    """Points from 0 to where every time has finished but for ``TAIL_Q``, with every atom."""
    atoms = [a for a in (d.atoms() for d in dists) if a is not None]
    grid = np.linspace(0.0, quantile(MaxOf(dists), 1.0 - TAIL_Q), GRID_POINTS)
    return np.unique(np.concatenate([grid, *atoms])) if atoms else grid


def _counts(first: np.ndarray, later: np.ndarray, degree: int) -> np.ndarray:
    """Coefficients of ``z^0 .. z^degree`` of ``prod_i (later_i + first_i z)`` per grid cell
    (rows: workers; columns: cells)."""
    out = np.zeros((degree + 1, first.shape[1]))
    out[0] = 1.0
    for f, g in zip(first, later):
        out[1:] = out[1:] * g + out[:-1] * f
        out[0] *= g
    return out


def _cdf(d: TimeDistribution, t: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(d.cdf(t), dtype=float), 0.0, 1.0)


def _ahead_fewer_than(at_mid: Sequence[np.ndarray], at_end: Sequence[np.ndarray], i: int, k: int) -> np.ndarray:
    """Per cell of the grid (cell j ends at its point j + 1, an atom there inside it): P(fewer than
    k of the workers other than ``i`` are ahead of it). Another worker is ahead if it finished by
    the cell's middle (``at_mid``: each worker's CDF there), or, with a lower index, at an atom
    that ends the cell (``at_end``: each one's mass at the cell's end; the tie goes to it); for a
    continuous time the middle is exact to second order in the cell."""
    rows = [mid + end if j < i else mid for j, (mid, end) in enumerate(zip(at_mid, at_end)) if j != i]
    ahead_all = np.array(rows).reshape(-1, at_mid[0].size)
    return np.asarray(_counts(ahead_all, 1.0 - ahead_all, k - 1).sum(axis=0))


def kept_batches(dists: Sequence[TimeDistribution], batches: Sequence[int], keep: int,
                 weighted: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The effective batches a step's first ``keep`` gradients can have and their probabilities
    (``dists``: the working workers' times, ``batches`` their batches)."""
    positive = list(range(len(batches)))
    sizes = sorted({int(batches[i]) for i in positive})
    groups = [[i for i in positive if batches[i] == s] for s in sizes]
    if len(groups) == 1:
        counts: list[tuple[int, ...]] = [(keep,)]
        probs = np.ones(1)
    else:
        t = _grid(dists)
        mids = 0.5 * (t[1:] + t[:-1])
        cdf = lambda i, x: np.clip(np.asarray(dists[i].cdf(x), dtype=float), 0.0, 1.0)  # noqa: E731
        polys = []
        for g in groups:
            later = np.array([1.0 - cdf(i, mids) for i in g])
            degree = min(len(g), keep)
            polys.append((_counts(np.array([cdf(i, t[1:]) for i in g]), later, degree),
                          _counts(np.array([cdf(i, t[:-1]) for i in g]), later, degree)))  # fmt: skip
        ranges = [range(min(len(g), keep) + 1) for g in groups]
        counts = [c for c in itertools.product(*ranges) if sum(c) == keep]
        probs = np.array([
            float(np.sum(np.prod([p[0][c] for p, c in zip(polys, cs)], axis=0)
                         - np.prod([p[1][c] for p, c in zip(polys, cs)], axis=0)))
            for cs in counts
        ])  # fmt: skip
        probs = np.maximum(probs, 0.0) / np.maximum(probs, 0.0).sum()  # the far tail, left off the grid
    values = [effective_batch([s for s, c in zip(sizes, cs) for _ in range(c)], [True] * keep, weighted)
              for cs in counts]  # fmt: skip
    return np.array(values), probs


def expected_progress(efficiency: Efficiency, values: np.ndarray, probs: np.ndarray, steps: int) -> np.ndarray:
    """The expected progress after each of ``steps`` steps whose effective batch is ``values``
    with ``probs``: each step's expected gain at the noise scale of the progress before it."""
    if values.size == 1:
        return efficiency.progress(np.full(steps, float(values[0])))
    if not efficiency.schedule:
        return np.cumsum(np.full(steps, float(probs @ efficiency.gain(values))))
    out, done = np.empty(steps), 0.0
    for step in range(steps):
        done += float(probs @ efficiency.gain(values, efficiency.noise_at(done)))
        out[step] = done
    return out


def predict_first_k(scenario: Scenario, policy: Policy, batches: tuple[int, ...], k: int) -> Prediction:
    """``policy`` (backup, K-sync) on ``scenario``, every step at ``batches``, waiting for ``k`` gradients."""
    workers = scenario.workers
    if any(b > 0 and w.shares_noise for w, b in zip(workers, batches)):
        raise NoClosedForm(policy.name, "workers share a noise factor: the k-th of dependent times is not modelled")
    wl = scenario.workload
    n = len(workers)
    comm = scenario.allreduce_s()
    working = [i for i, b in enumerate(batches) if b > 0]
    dists: list[TimeDistribution] = [ComputeTime.of(workers[i], batches[i]) for i in working]
    k = min(k, len(dists))
    barrier = expected_kth(dists, k)
    busy, included = np.zeros(n), np.zeros(n)
    grid = np.concatenate([[0.0], _grid(dists)])
    # each worker's CDF on the grid once (a convolved time's costs thousands of evaluations a point)
    up = [_cdf(d, grid * (1 + ATOM)) for d in dists]
    at_mid = [_cdf(d, 0.5 * (grid[1:] + grid[:-1])) for d in dists]
    at_end = [u[1:] - _cdf(d, grid[1:] * (1 - ATOM)) for d, u in zip(dists, up)]
    for at, (i, d) in enumerate(zip(working, dists)):
        others = dists[:at] + dists[at + 1 :]
        busy[i] = integrate_survival(_busy_survival(d, others, k), dists)
        included[i] = float(np.sum(np.diff(up[at]) * _ahead_fewer_than(at_mid, at_end, at, k)))
    mean_step = barrier + comm
    q95 = quantile(KthOf(dists, k), 0.95)
    p95 = q95 + comm
    buckets = scenario.buckets()
    if buckets is not None:  # the step ends at h(k-th finish): see hetsim.analysis.analytic_buckets
        mean_step = expected_end(buckets, KthOf(dists, k), barrier)
        comm, p95 = mean_step - barrier, float(buckets.end_s(q95))
    learned: dict[str, Any] = {}
    efficiency = wl.efficiency
    if efficiency is not None:
        kept = [batches[i] for i in working]
        values, probs = kept_batches(dists, kept, k, policy.weighted_gradients)
        progress = expected_progress(efficiency, values, probs, wl.total_steps)
        learned = learning_fields(progress, mean_step * np.arange(1, wl.total_steps + 1), efficiency.target_steps)
    return Prediction(
        policy=policy.name,
        steps=wl.total_steps,
        epochs=wl.epochs,
        mean_step_s=mean_step,
        p95_step_s=p95,
        throughput_sps=float(np.dot(batches, included)) / mean_step,
        utilization=tuple(float(b) / mean_step for b in busy),
        idle_fraction=float(n * barrier - sum(busy)) / (n * mean_step),
        final_batches=batches,
        steady_step_s=mean_step,
        allreduce_s=comm,
        trajectory=(batches,) * wl.epochs,
        **learned,
    )
