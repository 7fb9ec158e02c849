"""The cost curves calibration fits, one class each, and their least-squares fits to size means.

A worker's complete steps are first reduced to :class:`Sizes` (the distinct batch sizes, the
rows at each and their mean time): least squares over the rows is weighted least squares over
these means, so every fit here works on a handful of numbers however long the trace.

* :class:`AffineCurve`: ``overhead_s + per_sample_s * b`` (an intercept below 0 or a slope not
  above 0 falls back to the per-sample cost alone);
* :class:`HingeCurve`: ``max(floor_s, overhead_s + per_sample_s * b)``: least squares over the
  breakpoint (a grid between the sizes, then a bounded 1-d search);
* :class:`TableCurve`: the mean times made non-decreasing (weighted isotonic regression), the
  points of a ``table`` cost model.

Each class is the fitted form of one cost model (its ``cost``): what it is written as in a
scenario, what :func:`~hetsim.calibrate.calibrate` is asked for by that cost model's class, and
what ``--model`` names on the command line (:func:`model_named`). A curve is linear in its
values piece by piece (``time_s = jacobian(b) . values``), which is what the least-squares
sandwich and the censored likelihood (:mod:`~hetsim.calibrate.censored`) differentiate.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from functools import cached_property
from typing import ClassVar

import numpy as np
from scipy import optimize

from hetsim.core.errors import ConfigError
from hetsim.model.costs import Affine, CostModel, Hinge, Table

GRID_PER_GAP = 8  # breakpoints tried between two neighbouring sizes before the 1-d search
AUTO = "auto"  # --model's name for "choose by held-out error"


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


@dataclass(frozen=True)
class Curve(ABC):
    """A fitted cost curve: its ``values`` (the parameters of its cost model, in the order of
    :meth:`params`). Subclasses give the form (:meth:`jacobian`), the cost model it is
    (:meth:`_build`), the least-squares fit to size means (:meth:`fit`) and the bounds a fit
    keeps its values within (:meth:`bounds`)."""

    name: ClassVar[str]  # the cost model's name in scenario files and on the command line
    cost: ClassVar[type[CostModel]]  # the cost model it is a fit of
    min_sizes: ClassVar[int]  # distinct batch sizes a fit needs
    values: np.ndarray

    def time_s(self, b: np.ndarray) -> np.ndarray:
        """The curve at ``b``, the cost model's formula written as ``jacobian(b) . values`` (each
        form is linear in its values on each side of a hinge's kink), so that a fit can pass
        through values its cost model would refuse (a decreasing table, a slope below 0)."""
        b = np.atleast_1d(np.asarray(b, dtype=float))
        return np.asarray(self.jacobian(b) @ self.values, dtype=float)

    @abstractmethod
    def jacobian(self, b: np.ndarray) -> np.ndarray:
        """``d time_s(b) / d values``, one row per batch."""

    def with_values(self, values: np.ndarray) -> Curve:
        """The same form with other values (a table keeps its batches)."""
        return replace(self, values=np.asarray(values, dtype=float))

    def params(self) -> dict[str, float]:
        """The parameters by their names in scenario files."""
        return {k: float(x) for k, x in self.cost_model().param_values().items()}

    @cached_property
    def _model(self) -> CostModel:
        return self._build([float(x) for x in self.values])

    @abstractmethod
    def _build(self, v: list[float]) -> CostModel:
        """The cost model of values ``v``."""

    def cost_model(self) -> CostModel:
        """The fitted curve as the cost-model plug-in a scenario uses (built once)."""
        return self._model

    @classmethod
    def fit(cls, s: Sizes) -> Curve | None:
        """The least-squares curve of this form over the size means ``s``; None where none
        fits (fewer than :attr:`min_sizes` sizes, or no non-decreasing curve of this form with
        a positive slope)."""
        return None if s.batch.size < cls.min_sizes else cls._fitted(s)

    @classmethod
    @abstractmethod
    def _fitted(cls, s: Sizes) -> Curve | None:
        """:meth:`fit` on sizes enough for this form."""

    @abstractmethod
    def bounds(self, least: float, tiny: float) -> list[tuple[float, float]]:
        """Each value's (low, high) in a fit: ``least`` a negligible positive time, ``tiny`` a
        negligible positive per-sample cost (the cost models need a time and a slope above 0)."""


@dataclass(frozen=True)
class AffineCurve(Curve):
    """``overhead_s + per_sample_s * b``: values (overhead, per-sample)."""

    name: ClassVar[str] = "affine"
    cost: ClassVar[type[CostModel]] = Affine
    min_sizes: ClassVar[int] = 2

    def jacobian(self, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, dtype=float)
        return np.stack([np.ones_like(b), b], axis=1)

    def _build(self, v: list[float]) -> CostModel:
        return Affine(v[0], v[1])

    @classmethod
    def _fitted(cls, s: Sizes) -> Curve | None:
        w, u, y = s.count, s.batch, s.mean
        um, ym = np.average(u, weights=w), np.average(y, weights=w)
        slope = float((w * (u - um) * (y - ym)).sum() / (w * (u - um) ** 2).sum())
        overhead = float(ym - slope * um)
        if overhead < 0 or slope <= 0:
            overhead, slope = 0.0, float((w * u * y).sum() / (w * u * u).sum())
        return cls(np.array([overhead, slope])) if slope > 0 else None

    def bounds(self, least: float, tiny: float) -> list[tuple[float, float]]:
        return [(0.0, math.inf), (tiny, math.inf)]


@dataclass(frozen=True)
class HingeCurve(Curve):
    """``max(floor_s, overhead_s + per_sample_s * b)``: values (floor, overhead, per-sample)."""

    name: ClassVar[str] = "hinge"
    cost: ClassVar[type[CostModel]] = Hinge
    min_sizes: ClassVar[int] = 3

    def jacobian(self, b: np.ndarray) -> np.ndarray:
        """Linear on the side of the kink ``b`` lies: the floor below it, the line above."""
        b = np.asarray(b, dtype=float)
        floor, overhead, per_sample = (float(v) for v in self.values)
        on = overhead + per_sample * b > floor
        return np.stack([~on, on, on * b], axis=1).astype(float)

    def _build(self, v: list[float]) -> CostModel:
        return Hinge(*v)

    @classmethod
    def _fitted(cls, s: Sizes) -> Curve | None:
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
        return cls(np.array([floor, overhead, slope]))

    def bounds(self, least: float, tiny: float) -> list[tuple[float, float]]:
        """The intercept free: bounding it at 0 clipped the estimates of a line through the
        origin (the steep side of many devices) and left them less spread than their errors
        said; the floor then a negligible positive time (the cost model needs one)."""
        return [(least, math.inf), (-math.inf, math.inf), (tiny, math.inf)]


@dataclass(frozen=True)
class TableCurve(Curve):
    """Piecewise linear through the times ``values`` at ``batches``, the last segment's slope
    carried on beyond them."""

    name: ClassVar[str] = "table"
    cost: ClassVar[type[CostModel]] = Table
    min_sizes: ClassVar[int] = 2
    batches: np.ndarray  # increasing, at least two

    def jacobian(self, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, dtype=float)
        points = np.asarray(self.batches, dtype=float)
        unit = np.eye(points.size)
        inside = np.stack([np.interp(b, points, e) for e in unit], axis=1)
        beyond = (b - points[-1]) / (points[-1] - points[-2])  # the last segment's slope, carried on
        after = unit[-1][None, :] + beyond[:, None] * (unit[-1] - unit[-2])[None, :]
        return np.where((b > points[-1])[:, None], after, inside)

    def params(self) -> dict[str, float]:
        """One ``t@b`` per point."""
        return {f"t@{b:g}": float(x) for b, x in zip(self.batches, self.values)}

    def _build(self, v: list[float]) -> CostModel:
        return Table(points=[[float(b), t] for b, t in zip(self.batches, v)])

    @classmethod
    def _fitted(cls, s: Sizes) -> Curve | None:
        times = optimize.isotonic_regression(s.mean, weights=s.count).x
        return cls(np.asarray(times, dtype=float), s.batch)

    def bounds(self, least: float, tiny: float) -> list[tuple[float, float]]:
        return [(least, math.inf)] * self.values.size


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


FITTED: tuple[type[Curve], ...] = (AffineCurve, HingeCurve, TableCurve)  # simplest first: ties go to the left
CHOICES = (AUTO, *(c.name for c in FITTED))  # what --model takes


def curve_class(model: type[CostModel], field: str = "model") -> type[Curve]:
    """The fitted form of cost model ``model`` (its class); ConfigError on ``field`` for a cost
    model calibration does not fit (or a name: names are resolved by :func:`model_named`)."""
    for curve in FITTED:
        if curve.cost is model:
            return curve
    fits = ", ".join(c.cost.__name__ for c in FITTED)
    if isinstance(model, str):
        raise ConfigError(field, f"give a cost model's class ({fits}, hetsim.model.costs), not the name {model!r}")
    if not isinstance(model, type):  # an object's parameters are what calibration fits
        what = type(model).__name__
        raise ConfigError(field, f"give the class ({what}), not an object: calibration fits its parameters")
    raise ConfigError(field, f"calibration fits the cost models {fits}, not {getattr(model, '__name__', model)!r}")


def model_named(name: str, field: str = "--model") -> type[CostModel] | None:
    """``--model NAME`` (a name of :data:`CHOICES`) as the cost model's class; None for ``auto``.
    ConfigError on ``field`` for any other name. Names are resolved here, at the command line."""
    if name == AUTO:
        return None
    for curve in FITTED:
        if curve.name == name:
            return curve.cost
    raise ConfigError(field, f"unknown model {name!r} (choose {', '.join(CHOICES)})")
