"""The expected end of a barrier step whose all-reduce overlaps the backward pass (the network's
``buckets_mb``), for :mod:`hetsim.analysis.analytic` and :mod:`hetsim.analysis.analytic_first_k`.

A barrier step ends at ``B + allreduce``, ``B`` the barrier (E[max] or the k-th order
statistic). With buckets it ends at ``h(B)`` instead, :meth:`hetsim.model.network.Buckets.end_s`:
every worker starts with the step, so bucket k of the waited-for workers is ready at
``B * (1 - backlog_k)``. ``h`` is increasing and piecewise linear, so ``E[h(B)] = h(0) + E[B] +
sum_j (slope_j - 1) int_{t_j}^{t_{j+1}} P(B > t) dt`` over its pieces (exact for discrete
times, quadrature otherwise) and its quantiles are ``h`` of B's.
"""

from __future__ import annotations

import numpy as np
from scipy import integrate

from hetsim.analysis.orderstats import MaxOf
from hetsim.model.network import Buckets


def expected_end(buckets: Buckets, barrier: MaxOf, mean_barrier: float) -> float:
    """E[h(B)] for the barrier B (``barrier``'s CDF, mean ``mean_barrier``), h = ``buckets.end_s``."""
    pieces = buckets.envelope()
    total = float(buckets.end_s(0.0)) + mean_barrier
    for (lo, slope), (hi, _) in zip(pieces, pieces[1:]):
        total += (slope - 1.0) * _survival_between(barrier, lo, hi)
    return total


def _survival_between(barrier: MaxOf, lo: float, hi: float) -> float:
    """int_lo^hi P(B > t) dt: exact between the atoms when every time is discrete, else quadrature."""
    atoms = [d.atoms() for d in barrier.dists]
    inner = [a[(a > lo) & (a < hi)] for a in atoms if a is not None]
    points = np.unique(np.concatenate([[lo, hi], *inner]))
    if all(a is not None for a in atoms):
        mids = 0.5 * (points[1:] + points[:-1])  # (a CDF evaluated at its own atom may round below it)
        return float(np.sum(np.diff(points) * (1.0 - np.asarray(barrier.cdf(mids), dtype=float))))
    survival = lambda t: 1.0 - float(barrier.cdf(np.asarray(t, dtype=float)))  # noqa: E731
    return float(sum(integrate.quad(survival, a, b, epsabs=1e-13, limit=200)[0] for a, b in zip(points, points[1:])))
