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

import numpy as np

Numbers = Sequence[float] | np.ndarray  # per-worker values: a list or a NumPy row


def _check_feasible(total: int, caps: Numbers) -> None:
    if sum(caps) < total:
        raise ValueError(f"max_batch caps sum to {sum(caps):g} < global batch {total}")


def split_by_shares(shares: Numbers, total: int, caps: Numbers | None = None) -> tuple[int, ...]:
    """Integers proportional to ``shares``, within ``caps``, summing to ``total``.

    Shares of capped workers are redistributed to the others in proportion to their shares;
    the remaining samples go to the largest fractional parts (ties to the lower index).
    """
    n = len(shares)
    caps_arr = np.full(n, np.inf) if caps is None else np.asarray(caps, dtype=float)
    _check_feasible(total, caps_arr)
    w = np.maximum(np.asarray(shares, dtype=float), 0.0)
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
    cap = np.asarray(caps, dtype=float)
    _check_feasible(int(total), cap)

    full = a + c * cap  # computed once, so that at these breakpoints a worker is exactly full

    def filled(t: float) -> float:
        return float(np.where(t >= full, cap, np.minimum(np.maximum((t - a) / c, 0.0), cap)).sum())

    points = np.unique(np.concatenate([a, full[np.isfinite(cap)]]))
    lo = points[0]
    for hi in points[1:]:
        if filled(hi) >= total:
            break
        lo = hi
    else:
        hi = lo + (total - filled(lo)) * c.min() + 1.0  # past the last breakpoint: linear growth
        while filled(hi) < total:
            hi = lo + 2 * (hi - lo)
    f_lo, f_hi = filled(lo), filled(hi)
    return float(lo + (total - f_lo) * (hi - lo) / (f_hi - f_lo)) if f_hi > f_lo else float(hi)


def water_fill(fixed_s: Numbers, per_sample_s: Numbers, total: int, caps: Numbers | None = None) -> tuple[int, ...]:
    """Integer split minimising max_i (a_i + c_i b_i) over workers with b_i > 0.

    Start from the floors of the continuous water-filling solution and hand out the remaining
    samples one at a time to the worker whose time after taking it is smallest. Because each
    worker's time is non-decreasing in its batch, this picks the ``total`` smallest of all
    per-sample finishing times, which is the integer optimum of the max.
    """
    n = len(fixed_s)
    cap = [math.inf] * n if caps is None else [float(x) for x in caps]
    t_star = balanced_time(fixed_s, per_sample_s, total, cap)
    a, c = list(map(float, fixed_s)), list(map(float, per_sample_s))
    batches = [0] * n
    for i in range(n):
        if t_star > a[i]:
            batches[i] = int(min(math.floor((t_star - a[i]) / c[i] + 1e-9), cap[i]))
    # Floating error could overshoot by a sample; take the excess back from the slowest.
    while sum(batches) > total:
        i = max((i for i in range(n) if batches[i] > 0), key=lambda i: a[i] + c[i] * batches[i])
        batches[i] -= 1
    heap = [(a[i] + c[i] * (batches[i] + 1), i) for i in range(n) if batches[i] < cap[i]]
    heapq.heapify(heap)
    for _ in range(total - sum(batches)):
        _, i = heapq.heappop(heap)
        batches[i] += 1
        if batches[i] < cap[i]:
            heapq.heappush(heap, (a[i] + c[i] * (batches[i] + 1), i))
    return tuple(batches)


def max_time(fixed_s: Numbers, per_sample_s: Numbers, batches: Numbers) -> float:
    """max over workers with samples of a_i + c_i b_i (the deterministic step's compute phase)."""
    return max((a + c * b for a, c, b in zip(fixed_s, per_sample_s, batches) if b > 0), default=0.0)
