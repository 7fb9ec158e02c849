"""Closed-form and numerical predictions of what the simulator measures, per policy.

:func:`predict` turns a scenario and a policy into the simulator's Summary fields in
expectation, using the order statistics of :mod:`hetsim.analysis.orderstats`. Which model applies is
asked of the policy's traits, never its name:

* ``closed_form = False`` (``adaptive``, any policy that does not declare one): no prediction,
  :class:`NoClosedForm` with the policy's ``no_closed_form_reason``;
* ``synchronous = False`` (``async``): the renewal rate ``sum_i 1/(E[X_i] + exchange)``, or
  where the network's workers share a link (``ps``), the closed queueing network of the
  workers and that link (:mod:`hetsim.analysis.analytic_async`);
* ``wait_for() < n`` (``backup``, ``ksync``): the k-th order statistic, and the expected gain of
  the gradients it keeps (:mod:`hetsim.analysis.analytic_first_k`);
* every other barrier policy: E[max] of the compute times of the split in force each epoch,
  where the splits are what the policy itself chooses when its own ``observe`` is fed expected
  times, one epoch at a time (a constant split for the static policies; for the DP rule its
  per-epoch trajectory). A policy that knows its fixed point (``fixed_point_shares``) also gets
  it and the epochs it takes to come within 1% of it.

Workers with slowdown episodes or failures make step times time-dependent: no closed form. A
shared noise group enters E[max] exactly, as one part (:func:`~hetsim.analysis.orderstats.barrier_parts`);
persistent noise leaves every step's distribution as it was (only CIs feel it: :mod:`hetsim.analysis.step_ci`); not
modelled: the first k of workers sharing a factor, re-splitting under persistent noise.

A barrier step ends at ``B + allreduce``, ``B`` the barrier (E[max] or the k-th order
statistic); with an overlapped all-reduce, at ``h(B)`` (:mod:`hetsim.analysis.analytic_buckets`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import optimize

from hetsim.analysis.analytic_async import predict_async
from hetsim.analysis.analytic_buckets import expected_end
from hetsim.analysis.analytic_first_k import predict_first_k
from hetsim.analysis.orderstats import (
    ComputeTime,
    MaxOf,
    TimeDistribution,
    barrier_parts,
    expected_max,
    max_cdf,
    past_each,
)
from hetsim.analysis.prediction import NoClosedForm, Prediction, learning_fields
from hetsim.model.efficiency import effective_batch
from hetsim.model.network import Buckets
from hetsim.model.partition import split_by_shares
from hetsim.model.workers import WorkerSpec, persistent_noise
from hetsim.policies import Policy, StepInfo, StepRecord
from hetsim.policies.base import check_wait_for

if TYPE_CHECKING:
    from hetsim.scenario.scenario import Scenario

CONVERGENCE_TOL = 0.01


@lru_cache(maxsize=4096)
def _barrier_stats(workers: tuple[WorkerSpec, ...], batches: tuple[int, ...]) -> tuple[float, tuple[float, ...]]:
    """E[max compute] and each worker's E[compute] for one split."""
    comps = barrier_parts(workers, batches)
    means = tuple(ComputeTime.of(w, b).mean() if b > 0 else 0.0 for w, b in zip(workers, batches))
    return expected_max(comps), means


def _check_closed_form(scenario: Scenario, policy: Policy) -> None:
    if not policy.closed_form:
        raise NoClosedForm(policy.name, policy.no_closed_form_reason)
    for i, w in enumerate(scenario.workers):
        if w.slowdown is not None and w.slowdown.slows:
            raise NoClosedForm(
                policy.name, f"worker {i} has slowdown episodes, which make the step times time-dependent"
            )
        if w.failure is not None:
            raise NoClosedForm(
                policy.name, f"worker {i} fails and is repaired, which makes the step times time-dependent"
            )
    if policy.resplits and persistent_noise(scenario.workers):
        raise NoClosedForm(policy.name, "noise persists: the split follows measured epoch means, which it makes wander")


def predict(scenario: Scenario, policy: Policy | None = None, *, params: Mapping[str, Any] | None = None) -> Prediction:
    """Expected Summary fields of ``policy`` on ``scenario``: a Policy object, or None for the
    scenario's own ``[policy]`` (its table's parameters, then ``params``), as :func:`simulate`
    takes them. Raises :class:`~hetsim.analysis.prediction.NoClosedForm`, with the reason, for a
    policy or a cluster the closed forms do not cover (the simulation does).

    The step time of a split ``b`` is ``E[max_{i: b_i > 0} X_i] + allreduce``. The policy is
    built and reset as a run would, and asked for its splits through its own ``partition`` and
    ``observe`` (see the module docstring for which model its traits select).
    """
    from hetsim.scenario.scenario import check_scenario  # the scenario layer imports nothing of analysis

    obj = check_scenario(scenario).make_policy(policy, params)
    _check_closed_form(scenario, obj)
    wl = scenario.workload
    obj.reset(scenario.n_workers, wl.global_batch, scenario.hints())
    first = tuple(obj.partition(StepInfo(0, 0, 0, wl.steps_per_epoch)))
    if not obj.synchronous:
        return predict_async(scenario, obj.name, first)
    need = check_wait_for(obj, obj.wait_for())
    if need < scenario.n_workers:
        return predict_first_k(scenario, obj, first, need)
    trajectory, shares = _iterate(obj, scenario.workers, wl.epochs)
    fixed = obj.fixed_point_shares()
    extra: dict[str, Any] = {}
    if fixed is not None:
        extra = {
            "fixed_point_shares": fixed,
            "fixed_point_batches": _split(fixed, wl.global_batch, scenario.workers),
            "epochs_to_1pct": _epochs_to_within(shares, fixed, CONVERGENCE_TOL),
        }
    return _summarize(scenario, obj, trajectory, extra)


def _split(shares: Sequence[float], total: int, workers: Sequence[WorkerSpec]) -> tuple[int, ...]:
    return split_by_shares(shares, total, [w.cap for w in workers])


def _iterate(
    policy: Policy, workers: Sequence[WorkerSpec], epochs: int
) -> tuple[tuple[tuple[int, ...], ...], list[np.ndarray]]:
    """Drive the policy's own per-epoch update with expected compute times: the split of every
    epoch, and the shares that produced it (one-step epochs, so every observe ends one)."""
    trajectory, shares = [], []
    for epoch in range(epochs):
        info = StepInfo(epoch, epoch, 0, 1)
        batches = tuple(policy.partition(info))
        trajectory.append(batches)
        shares.append(np.asarray(policy.shares(), dtype=float))
        times = tuple(ComputeTime.of(w, b).mean() if b > 0 else 0.0 for w, b in zip(workers, batches))
        policy.observe(StepRecord(info, batches, times, tuple(b > 0 for b in batches)))
    return tuple(trajectory), shares


def _epochs_to_within(shares: Sequence[np.ndarray], fixed: Sequence[float], tol: float) -> int | None:
    """The first epoch from which on every worker's share is within ``tol`` of its fixed-point
    share (absolute: ``tol = 0.01`` is 1% of the global batch; a relative test would never pass
    for small shares, which integer rounding keeps moving by a sample); None if never."""
    target = np.asarray(fixed)
    close = [bool(np.all(np.abs(s - target) <= tol)) for s in shares]
    for epoch in range(len(close)):
        if all(close[epoch:]):
            return epoch
    return None


def _summarize(
    scenario: Scenario, policy: Policy, trajectory: Sequence[tuple[int, ...]], extra: dict[str, Any]
) -> Prediction:
    workers = tuple(scenario.workers)
    wl = scenario.workload
    n = len(workers)
    comm = scenario.allreduce_s()
    splits: dict[tuple[int, ...], int] = {}
    for batches in trajectory:
        splits[batches] = splits.get(batches, 0) + 1
    weights = np.array(list(splits.values()), dtype=float) / len(trajectory)
    stats_ = [_barrier_stats(workers, b) for b in splits]
    barrier = np.array([s[0] for s in stats_])
    compute = np.array([s[1] for s in stats_])  # (splits, workers)
    mean_step = float(weights @ barrier) + comm
    mean_compute = weights @ compute
    idle = float(weights @ (n * barrier - compute.sum(axis=1)))
    steady = _barrier_stats(workers, tuple(trajectory[-1]))[0] + comm
    q95 = _mixture_quantile([barrier_parts(workers, b) for b in splits], weights, 0.95)
    p95 = q95 + comm
    buckets = scenario.buckets()
    if buckets is not None:  # the step ends at h(barrier): see the module docstring
        ends = np.array([_bucket_end(buckets, workers, b) for b in splits])
        mean_step, comm = float(weights @ ends), float(weights @ (ends - barrier))
        steady = _bucket_end(buckets, workers, tuple(trajectory[-1]))
        p95 = float(buckets.end_s(q95))
    util = tuple(float(u) for u in mean_compute / mean_step) if mean_step > 0 else (0.0,) * n
    step_s = dict(zip(splits, ends if buckets is not None else barrier + comm))
    extra.update(learning(scenario, policy, trajectory, step_s))
    return Prediction(
        policy=policy.name,
        steps=wl.total_steps,
        epochs=wl.epochs,
        mean_step_s=mean_step,
        p95_step_s=p95,
        throughput_sps=wl.global_batch / mean_step if mean_step > 0 else math.inf,
        utilization=util,
        idle_fraction=idle / (n * mean_step) if mean_step > 0 else 0.0,
        final_batches=tuple(int(b) for b in trajectory[-1]),
        steady_step_s=steady,
        allreduce_s=comm,
        trajectory=tuple(trajectory),
        **extra,
    )


def learning(
    scenario: Scenario, policy: Policy, trajectory: Sequence[tuple[int, ...]], step_s: Mapping[tuple[int, ...], float]
) -> dict[str, float | None]:
    """``progress`` and ``time_to_target_s`` of a barrier policy that waits for every worker:
    each epoch's ``steps_per_epoch`` steps at its split, each adding the gain of its effective
    batch (:mod:`hetsim.model.efficiency`, at the noise scale its progress has reached) and taking the
    split's expected step time; the target is met at the end of the first step whose progress
    reaches it (as the simulator counts)."""
    efficiency = scenario.workload.efficiency
    if efficiency is None:
        return {}
    weighted = policy.weighted_gradients  # the object's trait: a policy no registry lists has one too
    per_epoch = scenario.workload.steps_per_epoch
    batches = [effective_batch(b, [x > 0 for x in b], weighted) for b in trajectory]
    progress = efficiency.progress(np.repeat(batches, per_epoch))
    elapsed = np.cumsum(np.repeat([float(step_s[b]) for b in trajectory], per_epoch))
    return learning_fields(progress, elapsed, efficiency.target_steps)


def _mixture_quantile(groups: Sequence[Sequence[TimeDistribution]], weights: np.ndarray, q: float) -> float:
    """The q-quantile of the barrier time when a share ``weights[j]`` of the steps uses split j."""

    def cdf(t: float) -> float:
        return float(sum(w * float(max_cdf(g, t)) for g, w in zip(groups, weights)))

    dists = [d for g in groups for d in g]
    atoms = [a for a in (d.atoms() for d in dists) if a is not None]
    if len(atoms) == len(dists):
        points: np.ndarray = np.unique(np.concatenate(atoms))
        cum = np.array([cdf(t) for t in past_each(points)])
        return float(points[min(int(np.searchsorted(cum, q - 1e-12)), len(points) - 1)])
    hi = max(max(d.mean() for d in dists), 1e-12)
    while cdf(hi) < q:
        hi *= 2.0
    return float(optimize.brentq(lambda t: cdf(t) - q, 0.0, hi, xtol=1e-12 * hi))


@lru_cache(maxsize=4096)
def _bucket_end(buckets: Buckets, workers: tuple[WorkerSpec, ...], batches: tuple[int, ...]) -> float:
    """E[h(max compute)] for one split, h the step's end after its barrier with buckets."""
    return expected_end(buckets, MaxOf(barrier_parts(workers, batches)), _barrier_stats(workers, batches)[0])
