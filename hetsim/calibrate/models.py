"""Cost curves fitted to one worker's step times: the candidates, their held-out errors, the choice.

A worker's complete steps are first reduced to :class:`Sizes` (the distinct batch sizes, the
rows at each and their mean time): least squares over the rows is weighted least squares over
these means, so every fit below works on a handful of numbers however long the trace.

* ``affine``: ``overhead_s + per_sample_s * b`` (an intercept below 0 or a slope not above 0
  falls back to the per-sample cost alone);
* ``hinge``: ``max(floor_s, overhead_s + per_sample_s * b)``: least squares over the breakpoint
  (a grid between the sizes, then a bounded 1-d search), with ``overhead_s >= 0``;
* ``table``: the mean times made non-decreasing (weighted isotonic regression), the points of a
  ``table`` cost model.

:func:`held_out_errors` scores each by leaving batch sizes out (each size its own fold, or
:data:`MAX_FOLDS` interleaved folds): ``predicted / measured mean - 1`` at the sizes a fit did
not see, root mean square over their rows. :func:`choose` keeps the simplest model whose score is within
:func:`noise_floor` (the noise of the held-out means themselves) of the best. These least-squares
fits choose the model and start its maximum-likelihood fit over every row
(:mod:`hetsim.calibrate.censored`), which gives the parameters written and their standard errors.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from scipy import optimize

from hetsim.core.errors import ConfigError
from hetsim.model.costs import Affine, CostModel, Hinge, Table

MODELS = ("affine", "hinge", "table")  # simplest first: ties go to the left
CHOICES = ("auto", *MODELS)
MIN_SIZES = {"affine": 2, "hinge": 3, "table": 2}  # distinct batch sizes a fit needs
MAX_FOLDS = 10
GRID_PER_GAP = 8  # breakpoints tried between two neighbouring sizes before the 1-d search


def check_model(name: str, field: str = "--model") -> str:
    """``name`` if it is one of :data:`CHOICES` (a cost model, or ``auto``); else ConfigError on ``field``."""
    if name not in CHOICES:
        raise ConfigError(field, f"unknown model {name!r} (choose {', '.join(CHOICES)})")
    return name


@dataclass(frozen=True)
class Sizes:
    """Rows reduced to their distinct batch sizes: ``batch`` (increasing), ``count`` and ``mean`` time."""

    batch: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    index: np.ndarray  # each row's position in ``batch``

    @classmethod
    def of(cls, b: np.ndarray, y: np.ndarray) -> Sizes:
        u, index, n = np.unique(b, return_inverse=True, return_counts=True)
        return cls(u.astype(float), n.astype(float), np.bincount(index, weights=y) / n, index)

    def subset(self, keep: np.ndarray) -> Sizes:
        return Sizes(self.batch[keep], self.count[keep], self.mean[keep], np.empty(0, dtype=int))

    def with_means(self, mean: np.ndarray) -> Sizes:
        return replace(self, mean=mean)


@dataclass(frozen=True)
class Curve:
    """A fitted cost curve: ``values`` are (overhead, per-sample) for affine, (floor, overhead,
    per-sample) for hinge and the times at ``batches`` for table."""

    model: str
    values: np.ndarray
    batches: np.ndarray | None = None

    def time_s(self, b: np.ndarray) -> np.ndarray:
        """The curve at ``b``, the cost model's formula written as ``jacobian(b) . values`` (each
        model is linear in its values on each side of a hinge's kink), so that a fit can pass
        through values its cost model would refuse (a decreasing table, a slope below 0)."""
        b = np.atleast_1d(np.asarray(b, dtype=float))
        return np.asarray(self.jacobian(b) @ self.values, dtype=float)

    def jacobian(self, b: np.ndarray) -> np.ndarray:
        """``d time_s(b) / d values``, one row per batch: each model is linear in its values
        piece by piece (the hinge on the side of its kink that ``b`` lies)."""
        b = np.asarray(b, dtype=float)
        if self.model == "affine":
            return np.stack([np.ones_like(b), b], axis=1)
        if self.model == "hinge":
            floor, overhead, per_sample = (float(v) for v in self.values)
            on = overhead + per_sample * b > floor
            return np.stack([~on, on, on * b], axis=1).astype(float)
        points = np.asarray(self.batches, dtype=float)
        unit = np.eye(points.size)
        inside = np.stack([np.interp(b, points, e) for e in unit], axis=1)
        beyond = (b - points[-1]) / (points[-1] - points[-2])  # the last segment's slope, carried on
        after = unit[-1][None, :] + beyond[:, None] * (unit[-1] - unit[-2])[None, :]
        return np.where((b > points[-1])[:, None], after, inside)

    def scaled(self, factor: float) -> Curve:
        return replace(self, values=self.values * factor)

    def params(self) -> dict[str, float]:
        """The parameters by their names in scenario files (table: one ``t@b`` per point)."""
        if self.batches is None:
            return {k: float(x) for k, x in self.cost_model().param_values().items()}
        return {f"t@{b:g}": float(x) for b, x in zip(self.batches, self.values)}

    @cached_property
    def _model(self) -> CostModel:
        v = [float(x) for x in self.values]
        if self.model == "affine":
            return Affine(v[0], v[1])
        if self.model == "hinge":
            return Hinge(*v)
        return Table(points=[[float(b), t] for b, t in zip(self.batches if self.batches is not None else [], v)])

    def cost_model(self) -> CostModel:
        """The fitted curve as the cost-model plug-in a scenario uses (built once)."""
        return self._model


# ----------------------------------------------------------------------------- the fits


def fit_curve(model: str, s: Sizes) -> Curve | None:
    """``model`` fitted to ``s`` by (weighted) least squares; None where it cannot be (too few
    sizes, or no non-decreasing curve of that form with a positive slope fits)."""
    if s.batch.size < MIN_SIZES[model]:
        return None
    if model == "affine":
        return _affine(s)
    if model == "hinge":
        return _hinge(s)
    times = optimize.isotonic_regression(s.mean, weights=s.count).x
    return Curve("table", np.asarray(times, dtype=float), s.batch)


def _affine(s: Sizes) -> Curve | None:
    w, u, y = s.count, s.batch, s.mean
    um, ym = np.average(u, weights=w), np.average(y, weights=w)
    slope = float((w * (u - um) * (y - ym)).sum() / (w * (u - um) ** 2).sum())
    overhead = float(ym - slope * um)
    if overhead < 0 or slope <= 0:
        overhead, slope = 0.0, float((w * u * y).sum() / (w * u * u).sum())
    return Curve("affine", np.array([overhead, slope])) if slope > 0 else None


def hinge_sse(s: Sizes, c: np.ndarray, through_origin: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each breakpoint in ``c``: (sse, floor, slope) of the best hinge bending there, inf
    where infeasible. ``through_origin``: the family with ``overhead_s = 0``, ``slope * max(c, b)``."""
    w, u, y = s.count, s.batch, s.mean
    if through_origin:
        x = np.maximum(u[None, :], c[:, None])
        slope = (w * x * y).sum(1) / (w * x * x).sum(1)
        floor = slope * c
        fitted = slope[:, None] * x
        ok = slope > 0
    else:
        x = np.maximum(u[None, :] - c[:, None], 0.0)
        xm = (w * x).sum(1) / w.sum()
        ym = np.average(y, weights=w)
        sxx = (w * (x - xm[:, None]) ** 2).sum(1)
        slope = np.where(sxx > 0, (w * (x - xm[:, None]) * (y - ym)).sum(1) / np.where(sxx > 0, sxx, 1.0), 0.0)
        floor = ym - slope * xm
        fitted = floor[:, None] + slope[:, None] * x
        ok = (sxx > 0) & (slope > 0) & (floor > 0)
    sse = np.where(ok, (w * (y - fitted) ** 2).sum(1), np.inf)
    return sse, floor, slope


def kink_grid(s: Sizes) -> np.ndarray:
    """Breakpoints between the smallest and largest size, :data:`GRID_PER_GAP` in each gap."""
    u = s.batch
    return np.concatenate([np.linspace(a, b, GRID_PER_GAP, endpoint=False) for a, b in zip(u[:-1], u[1:])])


def refine_kink(s: Sizes, low: float, high: float, start: float, start_sse: float, origin: bool) -> tuple[float, float]:
    """(breakpoint, sse): the bounded 1-d search of a hinge's sum of squares over ``[low, high]``,
    or the grid point ``start`` (with its ``start_sse``) where the search finds nothing better."""
    penalty = 1e3 * float((s.count * s.mean**2).sum())  # stands for "infeasible" in the 1-d search

    def sse_at(c: float) -> float:
        value = float(hinge_sse(s, np.array([c]), origin)[0][0])
        return value if np.isfinite(value) else penalty

    found = optimize.minimize_scalar(sse_at, bounds=(low, high), method="bounded")
    return (float(found.x), float(found.fun)) if found.fun < start_sse else (float(start), float(start_sse))


def _hinge(s: Sizes) -> Curve | None:
    grid = kink_grid(s)
    best: tuple[float, float, bool] | None = None  # (sse, breakpoint, through_origin)
    for origin in (False, True):
        sse = hinge_sse(s, grid, origin)[0]
        i = int(np.argmin(sse))
        if np.isfinite(sse[i]):
            lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
            c, value = refine_kink(s, float(lo), float(hi), float(grid[i]), float(sse[i]), origin)
            if best is None or value < best[0]:
                best = (value, c, origin)
    if best is None:
        return None
    _, c, origin = best
    _, floor, slope = (float(a[0]) for a in hinge_sse(s, np.array([c]), origin))
    overhead = 0.0 if origin else floor - slope * c
    return Curve("hinge", np.array([floor, overhead, slope]))


# ----------------------------------------------------------------------------- choosing


def folds(m: int) -> list[np.ndarray]:
    """Indices of the held-out sizes of each fold: one size each, or MAX_FOLDS interleaved groups."""
    k = min(m, MAX_FOLDS)
    return [np.arange(j, m, k) for j in range(k)]


def held_out_errors(s: Sizes) -> dict[str, float | None]:
    """Per model, the relative error of its predictions at batch sizes left out of its fit
    (``predicted / mean measured - 1`` at each size), root mean square over the held-out rows;
    None where some fold cannot fit it (every model needs three sizes or more)."""
    m = s.batch.size
    errors: dict[str, list[np.ndarray] | None] = {name: [] for name in MODELS}
    weights = np.concatenate([s.count[hold] for hold in folds(m)])
    if m < 3:
        return dict.fromkeys(MODELS)
    for hold in folds(m):
        keep = np.ones(m, dtype=bool)
        keep[hold] = False
        train = s.subset(keep)
        for name in MODELS:
            found = errors[name]
            if found is None:
                continue
            curve = fit_curve(name, train)
            if curve is None:
                errors[name] = None
                continue
            found.append(curve.time_s(s.batch[hold]) / s.mean[hold] - 1.0)
    return {
        name: None if e is None else float(np.sqrt(np.average(np.concatenate(e) ** 2, weights=weights)))
        for name, e in errors.items()
    }


def noise_floor(b: np.ndarray, y: np.ndarray, s: Sizes) -> float:
    """What the held-out error owes to the noise of the held-out means themselves (their root
    mean square over the rows): the within-size sigma of log times (pooled) times
    ``sqrt(sizes / rows)``; 0 when no size was seen twice."""
    logs = np.log(y)
    means = np.bincount(s.index, weights=logs) / s.count
    dof = y.size - s.batch.size
    if dof < 1:
        return 0.0
    sigma = float(np.sqrt(((logs - means[s.index]) ** 2).sum() / dof))
    return sigma * float(np.sqrt(s.batch.size / y.size))


def choose(errors: dict[str, float | None], floor: float) -> str:
    """The simplest model whose held-out error is within ``floor`` of the lowest (affine when
    none could be scored)."""
    scored = {k: v for k, v in errors.items() if v is not None}
    if not scored:
        return "affine"
    best = min(scored.values())
    return next(name for name in MODELS if name in scored and scored[name] <= best + floor)
