"""Turning shares or costs into integer local batches that sum exactly to the global batch.

Two pure functions every policy builds on:

* :func:`split_by_shares`: continuous shares -> integers, capped, by largest remainder
  (the reference code's ``floor(p_i * B)`` lost samples; this never does).
* :func:`water_fill`: the min-max split for affine expected times ``a_i + c_i * b_i``
  (``b_i = 0`` costs nothing: the worker sits out), with caps, and the integer rounding
  that keeps the sum and minimises the max.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from hetsim.core.errors import ConfigError

Numbers = Sequence[float] | np.ndarray  # per-worker values: a list or a NumPy row


def _check_feasible(total: int, caps: Numbers) -> None:
    if isinstance(caps, np.ndarray) and caps.size and caps.max() == math.inf and caps.min() > -math.inf:
        return  # an uncapped worker and no NaN: the sum is inf in any order (Python's sum is slow)
    if sum(caps) < total:
        raise ValueError(f"max_batch caps sum to {sum(caps):g} < global batch {total}")


def split_by_shares(shares: Numbers, total: int, caps: Numbers | None = None) -> tuple[int, ...]:
    """Integers proportional to ``shares``, within ``caps``, summing to ``total``.

    Shares of capped workers are redistributed to the others in proportion to their shares;
    the remaining samples go to the largest fractional parts (ties to the lower index). A share
    below zero counts as zero, and shares that are all zero split evenly; a share of nan or
    infinity, or a ``total`` below zero, is refused (ConfigError on ``policy``: a policy's
    estimate gone wrong, which would otherwise become a split of garbage).
    """
    n = len(shares)
    caps_arr = np.full(n, np.inf) if caps is None else np.asarray(caps, dtype=float)
    raw = np.asarray(shares, dtype=float)
    bad = np.flatnonzero(~np.isfinite(raw))
    if bad.size:
        raise ConfigError(
            "policy", f"split_by_shares: share {bad[0]} is {float(raw[bad[0]])!r}: a share must be finite"
        )
    if total < 0:
        raise ConfigError("policy", f"split_by_shares: a total of {total}: it must be >= 0")
    _check_feasible(total, caps_arr)
    w = np.maximum(raw, 0.0)
    if w.sum() <= 0:
        w = np.ones(n)
    x = np.zeros(n)
    free = np.ones(n, dtype=bool)
    remaining = float(total)
    while True:
        weight = w[free].sum()
        if weight <= 0:  # only zero-share workers have room left: spread evenly over them
            w = np.where(free, 1.0, w)
            weight = w[free].sum()
        x[free] = remaining * w[free] / weight
        over = free & (x > caps_arr)
        if not over.any():
            break
        x[over] = caps_arr[over]
        free &= ~over
        remaining = total - x[~free].sum()
    base = np.minimum(np.floor(x + 1e-9), caps_arr).astype(np.int64)
    short = total - int(base.sum())
    frac = np.where(base < caps_arr, x - base, -np.inf)
    for i in np.argsort(-frac, kind="stable")[:short]:
        base[i] += 1
    return tuple(int(b) for b in base)


def balanced_time(fixed_s: Numbers, per_sample_s: Numbers, total: float, caps: Numbers) -> float:
    """The smallest T with sum_i b_i(T) = total, b_i(T) = clip((T - a_i)/c_i, 0, cap_i).

    The sum is piecewise linear and non-decreasing in T; it is solved exactly on the segment
    between the breakpoints (each a_i, and a_i + c_i * cap_i) that brackets ``total``.
    """
    a = np.asarray(fixed_s, dtype=float)
    c = np.asarray(per_sample_s, dtype=float)
    return _balanced_time(a, c, total, np.asarray(caps, dtype=float))


def _balanced_time(a: np.ndarray, c: np.ndarray, total: float, cap: np.ndarray, checked: bool = False) -> float:
    """:func:`balanced_time` of float arrays (``checked``: the caps are known to hold the total)."""
    if not checked:
        _check_feasible(int(total), cap)
    full = a + c * cap  # computed once, so that at these breakpoints a worker is exactly full

    def filled(t: float) -> float:
        return float(np.where(t >= full, cap, np.minimum(np.maximum((t - a) / c, 0.0), cap)).sum())

    points = np.unique(np.concatenate([a, full[np.isfinite(cap)]]))
    first, last = 1, len(points)  # bisect for the first breakpoint after points[0] that holds total
    while first < last:  # (filled is non-decreasing: O(log n) evaluations, each O(n))
        mid = (first + last) // 2
        if filled(points[mid]) >= total:
            last = mid
        else:
            first = mid + 1
    if first < len(points):
        lo, hi = points[first - 1], points[first]
    else:
        lo = points[-1]
        hi = lo + (total - filled(lo)) * c.min() + 1.0  # past the last breakpoint: linear growth
        while filled(hi) < total:
            hi = lo + 2 * (hi - lo)
    f_lo, f_hi = filled(lo), filled(hi)
    return float(lo + (total - f_lo) * (hi - lo) / (f_hi - f_lo)) if f_hi > f_lo else float(hi)


def water_fill(fixed_s: Numbers, per_sample_s: Numbers, total: int, caps: Numbers | None = None) -> tuple[int, ...]:
    """Integer split minimising max_i (a_i + c_i b_i) over workers with b_i > 0.

    Start from the floors of the continuous water-filling solution and hand out the remaining
    samples to the smallest next finishing times. Because each worker's time is non-decreasing
    in its batch, this picks the ``total`` smallest of all per-sample finishing times
    ``a_i + c_i k``, which is the integer optimum of the max; ties go to the lower worker (as a
    heap of ``(time, worker)`` pairs would hand them out).
    """
    a, c = np.asarray(fixed_s, dtype=float), np.asarray(per_sample_s, dtype=float)
    cap = np.full(len(a), np.inf) if caps is None else np.asarray(caps, dtype=float)
    return tuple(water_fill_array(a, c, total, cap).tolist())


def water_fill_array(a: np.ndarray, c: np.ndarray, total: int, cap: np.ndarray, checked: bool = False) -> np.ndarray:
    """:func:`water_fill` of float arrays, as an int64 array (``checked``: the caller knows that
    the caps hold ``total``)."""
    t_star = _balanced_time(a, c, total, cap, checked)
    uncapped = bool(cap.min() == math.inf)  # every cap +inf: the minimum with it changes nothing
    with np.errstate(invalid="ignore"):
        fits = np.floor((t_star - a) / c + 1e-9)
        floors = np.where(t_star > a, fits if uncapped else np.minimum(fits, cap), 0.0)
    batches = floors.astype(np.int64)
    given = int(batches.sum())
    while given > total:  # floating error could overshoot by a sample: take it from the slowest
        busy = np.flatnonzero(batches > 0)
        batches[busy[int(np.argmax(a[busy] + c[busy] * batches[busy]))]] -= 1
        given -= 1
    if given < total:
        batches += _smallest_next(a, c, None if uncapped else cap, batches, total - given)
    return batches


def _smallest_next(a: np.ndarray, c: np.ndarray, cap: np.ndarray | None, batches: np.ndarray, rest: int) -> np.ndarray:
    """How many of the ``rest`` smallest next finishing times ``a_i + c_i (b_i + k)`` (k = 1, 2,
    ..., within the caps; None: +inf) each worker gets, ties to the lower worker. Only times up
    to the ``rest``-th smallest first extra can be among them, so just those are listed."""
    n = len(a)
    room: float | np.ndarray = np.inf
    open_ = np.arange(n)
    if cap is not None:
        space = cap - batches
        open_ = np.flatnonzero(space > 0)
        room = space if len(open_) == n else space[open_]
        if len(open_) < n:  # (else the same values as the open workers')
            a, c, batches = a[open_], c[open_], batches[open_]
    first = a + c * (batches + 1)
    limit = np.partition(first, rest - 1)[rest - 1] if rest <= len(first) else np.inf
    if math.isfinite(limit):
        with np.errstate(invalid="ignore"):
            extra = np.floor((limit - a) / c) - batches + 1
    else:
        extra = np.full(len(a), float(rest))
    np.maximum(extra, 1, out=extra)  # (np.clip, without its Python wrapper)
    count = np.minimum(extra, np.minimum(room, rest), out=extra).astype(np.int64)  # may list one too many
    if (count == 1).all():  # one extra each (the common case): the list is ``first`` itself
        return np.bincount(open_[_smallest(first, rest, limit)], minlength=n)
    who = np.repeat(np.arange(len(open_)), count)  # each open worker's k = 1..count in turn:
    base = batches + 1 - (np.cumsum(count) - count)  # b + k = base[who] + (position in the list)
    times = a[who] + c[who] * (base[who] + np.arange(len(who)))
    return np.bincount(open_[who[_smallest(times, rest)]], minlength=n)


def _smallest(values: np.ndarray, count: int, kth: float | None = None) -> np.ndarray:
    """Where the ``count`` smallest ``values`` are, ties to the lower position (the first
    ``count`` of a stable sort; ``kth``: the ``count``-th smallest value, when known)."""
    if count >= len(values):
        return np.arange(len(values))
    if kth is None:
        kth = np.partition(values, count - 1)[count - 1]
    if np.isnan(kth):  # NaN sorts last, but equals nothing: sort
        return np.argsort(values, kind="stable")[:count]
    below = values < kth  # fewer than count of them; the rest are the first ones equal to kth
    take = np.flatnonzero(values == kth)[: count - int(np.count_nonzero(below))]
    below[take] = True
    return below


def max_time(fixed_s: Numbers, per_sample_s: Numbers, batches: Numbers) -> float:
    """max over workers with samples of a_i + c_i b_i (the deterministic step's compute phase)."""
    b = np.asarray(batches, dtype=float)
    busy = b > 0
    times = np.asarray(fixed_s, dtype=float) + np.asarray(per_sample_s, dtype=float) * b
    return float(np.max(times, where=busy, initial=-np.inf)) if busy.any() else 0.0


def samples_by(fixed_s: np.ndarray, per_sample_s: np.ndarray, caps: np.ndarray, time_s: float | np.ndarray) -> Any:
    """The samples the workers can finish by ``time_s`` (one time, or one per row of costs), each
    ``floor((t - a_i) / c_i)`` within its cap, summed over the last axis (integers: exactly)."""
    at = np.asarray(time_s)[..., None] if np.ndim(time_s) else time_s
    with np.errstate(invalid="ignore", divide="ignore"):
        room = np.floor((at - fixed_s) / per_sample_s)
        np.clip(room, 0.0, caps, out=room)
    return room.sum(axis=-1)


def fits_within(fixed_s: np.ndarray, per_sample_s: np.ndarray, total: int, caps: np.ndarray, time_s: float) -> bool:
    """Whether some integer split of ``total`` within ``caps`` may be done by ``time_s``: O(n), no
    sort. False (sure up to the quotient's rounding; NaN gives True) lets a policy skip
    :func:`water_fill`, as no split is done by ``time_s``."""
    return not samples_by(fixed_s, per_sample_s, caps, time_s) < total


class Curve(Protocol):
    """A worker's expected compute time: non-decreasing ``expected_s(b)`` for ``b >= 1``, its
    continuous inverse ``batch_within(t)``, and ``affine()`` when it is ``fixed + per_sample * b``."""

    def expected_s(self, batch: Any) -> Any: ...

    def batch_within(self, time_s: float) -> float: ...

    def affine(self) -> tuple[float, float] | None: ...


def min_max_split(curves: Sequence[Curve], total: int, caps: Numbers) -> tuple[int, ...]:
    """The integer split minimising the largest expected time over workers with samples, within
    ``caps``, for any non-decreasing curves. Any split uses ``total`` of the values ``t_i(1) <=
    t_i(2) <= ...`` (a prefix per worker) and its max is the largest of them, so the ``total``
    smallest values (ties to the lower worker) are the optimum. Affine curves take
    :func:`water_fill`, the same optimum in closed form."""
    cap = np.asarray(caps, dtype=float)
    _check_feasible(total, cap)
    affine = [c.affine() for c in curves]
    if all(a is not None for a in affine):
        terms = [a for a in affine if a is not None]
        return water_fill([a for a, _ in terms], [c for _, c in terms], total, cap)
    limits = [int(min(c, total)) for c in cap]
    kinds, counts, kind_of = _distinct(curves, limits)
    lo, hi = 0.0, max(float(c.expected_s(float(k))) for c, k in kinds if k > 0)
    for _ in range(200):  # the largest time below the total-th smallest value, to float precision
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if sum(m * _count_within(c, k, mid) for (c, k), m in zip(kinds, counts)) >= total:
            hi = mid
        else:
            lo = mid
    within = [_count_within(c, k, lo) for c, k in kinds]
    batches = [within[j] for j in kind_of]  # every value <= lo is taken
    return _take_smallest(curves, limits, batches, total - sum(batches))


def _distinct(curves: Sequence[Curve], limits: Sequence[int]) -> tuple[list[tuple[Curve, int]], list[int], list[int]]:
    """The distinct (curve, limit) pairs (equal curves: one kind; an unhashable curve is its
    own), how many workers each has, and each worker's kind: a cluster of a thousand workers of
    a few kinds counts a few curves per bisection step, not a thousand (the same integers)."""
    index: dict[object, int] = {}
    kinds: list[tuple[Curve, int]] = []
    counts: list[int] = []
    kind_of = []
    for c, k in zip(curves, limits):
        j = index.setdefault(_kind(c, k), len(kinds))
        if j == len(kinds):
            kinds.append((c, k))
            counts.append(0)
        counts[j] += 1
        kind_of.append(j)
    return kinds, counts, kind_of


def _kind(curve: Curve, limit: int) -> object:
    try:
        hash(curve)
    except TypeError:
        return (id(curve), limit)
    return (curve, limit)


def _count_within(curve: Curve, limit: int, time_s: float) -> int:
    """How many of ``t(1) <= t(2) <= ... <= t(limit)`` are at most ``time_s`` (the inverse gives
    the count; two evaluations settle floating-point rounding at the edge)."""
    k = int(min(limit, math.floor(min(curve.batch_within(time_s), float(limit)) + 1e-9)))
    while k < limit and float(curve.expected_s(k + 1)) <= time_s:
        k += 1
    while k > 0 and float(curve.expected_s(k)) > time_s:
        k -= 1
    return k


def _take_smallest(curves: Sequence[Curve], limits: Sequence[int], batches: list[int], rest: int) -> tuple[int, ...]:
    """Hand out ``rest`` more samples, smallest next time first (ties to the lower worker); a
    worker takes at once every further sample of the same time (a flat stretch of its curve)."""
    heap = [(float(c.expected_s(b + 1)), i) for i, (c, b, k) in enumerate(zip(curves, batches, limits)) if b < k]
    heapq.heapify(heap)
    while rest > 0:
        value, i = heapq.heappop(heap)
        take = min(rest, _count_within(curves[i], limits[i], value) - batches[i])
        batches[i] += take
        rest -= take
        if batches[i] < limits[i]:
            heapq.heappush(heap, (float(curves[i].expected_s(batches[i] + 1)), i))
    return tuple(batches)


def slowest_expected_s(curves: Sequence[Curve], batches: Numbers) -> float:
    """max over workers with samples of their expected time (a deterministic step's compute phase)."""
    return max((float(c.expected_s(b)) for c, b in zip(curves, batches) if b > 0), default=0.0)


def balanced_split(curves: Sequence[Curve], total: float, caps: Numbers) -> np.ndarray:
    """The continuous split where every worker with samples has the same expected time (capped
    workers hold their cap): ``b_i(T) = min(cap_i, batch_within_i(T))`` at the smallest ``T``
    with ``sum_i b_i(T) >= total`` (closed form for affine curves, else bisection to 1e-12)."""
    cap = np.asarray(caps, dtype=float)
    affine = [c.affine() for c in curves]
    if all(a is not None for a in affine):
        fixed = np.array([a[0] for a in affine if a is not None])
        per = np.array([a[1] for a in affine if a is not None])
        t_star = balanced_time(fixed, per, total, cap)
        return np.minimum(np.maximum((t_star - fixed) / per, 0.0), cap)

    kinds, _, kind_of = _distinct(curves, [0] * len(curves))

    def filled(t: float) -> np.ndarray:
        return np.minimum(np.array([c.batch_within(t) for c, _ in kinds])[kind_of], cap)

    lo, hi = 0.0, max(float(c.expected_s(1.0)) for c in curves)
    while filled(hi).sum() < total:
        hi *= 2.0
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if filled(mid).sum() < total else (lo, mid)
    return filled(hi)
