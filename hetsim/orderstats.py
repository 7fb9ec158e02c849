"""Order statistics of independent, non-identical random times: the maths under
:mod:`hetsim.analytic`'s predictions, with no knowledge of policies.

* :class:`ComputeTime`, the distribution of one worker's step time
  ``cost(b) * noise + delay``: an exact shift when the delay is constant,
  a numerical convolution (Stieltjes sum over the noise's CDF) when both are random;
* :func:`expected_max` (``int_0^inf 1 - prod_i F_i(t) dt``), :func:`expected_kth` (the k-th
  smallest, through the Poisson-binomial count of finished workers) and the exact
  inclusion-exclusion formula for exponentials, :func:`expected_max_exponential`, as a
  cross-check; :func:`quantile` of any of them.

A time distribution here is anything with ``mean``, ``var``, ``cdf`` and ``atoms`` (the support
of a purely discrete one, else None): every :class:`~hetsim.distributions.Distribution` is one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any, Protocol

import numpy as np
from scipy import integrate, optimize

from hetsim.workers import WorkerSpec

CONV_GRID = 4001
TAIL_Q = 1e-13


class TimeDistribution(Protocol):
    def mean(self) -> float: ...

    def var(self) -> float: ...

    def cdf(self, t: Any) -> Any: ...

    def atoms(self) -> np.ndarray | None: ...


def quantile(dist: TimeDistribution, q: float) -> float:
    """The smallest t >= 0 with F(t) >= q, by bracketing and root finding on the CDF."""
    atoms = dist.atoms()
    if atoms is not None:
        cum = np.asarray(dist.cdf(atoms), dtype=float)
        return float(atoms[min(int(np.searchsorted(cum, q - 1e-15)), len(atoms) - 1)])
    if float(dist.cdf(0.0)) >= q:
        return 0.0
    hi = max(dist.mean(), 1e-12)
    while float(dist.cdf(hi)) < q:
        hi *= 2.0
    return float(optimize.brentq(lambda t: float(dist.cdf(t)) - q, 0.0, hi, xtol=1e-15 + 1e-13 * hi))


class ComputeTime:
    """One worker's compute time for a positive local batch: ``scale * noise + delay`` with
    ``scale = cost(b)``, the worker's cost model at ``b``.

    Exact when either part is constant (a shift or a scaling of the other's CDF) or discrete
    (a finite mixture of those). When both are continuous the CDF is the convolution
    ``F(t) = E_N[F_D(t - scale N)]``, computed as a midpoint Stieltjes sum over a fine grid of
    the noise's CDF, from its 1e-13 quantile up to where ``t - scale N`` reaches the delay's
    lowest value (so the kink there is a grid end; error about 1e-8 in the CDF, far below any
    simulation's sampling error).
    """

    def __init__(self, scale_s: float, noise: TimeDistribution, delay: TimeDistribution) -> None:
        if scale_s < 0:
            raise ValueError(f"scale must be >= 0, got {scale_s}")
        self.scale_s, self.noise, self.delay = float(scale_s), noise, delay
        self._noise_atoms = noise.atoms() if scale_s > 0 else np.array([0.0])
        self._delay_atoms = delay.atoms()
        self._grid: tuple[np.ndarray, np.ndarray] | None = None  # noise range, delay's lowest value

    @classmethod
    def of(cls, spec: WorkerSpec, local_batch: float) -> ComputeTime:
        return cls(float(spec.cost.time_s(local_batch)), spec.noise, spec.delay)

    def mean(self) -> float:
        return self.scale_s * self.noise.mean() + self.delay.mean()

    def var(self) -> float:
        return self.scale_s**2 * self.noise.var() + self.delay.var()

    def atoms(self) -> np.ndarray | None:
        if self._noise_atoms is None or self._delay_atoms is None:
            return None
        return np.unique(np.add.outer(self.scale_s * self._noise_atoms, self._delay_atoms).ravel())

    def cdf(self, t: Any) -> Any:
        t = np.asarray(t, dtype=float)
        if self._noise_atoms is not None and self._noise_atoms.size == 1:
            return self.delay.cdf(t - self.scale_s * self._noise_atoms[0])
        if self._delay_atoms is not None and self._delay_atoms.size == 1:
            return self.noise.cdf((t - self._delay_atoms[0]) / self.scale_s)
        if self._noise_atoms is not None:
            weights = np.diff(np.concatenate([[0.0], np.asarray(self.noise.cdf(self._noise_atoms), dtype=float)]))
            return np.tensordot(self.delay.cdf(t[..., None] - self.scale_s * self._noise_atoms), weights, axes=1)
        if self._delay_atoms is not None:
            weights = np.diff(np.concatenate([[0.0], np.asarray(self.delay.cdf(self._delay_atoms), dtype=float)]))
            return np.tensordot(self.noise.cdf((t[..., None] - self._delay_atoms) / self.scale_s), weights, axes=1)
        return self._convolve(t)

    def _convolve(self, t: np.ndarray) -> np.ndarray:
        """E_N[F_D(t - scale N)] over the noise values with t - scale N above the delay's lowest
        value (beyond, F_D is 0): a midpoint Stieltjes sum on a grid ending at that kink."""
        if self._grid is None:
            self._grid = (
                np.array([quantile(self.noise, TAIL_Q), quantile(self.noise, 1.0 - TAIL_Q)]),
                np.array([quantile(self.delay, TAIL_Q)]),
            )
        (lo, hi), (delay_lo,) = self._grid
        top = np.clip((t - delay_lo) / self.scale_s, lo, hi)[..., None]
        edges = lo + (top - lo) * np.linspace(0.0, 1.0, CONV_GRID)
        cum = np.asarray(self.noise.cdf(edges), dtype=float)
        cum[..., 0] = 0.0  # the tails beyond the grid go to its end cells, so the mass is 1
        cum[..., -1] = np.where(top[..., 0] >= hi, 1.0, cum[..., -1])
        mids = 0.5 * (edges[..., 1:] + edges[..., :-1])
        return np.sum(self.delay.cdf(t[..., None] - self.scale_s * mids) * np.diff(cum, axis=-1), axis=-1)


# ----------------------------------------------------------------------------- order statistics


def integrate_survival(survival: Callable[[np.ndarray], np.ndarray], dists: Sequence[TimeDistribution]) -> float:
    """int_0^inf survival(t) dt for a survival function built from ``dists``' CDFs."""
    atoms = [d.atoms() for d in dists]
    if all(a is not None for a in atoms):  # piecewise constant: an exact sum
        points = np.unique(np.concatenate([[0.0], *atoms]))
        return float(np.sum(np.diff(points) * survival(points[:-1])))
    hi = max(d.mean() + 12.0 * math.sqrt(max(d.var(), 0.0)) for d in dists)
    hi = max(hi, 1e-12)
    jumps = np.unique(np.concatenate([a for a in atoms if a is not None] or [np.empty(0)]))
    jumps = jumps[(jumps > 0) & (jumps < hi)]
    scalar = lambda t: float(survival(np.asarray(t, dtype=float)))  # noqa: E731
    opts: dict[str, Any] = {"epsabs": 1e-13 * hi, "epsrel": 1e-9, "limit": 1000}
    if jumps.size:
        body = 0.0
        for a, b in zip(np.concatenate([[0.0], jumps]), np.concatenate([jumps, [hi]])):
            body += integrate.quad(scalar, a, b, **opts)[0]
    else:
        body = integrate.quad(scalar, 0.0, hi, **opts)[0]
    tail = integrate.quad(scalar, hi, np.inf, epsabs=1e-10 * hi, epsrel=1e-8, limit=200)[0]
    return float(body + tail)


def _cdf_matrix(dists: Sequence[TimeDistribution], t: np.ndarray) -> np.ndarray:
    return np.stack([np.clip(np.asarray(d.cdf(t), dtype=float), 0.0, 1.0) for d in dists])


def max_cdf(dists: Sequence[TimeDistribution], t: Any) -> Any:
    """P(max_i X_i <= t) = prod_i F_i(t) for independent X_i."""
    return np.prod(_cdf_matrix(dists, np.asarray(t, dtype=float)), axis=0)


def expected_max(dists: Sequence[TimeDistribution]) -> float:
    """E[max_i X_i] for independent non-negative times: int_0^inf (1 - prod_i F_i(t)) dt."""
    if not dists:
        return 0.0
    return integrate_survival(lambda t: 1.0 - max_cdf(dists, t), dists)


def expected_max_exponential(rates: Sequence[float]) -> float:
    """E[max] of independent exponentials with the given rates, by inclusion-exclusion:
    sum over non-empty subsets S of (-1)^(|S|+1) / sum_{i in S} rate_i. Exact; 2^n terms."""
    rates = [float(r) for r in rates]
    if any(r <= 0 for r in rates):
        raise ValueError("rates must be positive")
    if len(rates) > 20:
        raise ValueError(f"inclusion-exclusion over {len(rates)} rates needs 2^{len(rates)} terms; use expected_max")
    return math.fsum(
        (-1) ** (size + 1) / math.fsum(subset)
        for size in range(1, len(rates) + 1)
        for subset in combinations(rates, size)
    )


def kth_cdf(dists: Sequence[TimeDistribution], k: int, t: Any) -> Any:
    """P(X_(k) <= t): at least k of the independent X_i have finished by t (Poisson-binomial)."""
    t = np.atleast_1d(np.asarray(t, dtype=float))
    p = _cdf_matrix(dists, t)  # (n, T)
    pmf = np.zeros((len(dists) + 1, t.size))
    pmf[0] = 1.0
    for row in p:  # the count of finished workers, one worker at a time
        pmf[1:] = pmf[1:] * (1.0 - row) + pmf[:-1] * row
        pmf[0] *= 1.0 - row
    return pmf[k:].sum(axis=0)


def expected_kth(dists: Sequence[TimeDistribution], k: int) -> float:
    """E[X_(k)], the k-th smallest (1-based) of independent, non-identical times:
    int_0^inf P(fewer than k finished by t) dt."""
    n = len(dists)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}, got {k}")
    return integrate_survival(lambda t: 1.0 - kth_cdf(dists, k, t).reshape(np.shape(t)), dists)


class MaxOf:
    """The distribution of max_i X_i (for quantiles)."""

    def __init__(self, dists: Sequence[TimeDistribution]) -> None:
        self.dists = list(dists)

    def mean(self) -> float:
        return max(d.mean() for d in self.dists)

    def var(self) -> float:
        return max(d.var() for d in self.dists)

    def cdf(self, t: Any) -> Any:
        return max_cdf(self.dists, t)

    def atoms(self) -> np.ndarray | None:
        return None


class KthOf(MaxOf):
    def __init__(self, dists: Sequence[TimeDistribution], k: int) -> None:
        super().__init__(dists)
        self.k = k

    def cdf(self, t: Any) -> Any:
        return kth_cdf(self.dists, self.k, t).reshape(np.shape(t))
