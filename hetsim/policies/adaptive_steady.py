"""``adaptive``'s steady steps, computed across the steps of a block at once.

:meth:`Adaptive._step` is a recursion per worker: the decayed statistics, then the refit, the
change detector against the previous fit, and the re-split check. Within a block on one split,
while every worker with samples is measured (waited for, its time positive) and no integer
split could be faster by the re-split's goal, a step changes only the statistics, the fitted
lines, the residual variances and the runs of surprises (those of a worker without samples
stay), and a restart of a worker's fit only that worker's. Those steps are computed here for a
whole block: the recursions on rows of workers, with the very operations of ``_step``;
everything else as (steps x workers) arrays, whose elementwise operations round as they do on
one row; a restart redoes the restarted workers' columns from there. :func:`steady_prefix`
stops at the first step in which a split may be faster, which it takes and leaves due its
re-split. Both paths call the fit's, the detector's and the goal's formulas below; the slope
rule is written out again in array form (``_slopes``: ``_fit``'s rule for a last slope known to
be positive), which the tests check bit for bit.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from hetsim.model.partition import samples_by

MIN_SPREAD = 0.5  # samples; with MIN_SPREAD_REL of the mean: below this spread of b the slope is kept
MIN_SPREAD_REL = 0.05
MIN_JUMP = 0.10  # relative: smaller surprises are left to the forgetting fit
FALSE_SURPRISES = 0.01  # workers per step that normal residuals of a known spread would surprise
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
    normal residuals of a known spread would surprise :data:`FALSE_SURPRISES` workers per step,
    whatever its size (measured residuals, skewed and with an estimated spread, more)."""
    return max(4.0, NormalDist().inv_cdf(1 - FALSE_SURPRISES / (2 * n_workers)))


def surprise_free(size: np.ndarray, var: np.ndarray, sigmas: float) -> np.ndarray:
    """Where a relative residual's size (absolute value) is within the detector's band,
    ``max(sigmas * sigma, MIN_JUMP)``."""
    return size <= np.maximum(sigmas * np.sqrt(var), MIN_JUMP)


def var_term(resid: np.ndarray) -> np.ndarray:
    """A calm measurement's share in the next residual variance (see :func:`next_var`)."""
    return 0.1 * resid**2


def next_var(var: np.ndarray, term: np.ndarray) -> np.ndarray:
    """The residual variance after a calm measurement whose :func:`var_term` is ``term``."""
    return 0.9 * var + term


def noise_margin(mean_var: float | np.ndarray, forgetting: float, busy: int) -> float | np.ndarray:
    """How far, relative to it, the fitted time of the slowest of ``busy`` workers may lie above
    the true one from the fits' noise alone: ``sqrt(2 ln busy)`` standard errors of a forgetting
    fit's relative error, ``sqrt(var (1 - f) / (1 + f))`` (``var``: the measurements' relative
    variance). ``sqrt(2 ln n)`` bounds the expected maximum of n standard normal errors and
    exceeds it by about one standard deviation of that maximum (3.72 against 3.24 +- 0.37 at
    1024 workers), so a split predicted faster by less is as likely noise as a gain."""
    if busy < 2:
        return 0.0 * mean_var  # (the shape of mean_var, and its NaN)
    return np.sqrt(2 * math.log(busy) * (mean_var * (1 - forgetting) / (1 + forgetting)))


def resplit_goal(
    current_s: float | np.ndarray, mean_var: float | np.ndarray, forgetting: float, hysteresis: float, busy: int
) -> float | np.ndarray:
    """The time a new split must beat: the current split's fitted time less the hysteresis and
    the :func:`noise_margin` (one goal, or one per step)."""
    return (1 - hysteresis - noise_margin(mean_var, forgetting, busy)) * current_s


class Block(NamedTuple):
    """What :func:`steady_prefix` needs besides the state: a block of steps on one split."""

    b: np.ndarray  # the split as floats
    compute_s: np.ndarray  # (steps, n): positive where b is, every worker with samples waited for
    forgetting: float
    hysteresis: float
    caps: np.ndarray  # the caps of the workers up
    global_batch: int
    sigmas: float  # the detector's band


class Lines(NamedTuple):
    """Each step's fit, (steps, ...) arrays: statistics, slope, fixed cost and fitted step time."""

    stats: np.ndarray
    slope: np.ndarray
    fixed_s: np.ndarray
    pred: np.ndarray


def steady_prefix(fit: Fit, block: Block) -> tuple[int, Fit, bool]:
    """How many leading steps of ``block`` to take from ``fit`` (at least one), the state after
    them, and whether the last of them is due its re-split: the steps up to the first in which
    an integer split may be faster."""
    busy = block.b > 0
    lines = _lines(fit.stats, fit.slope, block.b, block.compute_s, block.forgetting, busy)
    resid = _residuals(block.compute_s, fit.fixed_s + fit.slope * block.b, lines.pred)
    var, again, runs = _detector(fit, block, lines, resid, busy)
    steps, due = len(resid), False
    if block.caps.sum() >= block.global_batch:  # (else the re-split waits for the workers)
        goal = _goals(lines.pred, var, block, busy)  # (NaN: no goal, so due: NaN < total is False)
        steady = samples_by(lines.fixed_s, lines.slope, block.caps, goal * (1 + BOUND_MARGIN)) < block.global_batch
        if not steady.all():
            steps, due = int(np.argmin(steady)) + 1, True
    k = steps - 1
    surprises = np.where(busy, 0, fit.surprises)  # calm, but where surprised (again) in the last step
    surprises[again] = runs[k]
    return (
        steps,
        Fit(lines.stats[k].copy(), lines.slope[k].copy(), lines.fixed_s[k].copy(), var[k].copy(), surprises),
        due,
    )


def _lines(
    stats: np.ndarray, last: np.ndarray, b: np.ndarray, compute_s: np.ndarray, forgetting: float, busy: np.ndarray
) -> Lines:
    """The fits of consecutive steps from ``stats`` and the last slope (the statistics of the
    workers not ``busy`` stay: they are not measured)."""
    after = _stats_after(stats, b, compute_s, forgetting)
    if not busy.all():  # (columns are independent: the idle ones are put back once)
        after[:, :, ~busy] = stats[:, ~busy]
    mean_b, mean_t, fitted, valid, through_mean = candidates(after)
    slope = _slopes(last, fitted, valid, through_mean)
    fixed = mean_t - slope * mean_b
    return Lines(after, slope, fixed, fixed + slope * b)


def _stats_after(stats: np.ndarray, b: np.ndarray, t: np.ndarray, forgetting: float) -> np.ndarray:
    """Each step's statistics, (steps, 5, n): decayed, plus the step's measurement."""
    fixed_rows = np.array([np.ones_like(b), b, np.multiply(b, b)])  # the measurement's rows of 1, b, b^2
    bt = np.multiply(b, t)
    out = np.empty((len(t), 5, len(b)))
    for j in range(len(t)):
        np.multiply(stats if j == 0 else out[j - 1], forgetting, out=out[j])
        out[j, :3] += fixed_rows
        out[j, 3] += t[j]
        out[j, 4] += bt[j]
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


def _residuals(compute_s: np.ndarray, first: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Each step's relative residual against the previous step's fitted time (``first``: the
    fitted time before the block)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        resid = np.empty_like(compute_s)
        np.divide(compute_s[0], first, out=resid[0])
        np.divide(compute_s[1:], pred[:-1], out=resid[1:])
        resid -= 1.0
    return resid


def _detector(
    fit: Fit, block: Block, lines: Lines, resid: np.ndarray, busy: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The residual variances after each step, and the workers surprised somewhere with their
    runs of surprises after each step (a column each): a variance is held at a surprise, and a
    second surprise in a row of one sign restarts the worker's fit (``lines`` and ``resid`` are
    redone from there, and that worker's detector)."""
    var = np.empty((len(resid) + 1, len(busy)))  # the variances before each step, then after the last
    var[0] = fit.resid_var
    calm = np.empty(resid.shape, dtype=bool)
    _chain(resid, var, calm, block.sigmas)
    if not busy.all():  # (put back: they were not measured)
        var[:, ~busy], calm[:, ~busy] = fit.resid_var[~busy], True
    again = np.flatnonzero(~np.logical_and.reduce(calm, axis=0))
    runs = np.zeros((len(resid), len(again)), dtype=fit.surprises.dtype)
    if again.size:
        _runs(fit, block, lines, resid, var, calm, again, runs)
    return var[1:], again, runs


def _chain(resid: np.ndarray, var: np.ndarray, calm: np.ndarray, sigmas: float) -> None:
    """The detector step by step, in place: whether each measurement is calm, and the variance
    after it (``var``: the one before the first step, then one row per step)."""
    with np.errstate(invalid="ignore", over="ignore"):
        size, term = np.abs(resid), var_term(resid)
        for j in range(len(resid)):
            calm[j] = surprise_free(size[j], var[j], sigmas)
            var[j + 1] = np.where(calm[j], next_var(var[j], term[j]), var[j])


def _runs(fit: Fit, block: Block, lines: Lines, resid: np.ndarray, var: np.ndarray, calm: np.ndarray,
          again: np.ndarray, runs: np.ndarray) -> None:  # fmt: skip
    """The runs of surprises of the workers ``again`` after each step, in place, restarting (in
    time order) the fits of those surprised twice in a row with one sign."""
    reset = np.zeros(runs.shape, dtype=bool)  # where a restart cleared a run
    while True:
        surprised = ~calm[:, again] & ~reset
        sign = np.where(resid[:, again] > 0, 1, -1)
        runs[:] = np.where(surprised, sign, 0)
        before = np.concatenate([fit.surprises[again][None], runs[:-1]])
        twice = surprised & (before == sign)
        steps = np.flatnonzero(np.logical_or.reduce(twice, axis=1))
        if not steps.size:
            return
        j, which = int(steps[0]), np.flatnonzero(twice[steps[0]])
        reset[j, which], runs[j, which] = True, 0
        workers = again[which]
        _restart(fit, block, lines, resid, j, workers)
        if j + 1 < len(resid):  # their detector from the next step, on the redone residuals
            part = resid[j + 1 :, workers]
            ok, tail = np.empty(part.shape, dtype=bool), np.empty((len(part) + 1, len(workers)))
            tail[0] = var[j + 1, workers]  # (held at the restart's surprise)
            _chain(part, tail, ok, block.sigmas)
            var[j + 2 :, workers], calm[j + 1 :, workers] = tail[1:], ok


def _restart(fit: Fit, block: Block, lines: Lines, resid: np.ndarray, j: int, workers: np.ndarray) -> None:
    """Restart ``workers``' fits at step ``j``: statistics from this measurement alone, the last
    slope scaled by the surprise; their lines and residuals from there redone in place."""
    b, t = block.b[workers], block.compute_s[j:, workers]
    before = (fit.fixed_s[workers] + fit.slope[workers] * b) if j == 0 else lines.pred[j - 1, workers]
    last = (fit.slope[workers] if j == 0 else lines.slope[j - 1, workers]) * (t[0] / before)
    redone = _lines(np.zeros((5, len(workers))), last, b, t, block.forgetting, b > 0)  # (0 f + x is x)
    lines.stats[j:, :, workers], lines.slope[j:, workers] = redone.stats, redone.slope
    lines.fixed_s[j:, workers], lines.pred[j:, workers] = redone.fixed_s, redone.pred
    if len(t) > 1:
        resid[j + 1 :, workers] = _residuals(t[1:], redone.pred[0], redone.pred[1:])


def _goals(pred: np.ndarray, var: np.ndarray, block: Block, busy: np.ndarray) -> np.ndarray:
    """Each step's re-split goal: the current split's fitted time less the hysteresis and the
    noise margin (NaN where that time is not finite: then the check cannot rule a split out)."""
    current = np.max(pred, axis=1, where=busy, initial=-np.inf) if busy.any() else np.zeros(len(pred))
    goal = resplit_goal(current, var.mean(axis=1), block.forgetting, block.hysteresis, int(np.count_nonzero(busy)))
    return np.where(np.isfinite(current), goal, np.nan)
