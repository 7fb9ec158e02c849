"""Order statistics of independent, non-identical random times: the maths under
:mod:`hetsim.analysis.analytic`'s predictions, with no knowledge of policies.

* :class:`ComputeTime`, the distribution of one worker's step time
  ``cost(b) * noise + delay``: an exact shift when the delay is constant,
  a numerical convolution (Stieltjes sum over the noise's CDF) when both are random;
* :class:`CommonFactorMax`, the max of workers' times that share a factor (a shared-noise
  group): independent given the factor, so its CDF is a one-dimensional integral over it,
  and groups stay independent of each other and of the other workers;
* :func:`expected_max` (``int_0^inf 1 - prod_i F_i(t) dt``), :func:`expected_kth` (the k-th
  smallest, through the Poisson-binomial count of finished workers) and the exact
  inclusion-exclusion formula for exponentials, :func:`expected_max_exponential`, as a
  cross-check; :func:`quantile` of any of them.

A time distribution here is anything with ``mean``, ``var``, ``cdf`` and ``atoms`` (the support
of a purely discrete one, else None): every :class:`~hetsim.model.distributions.Distribution` is one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any, Protocol

import numpy as np
from scipy import integrate, optimize, stats

from hetsim.analysis.convolution import ConvolvedCdf
from hetsim.model.distributions import Distribution
from hetsim.model.workers import WorkerSpec

TAIL_Q = 1e-13
FACTOR_CELLS = 512  # a continuous common factor as this many cells of equal probability
FACTOR_CELLS_CONVOLVED = 48  # ... when a member's time is itself a convolution (its CDF is costly)
CONV_CELLS = 256  # such a member's delay as this many cells of equal probability


class TimeDistribution(Protocol):
    def mean(self) -> float: ...

    def var(self) -> float: ...

    def cdf(self, t: Any) -> Any: ...

    def atoms(self) -> np.ndarray | None: ...


def past_each(atoms: np.ndarray) -> np.ndarray:
    """A point past each of the sorted ``atoms`` and before the next (their middles; past the
    last, its double plus one), where a step CDF is its value at the atom: read at the atom
    itself, ``(t - delay) / scale`` can land an ulp below the noise's atom and miss its jump."""
    return np.append(0.5 * (atoms[1:] + atoms[:-1]), 2.0 * atoms[-1] + 1.0) if atoms.size else atoms


def quantile(dist: TimeDistribution, q: float) -> float:
    """The smallest t >= 0 with F(t) >= q, by bracketing and root finding on the CDF."""
    atoms = dist.atoms()
    if atoms is not None:
        cum = np.asarray(dist.cdf(past_each(atoms)), dtype=float)
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
    ``F(t) = E_N[F_D(t - scale N)]`` (:class:`~hetsim.analysis.convolution.ConvolvedCdf`).
    """

    def __init__(self, scale_s: float, noise: TimeDistribution, delay: TimeDistribution) -> None:
        if scale_s < 0:
            raise ValueError(f"scale must be >= 0, got {scale_s}")
        self.scale_s, self.noise, self.delay = float(scale_s), noise, delay
        self._noise_atoms = noise.atoms() if scale_s > 0 else np.array([0.0])
        self._delay_atoms = delay.atoms()
        self._convolved = ConvolvedCdf(self.scale_s, noise, delay, self._bounds)

    def _bounds(self) -> tuple[float, float, float]:
        """The convolution's noise range and the delay's lowest value (:mod:`hetsim.analysis.convolution`)."""
        return quantile(self.noise, TAIL_Q), quantile(self.noise, 1.0 - TAIL_Q), quantile(self.delay, TAIL_Q)

    @classmethod
    def of(cls, spec: WorkerSpec, local_batch: float) -> ComputeTime:
        """Worker ``spec``'s time at ``local_batch``: one object for every worker of the same
        time (interned), so that :func:`_cdf_matrix` evaluates the CDF of identical workers once."""
        key = (id(spec.cost), float(local_batch), id(spec.noise), id(spec.delay))
        found = _INTERNED.get(key)
        if found is None:
            if len(_INTERNED) >= MAX_INTERNED:
                _INTERNED.clear()
            found = _INTERNED[key] = (cls(float(spec.cost.time_s(local_batch)), spec.noise, spec.delay), spec.cost)
        return found[0]

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
        return self._convolved(t)


# ComputeTime.of's objects by (cost, batch, noise, delay), the models by identity (a group's
# workers share theirs; hashing a plug-in's parameters cost more than the analysis): each entry
# holds the models it names, so no id in a key is reused while the entry lives.
_INTERNED: dict[tuple[int, float, int, int], tuple[ComputeTime, object]] = {}
MAX_INTERNED = 1 << 16


# ----------------------------------------------------------------------------- a shared factor


def factor_nodes(factor: Distribution, cells: int = FACTOR_CELLS) -> tuple[np.ndarray, np.ndarray]:
    """A factor S as values and weights (summing to 1) for E[g(S)] = sum_j w_j g(s_j): its atoms
    when it is discrete (exact), else ``cells`` cells of equal probability, each at the mean of
    S within it (closed form for a lognormal; for another, the cell's middle quantile, all
    scaled to keep E[S]), so E[S] is kept and E[g(S)] is exact for g linear within cells."""
    atoms = factor.atoms()
    if atoms is not None:
        return atoms.astype(float), np.diff(np.concatenate([[0.0], np.asarray(factor.cdf(atoms), dtype=float)]))
    weights = np.full(cells, 1.0 / cells)
    sigma = factor.log_normal_sigma()
    if sigma is not None:  # E[S; a < Z < b] = Phi(b - sigma) - Phi(a - sigma), S = exp(sigma Z - sigma^2/2)
        edges = stats.norm.ppf(np.linspace(0.0, 1.0, cells + 1)) - sigma
        upper = edges[:-1] > 0  # in the upper tail, differences of survival functions keep their digits
        mass = np.where(upper, stats.norm.sf(edges[:-1]) - stats.norm.sf(edges[1:]),
                        stats.norm.cdf(edges[1:]) - stats.norm.cdf(edges[:-1]))  # fmt: skip
        return mass * cells, weights
    values = _quantiles(factor, (np.arange(cells) + 0.5) / cells)
    return values * (factor.mean() / values.mean()), weights


def _quantiles(dist: TimeDistribution, qs: np.ndarray) -> np.ndarray:
    """Quantiles of a continuous distribution, all at once by bisection on its CDF."""
    lo, hi = np.zeros_like(qs), np.full_like(qs, max(dist.mean(), 1e-12))
    while float(np.min(dist.cdf(hi))) < qs.max():
        hi *= 2.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        below = np.asarray(dist.cdf(mid), dtype=float) < qs
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 0.5 * (lo + hi)


class CommonFactorMax:
    """max_i (scale_i N_i S + D_i) over members that share the factor S and are independent
    given it (the delays are added, not scaled): ``F(t) = E_S[prod_i F_i(t | S)]``, one
    integral over S. A member whose time given s takes finitely many values (noise and delay
    discrete, or constant) has a step function of s for ``F_i(t | s)``: its product A(u), in
    u = F_S(s), is integrated exactly over every cell of :func:`factor_nodes`; the other members'
    product B is taken at each cell's value: ``F(t) = sum_j B(s_j) int_cell_j A(u) du`` (exact
    when every member is discrete, or the factor is). ``mean`` and ``var`` are the largest
    member's (bounds for integration, as :class:`MaxOf`'s)."""

    def __init__(self, members: Sequence[ComputeTime], factor: Distribution) -> None:
        self.members, self.factor = list(members), factor
        self.steps = [_atom_pairs(m) for m in members if m.atoms() is not None]
        self.smooth = [m for m in members if m.atoms() is None]
        both = any(m._noise_atoms is None and m._delay_atoms is None for m in self.smooth)
        self.values, self.weights = factor_nodes(factor, FACTOR_CELLS_CONVOLVED if both else FACTOR_CELLS)
        self.discrete = factor.atoms() is not None
        self.delays = {id(m): _quantiles(m.delay, (np.arange(CONV_CELLS) + 0.5) / CONV_CELLS) for m in self.smooth
                       if m._noise_atoms is None and m._delay_atoms is None}  # fmt: skip

    def mean(self) -> float:
        return max(m.scale_s * m.noise.mean() * self.factor.mean() + m.delay.mean() for m in self.members)

    def var(self) -> float:
        s2 = self.factor.var() + self.factor.mean() ** 2
        return max(m.scale_s**2 * ((m.noise.var() + m.noise.mean() ** 2) * s2 - m.noise.mean() ** 2) + m.delay.var()
                   for m in self.members)  # fmt: skip

    def atoms(self) -> np.ndarray | None:
        if not self.discrete or self.smooth:
            return None
        return np.unique(np.concatenate([(np.multiply.outer(self.values, a) + b).ravel() for a, b, _ in self.steps]))

    def cdf(self, t: Any) -> Any:
        t = np.asarray(t, dtype=float)
        tt = t[..., None]
        smooth = np.ones((*t.shape, len(self.values)))
        for m in self.smooth:
            smooth *= np.clip(self._smooth_cdf(m, tt), 0.0, 1.0)
        if self.discrete:  # A at the factor's atoms
            for slope, shift, mass in self.steps:
                smooth *= (mass * (np.multiply.outer(self.values, slope) + shift <= tt[..., None])).sum(axis=-1)
            return smooth @ self.weights
        if not self.steps:
            return smooth @ self.weights
        if not self.smooth:  # A alone: its integral over [0, 1]
            return self._integral_of_steps(t, np.array([1.0]))[..., 0]
        edges = np.linspace(0.0, 1.0, len(self.values) + 1)
        return np.sum(smooth * np.diff(self._integral_of_steps(t, edges), axis=-1), axis=-1)

    def _smooth_cdf(self, m: ComputeTime, tt: np.ndarray) -> np.ndarray:
        """P(scale s N + D <= t) of a member with a continuous part, at every t and node s."""
        scale = m.scale_s * self.values
        if m._noise_atoms is not None:  # shifts of the delay's CDF, one per noise atom
            mass = _masses(m.noise, m._noise_atoms) if m.scale_s > 0 else np.ones(1)
            return sum(w * np.asarray(m.delay.cdf(tt - scale * a), dtype=float) for a, w in zip(m._noise_atoms, mass))
        positive = scale > 0  # a factor of 0 leaves the delay alone
        safe = np.where(positive, scale, 1.0)
        delays, mass = (m._delay_atoms, _masses(m.delay, m._delay_atoms)) if m._delay_atoms is not None else (
            self.delays[id(m)], np.full(CONV_CELLS, 1.0 / CONV_CELLS))  # fmt: skip
        rest = tt[..., None] - delays  # (t, node, delay value): one call of the noise's CDF
        done = np.where(positive[:, None], np.asarray(m.noise.cdf(rest / safe[:, None]), dtype=float), rest >= 0)
        return done @ mass

    def _integral_of_steps(self, t: np.ndarray, edges: np.ndarray) -> np.ndarray:
        """int_0^x A(u) du at every x of ``edges`` (the last axis), for every t."""
        tt = t[..., None]
        probs = []  # a member's atom pair is done by t iff u <= F_S((t - shift) / slope)
        for slope, shift, _ in self.steps:
            flat = slope <= 0  # done or not, whatever the factor
            x = (tt - shift) / np.where(flat, 1.0, slope)
            done = np.asarray(self.factor.cdf(np.where(flat, 0.0, x)), dtype=float)
            probs.append(np.where(flat, (tt >= shift).astype(float), done))
        cuts = np.sort(np.concatenate([np.zeros((*t.shape, 1)), *probs], axis=-1), axis=-1)  # where A steps down
        level = np.ones((*cuts.shape[:-1], cuts.shape[-1] - 1))  # A on (cuts[m], cuts[m + 1]]
        for (_, _, mass), p in zip(self.steps, probs):
            level *= (mass * (p[..., None, :] >= cuts[..., 1:, None])).sum(axis=-1)
        covered = np.clip(np.minimum(cuts[..., 1:, None], edges) - cuts[..., :-1, None], 0.0, None)
        return np.sum(level[..., None] * covered, axis=-2)


def _masses(dist: TimeDistribution, atoms: np.ndarray) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], np.asarray(dist.cdf(atoms), dtype=float)]))


def _atom_pairs(m: ComputeTime) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A discrete member's time given s as ``slope * s + shift`` with probability ``mass``, over
    every pair of its noise and delay atoms."""
    noise = m._noise_atoms if m._noise_atoms is not None else np.zeros(1)
    delay = m._delay_atoms if m._delay_atoms is not None else np.zeros(1)
    noise_mass = _masses(m.noise, noise) if m.scale_s > 0 else np.ones(1)
    slope, shift = np.meshgrid(m.scale_s * noise, delay, indexing="ij")
    return slope.ravel(), shift.ravel(), np.outer(noise_mass, _masses(m.delay, delay)).ravel()


def barrier_parts(workers: Sequence[WorkerSpec], batches: Sequence[int]) -> list[TimeDistribution]:
    """The independent parts of a barrier: the compute time of each worker with samples, the
    members of a shared-noise group (with a factor that is not constant) as one, their max."""
    out: list[TimeDistribution] = []
    groups: dict[str, tuple[Distribution, list[ComputeTime]]] = {}
    for w, b in zip(workers, batches):
        if b <= 0:
            continue
        if not w.shares_noise:
            out.append(ComputeTime.of(w, b))
        elif w.shared_noise is not None:
            groups.setdefault(w.shared_noise.group, (w.shared_noise.dist, []))[1].append(ComputeTime.of(w, b))
    return out + [CommonFactorMax(members, factor) for factor, members in groups.values()]


# ----------------------------------------------------------------------------- order statistics


def integrate_survival(survival: Callable[[np.ndarray], np.ndarray], dists: Sequence[TimeDistribution]) -> float:
    """int_0^inf survival(t) dt for a survival function built from ``dists``' CDFs."""
    atoms = [d.atoms() for d in dists]
    if all(a is not None for a in atoms):  # piecewise constant: an exact sum
        points = np.unique(np.concatenate([[0.0], *atoms]))
        # each interval's value read past its left end (past_each: a two-point noise read at its
        # atoms missed their jumps and put the slowest of two workers too high)
        return float(np.sum(np.diff(points) * survival(past_each(points)[:-1])))
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
    with warnings.catch_warnings(record=True) as said:  # quad's doubts about the tail past 12 sds: passed on
        warnings.simplefilter("always")  # recorded, whatever the caller's filters (they judge what is passed on)
        tail, error = integrate.quad(scalar, hi, np.inf, epsabs=1e-10 * hi, epsrel=1e-8, limit=200)
    small = abs(error) <= 1e-9 * max(body + tail, 1e-300)  # where they could matter, not of a tail of nearly nothing
    for w in (w for w in said if not (small and issubclass(w.category, integrate.IntegrationWarning))):
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return float(body + tail)


def _cdf_matrix(dists: Sequence[TimeDistribution], t: np.ndarray) -> np.ndarray:
    """Row i: F_i(t), clipped to [0, 1]. A distribution object listed several times (the
    interned time of identical workers, :meth:`ComputeTime.of`) is evaluated once: at a thousand
    workers of a few kinds the CDF calls, not the products, were the cost."""
    unique = {id(d): d for d in dists}  # first appearances, in order (not np.unique: runs at every quadrature point)
    rows = np.stack([np.clip(np.asarray(d.cdf(t), dtype=float), 0.0, 1.0) for d in unique.values()])
    if len(unique) == len(dists):
        return rows
    slot = {key: i for i, key in enumerate(unique)}
    return rows[[slot[id(d)] for d in dists]]


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
