"""The CDF of one worker's compute time ``scale * N + D`` when both the noise ``N`` and the delay
``D`` are continuous: ``F(t) = E_N[F_D(t - scale N)]``, a midpoint Stieltjes sum over a fine grid
of the noise's CDF, from its low quantile up to where ``t - scale N`` reaches the delay's lowest
value (so the kink there is a grid end). The sum is exact to about 1e-8 in the CDF, far below any
simulation's sampling error, and costs :data:`CONV_GRID` evaluations of each CDF a point.

Two things keep it usable on the analysis's grids of tens of thousands of points (``backup``'s
inclusion sums): the points go through the sum a chunk at a time (:data:`CONV_CHUNK`), so memory
stays bounded; and many points at once are read off a cubic spline through knots
:data:`SPLINE_STRIDE` points apart, checked against the sum at the middle of every knot interval:
an interval where they differ by more than :data:`SPLINE_TOL` (the sum's own error) has its points
summed instead (a heavy-tailed delay's body, on a grid that reaches far into its tail). The
spline is kept for later calls inside its range, as one prediction asks for the same grid
shifted by rounding several times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.interpolate import CubicSpline

CONV_GRID = 4001  # cells of the noise's CDF per point
CONV_CHUNK = 256  # points summed together (a temporary of CONV_CHUNK x CONV_GRID doubles)
SPLINE_ABOVE = 4096  # more points than this at once: try the spline
SPLINE_STRIDE = 6  # a knot every this many of the sorted points
SPLINE_TOL = 5e-8  # the largest misfit at an interval's middle for the spline to be read there


@dataclass(frozen=True)
class _Spline:
    lo: float
    hi: float
    spacing: float
    knots: np.ndarray
    spline: CubicSpline
    bad: np.ndarray  # per knot interval: the spline misses the sum there


class ConvolvedCdf:
    """``F(t)`` of ``scale_s * noise + delay``; ``bounds()`` gives the noise's low and high quantiles
    and the delay's lowest value, computed on the first call."""

    def __init__(
        self, scale_s: float, noise: Any, delay: Any, bounds: Callable[[], tuple[float, float, float]]
    ) -> None:
        self.scale_s, self.noise, self.delay, self._bounds = scale_s, noise, delay, bounds
        self._limits: tuple[float, float, float] | None = None
        self._spline: _Spline | None = None

    def __call__(self, t: np.ndarray) -> np.ndarray:
        flat = np.asarray(t, dtype=float).reshape(-1)
        lo, hi = (float(flat.min()), float(flat.max())) if flat.size else (0.0, 0.0)
        if flat.size <= SPLINE_ABOVE or not hi > lo or not np.isfinite(hi - lo):  # (NaN or inf: the sum says)
            return self.summed(flat).reshape(np.shape(t))
        spacing = (hi - lo) * SPLINE_STRIDE / flat.size
        kept = self._spline
        if kept is None or not (kept.lo <= lo and hi <= kept.hi and kept.spacing <= spacing * 1.01):
            kept = self._spline = self._fit(lo, hi, spacing)
        out = np.clip(kept.spline(flat), 0.0, 1.0)
        cell = np.clip(np.searchsorted(kept.knots, flat, side="right") - 1, 0, kept.bad.size - 1)
        summed = kept.bad[cell]
        if summed.any():
            out[summed] = self.summed(flat[summed])
        return out.reshape(np.shape(t))

    def _fit(self, lo: float, hi: float, spacing: float) -> _Spline:
        """A spline through knots ``spacing`` apart over [lo, hi], and the intervals where it misses."""
        knots = np.linspace(lo, hi, max(4, int(np.ceil((hi - lo) / spacing)) + 1))
        spline = CubicSpline(knots, self.summed(knots))
        mids = 0.5 * (knots[1:] + knots[:-1])
        bad = np.abs(spline(mids) - self.summed(mids)) > SPLINE_TOL
        return _Spline(lo, hi, float(knots[1] - knots[0]), knots, spline, bad)

    def summed(self, t: np.ndarray) -> np.ndarray:
        """The Stieltjes sum at each of the points ``t`` (1-D)."""
        if self._limits is None:
            self._limits = self._bounds()
        lo, hi, delay_lo = self._limits
        out = np.empty(t.size)
        for start in range(0, t.size, CONV_CHUNK):
            part = t[start : start + CONV_CHUNK]
            top = np.clip((part - delay_lo) / self.scale_s, lo, hi)[:, None]
            edges = lo + (top - lo) * np.linspace(0.0, 1.0, CONV_GRID)
            cum = np.asarray(self.noise.cdf(edges), dtype=float)
            cum[:, 0] = 0.0  # the tails beyond the grid go to its end cells, so the mass is 1
            cum[:, -1] = np.where(top[:, 0] >= hi, 1.0, cum[:, -1])
            mids = 0.5 * (edges[:, 1:] + edges[:, :-1])
            weights = np.diff(cum, axis=-1)
            out[start : start + part.size] = np.sum(
                self.delay.cdf(part[:, None] - self.scale_s * mids) * weights, axis=-1
            )
        return out
