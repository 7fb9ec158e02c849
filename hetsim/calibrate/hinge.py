"""Where a hinge's kink may lie, and the standard errors that follow (:func:`widened`).

A hinge's own standard errors hold its kink where the fit put it: which rows lie on the flat
part and which on the slope. Where the rows show the kink sharply, that is right. Where they do
not, kinks elsewhere fit about as well, among them a kink below every row (the line: the floor
unknown) and one above every row (flat: the slope unknown), and from seed to seed the estimate
jumps between them: held at one kink, a bent curve's overhead landed dozens of its own errors
from the truth. So each parameter's variance is its own plus the spread of its values over the
kinks the rows allow (those the kink test would not tell from the best: their deviance below
the chi-square quantile of :data:`KINK_P` with two degrees of freedom, the floor and where the
kink lies), weighted by their likelihoods; a parameter that an allowed kink
leaves unknown has no error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from hetsim.calibrate.censored import CurveFit
from hetsim.calibrate.curves import AffineCurve, Curve, HingeCurve, Sizes, hinge_sse, kink_grid, refine_kink
from hetsim.calibrate.lsq import fit_lsq

KINK_P = 0.01  # a kink is shown where the test against a line has a p-value below this
ALLOWED = float(stats.chi2.isf(KINK_P, 2))  # the deviance over the best up to which a kink is allowed


@dataclass(frozen=True)
class Kink:
    """One place for the kink: the hinge's (floor, overhead, per-sample) there, nan where the
    rows leave a parameter unknown there, and its deviance over the best kink (chi-square units)."""

    values: np.ndarray
    deviance: float

    @classmethod
    def of(cls, fit: CurveFit, deviance: float) -> Kink:
        """A fitted hinge's values, nan where the fit gave no standard error (not identified)."""
        return cls(np.array([math.nan if se is None else v for v, se in zip(fit.curve.values, fit.se())]), deviance)


def widened(found: CurveFit, kinks: Sequence[Kink]) -> CurveFit:
    """``found`` (the best hinge) with each parameter's variance its own plus the spread of the
    allowed kinks' values about it, each kink weighted by its likelihood ``exp(-deviance / 2)``
    (the law of total variance, each kink's own variance taken as the best one's: a kink that
    leaves few rows on one side is allowed because it fits as well, not because its values
    spread as far as its own errors say). None where an allowed kink leaves the parameter
    unknown. Only the diagonal of the covariance is kept (a mixture's correlations are not its
    members')."""
    allowed = [k for k in kinks if k.deviance <= ALLOWED]
    weight = np.array([math.exp(-k.deviance / 2) for k in allowed])
    variance = np.array([math.inf if se is None else float(se) ** 2 for se in found.se()])
    for w, kink in zip(weight / max(weight.sum(), 1e-300), allowed):
        variance += np.where(np.isnan(kink.values), math.inf, w * (kink.values - found.curve.values) ** 2)
    known = np.isfinite(variance) & found.free
    return replace(found, cov=np.diag(variance[known]), free=known)


def least_squares_kinks(sizes: Sizes, b: np.ndarray, y: np.ndarray, line: CurveFit) -> list[Kink]:
    """The best kink in each gap between two sizes (the same rows on each side: within a gap the
    hinge's own errors already move its kink), the line and the flat curve, by least squares
    over rows ``b``, ``y`` in step order (none cut). The deviance is the sum of squared relative
    residuals (each row over the best curve's time) over the best one's, in units of the best
    one's residual variance: the noise is multiplicative, and an absolute sum of squares counted
    the floor's rows for less than their spread says, so it allowed kinks that moved them too
    readily (a floor the rows show sharply read wider than it spread). Errors only where
    it is allowed."""
    grid = kink_grid(sizes)
    sse = hinge_sse(sizes, grid, through_origin=False)[0]
    gap = np.searchsorted(sizes.batch, grid, side="right")
    bent = [_best_in(sizes, grid, sse, gap == g) for g in np.unique(gap[np.isfinite(sse)])]
    level = float(np.average(sizes.mean, weights=sizes.count))
    flat = AffineCurve(np.array([level, 0.0]))
    candidates = [*bent, line.curve, flat]
    reference = candidates[int(np.argmin([_sse(c, b, y) for c in candidates]))]  # the rows' best: its times scale
    scale = reference.time_s(b)
    relative = np.array([_sse(c, b, y, scale) for c in candidates])
    unit = float(relative.min()) / max(y.size - 4, 1)
    if unit <= 0:  # a noise-free curve: only the best kink is allowed
        return []
    deviance = (relative - relative.min()) / unit
    free = np.ones(3, dtype=bool)
    kinks = [Kink.of(fit_lsq(at, b, y, free, ~free), d) for at, d in zip(candidates[:-2], deviance) if d <= ALLOWED]
    overhead, per_sample = (float(v) for v in line.curve.values)
    kinks.append(Kink(np.array([math.nan, overhead, per_sample]), float(deviance[-2])))
    kinks.append(Kink(np.array([level, math.nan, math.nan]), float(deviance[-1])))
    return kinks


def _sse(curve: Curve, b: np.ndarray, y: np.ndarray, scale: np.ndarray | None = None) -> float:
    """The rows' sum of squares about ``curve``, each residual over ``scale`` where given."""
    r = y - curve.time_s(b)
    return float(((r if scale is None else r / scale) ** 2).sum())


def _best_in(sizes: Sizes, grid: np.ndarray, sse: np.ndarray, gap: np.ndarray) -> Curve:
    """The hinge of least sum of squares over the size means bending in one gap (``gap``: its
    points of ``grid``, with their ``sse``), searched between the gap's sizes."""
    i = np.flatnonzero(gap)[int(np.argmin(sse[gap]))]
    high = float(sizes.batch[np.searchsorted(sizes.batch, grid[i], side="right")])
    c, _ = refine_kink(sizes, float(grid[gap][0]), high, float(grid[i]), float(sse[i]), origin=False)
    _, floor, slope = (float(v[0]) for v in hinge_sse(sizes, np.array([c]), through_origin=False))
    return HingeCurve(np.array([floor, floor - slope * c, slope]))


def likelihood_kinks(tries: Sequence[CurveFit], line: CurveFit, flat: CurveFit) -> list[Kink]:
    """Kinks from maximum-likelihood fits of complete and cut rows: ``tries`` (a hinge started
    on each side of every size, which the likelihood cannot move past one), ``line`` (the
    affine fit) and ``flat`` (a level: an affine fit with its slope held); the deviance is twice
    the negative log-likelihood over the best one's."""
    best = min((f.nll for f in (*tries, line, flat) if math.isfinite(f.nll)), default=math.nan)
    kinks = [Kink.of(f, 2.0 * (f.nll - best)) for f in tries if math.isfinite(f.nll)]
    if math.isfinite(line.nll):
        kinks.append(Kink(np.array([math.nan, *line.curve.values]), 2.0 * (line.nll - best)))
    if math.isfinite(flat.nll):
        kinks.append(Kink(np.array([flat.curve.values[0], math.nan, math.nan]), 2.0 * (flat.nll - best)))
    return kinks


def kink_shown(sizes: Sizes, b: np.ndarray, y: np.ndarray, line: np.ndarray, hinge: Curve) -> float:
    """The p-value of the F test of the least-squares ``hinge`` against the ``line`` over the
    complete rows ``b``, ``y`` (two parameters more: the floor and where the kink is): 1 where
    the line fits exactly, 0 (kept) where the hinge does or too few rows leave nothing to test."""
    within = _within(sizes, b, y)
    sse_line = within + float((sizes.count * (sizes.mean - line[0] - line[1] * sizes.batch) ** 2).sum())
    sse_hinge = within + float((sizes.count * (sizes.mean - hinge.time_s(sizes.batch)) ** 2).sum())
    dof = y.size - 4
    if sse_line <= 0:
        return 1.0
    if dof < 1 or sse_hinge <= 0:
        return 0.0
    return float(stats.f.sf(max(sse_line - sse_hinge, 0.0) / 2 / (sse_hinge / dof), 2, dof))


def _within(sizes: Sizes, b: np.ndarray, y: np.ndarray) -> float:
    """The rows' sum of squares about their own size's mean (what no curve of the sizes removes)."""
    return float(((y - sizes.mean[np.searchsorted(sizes.batch, b)]) ** 2).sum())


def hinge_starts(sizes: Sizes) -> list[HingeCurve]:
    """A hinge bending after each size with two or more sizes above it: the flat part the mean
    of the sizes below, the line least squares through those above."""
    out = []
    for i in range(1, sizes.batch.size - 1):
        w, u, t = sizes.count[i:], sizes.batch[i:], sizes.mean[i:]
        line = np.polyfit(u, t, 1, w=np.sqrt(w))
        if line[0] <= 0:
            continue
        floor = float(np.average(sizes.mean[:i], weights=sizes.count[:i]))
        out.append(HingeCurve(np.array([floor, float(line[1]), float(line[0])])))
    return out
