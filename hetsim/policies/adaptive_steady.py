"""``adaptive``'s steady steps, computed across the steps of a block at once.

:meth:`Adaptive._step` is a recursion per worker: the decayed statistics, then the refit, the
change detector against the previous fit, and the re-split check. Within a block on one split,
while every worker with samples is measured (waited for, its time positive), none surprises
the detector twice in a row (a restart) and no integer split could be faster by the re-split's
goal, a step changes only the statistics, the fitted lines, the residual variances and the runs
of surprises (those of a worker without samples stay). Those steps are computed here for a
whole block: the recursions on rows of workers, with the very operations of ``_step``;
everything else as (steps x workers) arrays, whose elementwise operations round as they do on
one row. :func:`steady_prefix` returns how many leading steps were steady and the state after
them; the step after (a restart, or a split that may be faster) is left to ``_step``. The
formulas both paths use are the functions below, written once.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from hetsim.partition import samples_by

MIN_SPREAD = 0.5  # samples; with MIN_SPREAD_REL of the mean: below this spread of b the slope is kept
MIN_SPREAD_REL = 0.05
MIN_JUMP = 0.10  # relative: smaller surprises are left to the forgetting fit
FALSE_SURPRISES = 0.01  # workers per step surprised by normal noise in the detector's band
BOUND_MARGIN = 1e-9  # relative: rounding room when the integer check rules a re-split out


class Fit(NamedTuple):
    """Adaptive's per-worker state that steady steps advance."""

    stats: np.ndarray  # (5, n): decayed sums of 1, b, b^2, t, b*t
    slope: np.ndarray  # the fitted per-sample time
    fixed_s: np.ndarray  # the fitted per-step time
    resid_var: np.ndarray  # running variance of the relative residuals
    surprises: np.ndarray  # each worker's run of surprises: the sign of the last, 0 after a calm one


def candidates(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From statistics of shape (..., 5, n): the means of b and t, the least-squares slope where
    it is identified and positive (else NaN is never used: see ``valid``), its validity, and the
    slope through the mean (a fixed cost cannot be negative, so no slope exceeds it)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        means = stats[..., 1:, :] / stats[..., :1, :]  # (one division)
        mean_b, mean_bb, mean_t, mean_bt = (means[..., r, :] for r in range(4))
        var_b = mean_bb - mean_b**2
        identifiable = var_b > np.maximum(MIN_SPREAD, MIN_SPREAD_REL * mean_b) ** 2
        fitted = (mean_bt - mean_b * mean_t) / var_b
        through_mean = mean_t / mean_b
    return mean_b, mean_t, fitted, identifiable & (fitted > 0), through_mean


def band(n_workers: int) -> float:
    """The detector's band in standard deviations: 4, or wider on a large cluster, so that
    normal noise surprises about :data:`FALSE_SURPRISES` workers per step, whatever its size."""
    return max(4.0, NormalDist().inv_cdf(1 - FALSE_SURPRISES / (2 * n_workers)))


def surprise_free(resid: np.ndarray, var: np.ndarray, sigmas: float) -> np.ndarray:
    """Where a relative residual is within the detector's band, ``max(sigmas * sigma, MIN_JUMP)``."""
    return np.abs(resid) <= np.maximum(sigmas * np.sqrt(var), MIN_JUMP)


def next_var(var: np.ndarray, resid: np.ndarray) -> np.ndarray:
    """The residual variance after a calm measurement."""
    return 0.9 * var + 0.1 * resid**2


def noise_margin(mean_var: float | np.ndarray, forgetting: float, busy: int) -> float | np.ndarray:
    """How far, relative to it, the fitted time of the slowest of ``busy`` workers lies above
    the true one on average from the fits' noise alone: the expected maximum of ``busy`` normal
    errors, ``sqrt(2 ln busy)`` standard deviations of a forgetting fit's relative error,
    ``sqrt(var (1 - f) / (1 + f))`` (``var``: the measurements' relative variance). A split
    predicted faster by less is as likely noise as a gain."""
    if busy < 2:
        return 0.0 * mean_var
    return np.sqrt(2 * math.log(busy) * (mean_var * (1 - forgetting) / (1 + forgetting)))


class Block(NamedTuple):
    """What :func:`steady_prefix` needs besides the state: a block of steps on one split."""

    b: np.ndarray  # the split as floats
    compute_s: np.ndarray  # (steps, n): positive where b is, every worker with samples waited for
    forgetting: float
    hysteresis: float
    caps: np.ndarray  # the caps of the workers up
    total: int  # the global batch
    sigmas: float  # the detector's band


def steady_prefix(fit: Fit, block: Block) -> tuple[int, Fit, bool]:
    """How many leading steps of ``block`` to take from ``fit``, the state after them (``fit``
    itself after none), and whether the last of them is due its re-split: the steady steps, and
    the step after them too when all it lacks is the re-split (it restarts no fit)."""
    busy = block.b > 0
    stats = _stats_after(fit.stats, block, busy)
    mean_b, mean_t, fitted, valid, through_mean = candidates(stats)
    slope = _slopes(fit.slope, fitted, valid, through_mean)
    fixed = mean_t - slope * mean_b
    pred = fixed + slope * block.b  # the fitted step times, for the detector and the check
    resid, var, again, surprised = _detector(fit, block, pred, busy)
    runs, restarts = _restarts(fit, resid, again, surprised)
    steady = ~restarts
    if block.caps.sum() >= block.total:  # (else the re-split waits for the workers)
        goal = _goals(pred, var, block, busy)  # (NaN: no goal, so not steady: NaN < total is False)
        steady &= samples_by(fixed, slope, block.caps, goal * (1 + BOUND_MARGIN)) < block.total
    steps = int(np.argmin(steady)) if not steady.all() else len(steady)
    due = steps < len(steady) and not restarts[steps]
    steps += due
    if steps == 0:
        return 0, fit, False
    k = steps - 1
    surprises = np.where(busy, 0, fit.surprises)  # calm, but where surprised (again) in the last step
    surprises[again] = np.where(busy[again], runs[k], fit.surprises[again])
    return steps, Fit(stats[k].copy(), slope[k].copy(), fixed[k].copy(), var[k].copy(), surprises), due


def _stats_after(stats: np.ndarray, block: Block, busy: np.ndarray) -> np.ndarray:
    """Each step's statistics, (steps, 5, n): decayed, plus the step's measurement (kept as
    they were for the workers without samples)."""
    t, b = block.compute_s, block.b
    fixed_rows = np.array([np.ones_like(b), b, np.multiply(b, b)])  # the measurement's rows of 1, b, b^2
    bt = np.multiply(b, t)
    out = np.empty((len(t), 5, len(b)))
    for j in range(len(t)):
        np.multiply(stats if j == 0 else out[j - 1], block.forgetting, out=out[j])
        out[j, :3] += fixed_rows
        out[j, 3] += t[j]
        out[j, 4] += bt[j]
    if not busy.all():  # (columns are independent: the idle ones are put back once)
        out[:, :, ~busy] = stats[:, ~busy]
    return out


def _slopes(last: np.ndarray, fitted: np.ndarray, valid: np.ndarray, through_mean: np.ndarray) -> np.ndarray:
    """Each step's slope: the fit where valid, else the last slope (positive in a steady
    block), never above the slope through the mean."""
    with np.errstate(invalid="ignore"):
        fits = np.minimum(fitted, through_mean)  # the slope at a valid step
    out = np.empty_like(fitted)
    for j in range(len(fitted)):
        np.minimum(last if j == 0 else out[j - 1], through_mean[j], out=out[j])
        np.copyto(out[j], fits[j], where=valid[j])
    return out


def _detector(
    fit: Fit, block: Block, pred: np.ndarray, busy: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each step's residuals against the previous step's fit, the residual variances after the
    step, and the workers surprised somewhere with where they were (a column each). The
    variances are first run as if every measurement were calm (a worker's variance is held at
    a surprise); the few workers surprised somewhere are then run again, step by step."""
    idle = None if busy.all() else ~busy
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        resid = np.empty_like(pred)
        np.divide(block.compute_s[0], fit.fixed_s + fit.slope * block.b, out=resid[0])
        np.divide(block.compute_s[1:], pred[:-1], out=resid[1:])
        resid -= 1.0
        var = np.empty((len(resid) + 1, len(busy)))  # the variances before each step, then after the last
        var[0] = fit.resid_var
        for j in range(len(resid)):
            var[j + 1] = next_var(var[j], resid[j])
        if idle is not None:  # (put back: they were not measured)
            var[:, idle] = fit.resid_var[idle]
        calm = surprise_free(resid, var[:-1], block.sigmas)
        if idle is not None:
            calm |= idle
        again = np.flatnonzero(~np.logical_and.reduce(calm, axis=0))
        if not again.size:
            return resid, var[1:], again, np.zeros((len(resid), 0), dtype=bool)
        surprised = ~calm[:, again]
        first = int(np.argmax(np.logical_or.reduce(surprised, axis=1)))  # (the variances are right before it)
        held, part, column = var[first, again], resid[:, again], var[1:, again]
        for j in range(first, len(resid)):
            ok = surprise_free(part[j], held, block.sigmas)
            np.logical_not(ok, out=surprised[j])
            column[j] = held = np.where(ok, next_var(held, part[j]), held)
        var[1:, again] = column
    return resid, var[1:], again, surprised


def _restarts(fit: Fit, resid: np.ndarray, again: np.ndarray, surprised: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of the workers ``again`` surprised somewhere: each step's runs of surprises after it (the
    sign of a surprise, 0 after a calm measurement), and whether the step restarts a worker's
    fit: its second surprise in a row of one sign."""
    sign = np.where(resid[:, again] > 0, 1, -1)
    runs = np.where(surprised, sign, 0)
    before = np.concatenate([fit.surprises[again][None], runs[:-1]])
    return runs, np.logical_or.reduce(surprised & (before == sign), axis=1)


def _goals(pred: np.ndarray, var: np.ndarray, block: Block, busy: np.ndarray) -> np.ndarray:
    """Each step's re-split goal: the current split's fitted time less the hysteresis and the
    noise margin (NaN where that time is not finite: then the check cannot rule a split out)."""
    current = np.max(pred, axis=1, where=busy, initial=-np.inf) if busy.any() else np.zeros(len(pred))
    margin = noise_margin(var.mean(axis=1), block.forgetting, int(np.count_nonzero(busy)))
    goal = (1 - block.hysteresis - margin) * current
    return np.where(np.isfinite(current), goal, np.nan)
