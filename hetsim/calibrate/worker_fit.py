"""One worker's rows -> its fitted cost curve, noise and standard errors (:func:`fit_worker`).

Every row with samples counts: complete computes exactly, rows cut at the barrier
(``included = false``) as times the compute was known to exceed. The curve is the cost model
asked for (its class) or else chosen on the complete computes
(:func:`~hetsim.calibrate.models.choose`, by held-out error of the least-squares fits to the
size means of :mod:`~hetsim.calibrate.curves`). The chosen curve, and always the affine one
(``WorkerFit.overhead_s`` / ``per_sample_s`` whichever is chosen), are the least-squares fits
over the rows with standard errors right for multiplicative noise
(:func:`~hetsim.calibrate.lsq.fit_lsq`) when no row was cut, and otherwise the maximum
likelihood of complete and cut rows together (:func:`~hetsim.calibrate.censored.fit_mle`,
lognormal noise assumed: the cut rows' tail needs a family). A worker needs two complete
computes: one step tells neither its noise nor two parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import optimize, stats

from hetsim.calibrate.censored import CurveFit, fit_mle
from hetsim.calibrate.curves import AffineCurve, Curve, HingeCurve, Sizes, TableCurve, curve_class
from hetsim.calibrate.hinge import KINK_P, hinge_starts, kink_shown, least_squares_kinks, likelihood_kinks, widened
from hetsim.calibrate.lsq import fit_lsq
from hetsim.calibrate.models import choose, held_out_errors, noise_floor
from hetsim.core.errors import ConfigError
from hetsim.model.costs import CostModel

MIN_COMPLETE = 2  # complete computes a worker's fit needs


@dataclass(frozen=True)
class WorkerFit:
    """One worker's fitted cost: the affine terms (whatever model won), the chosen ``curve`` and
    the standard error of each of its parameters (None: not identified), the lognormal noise
    about it, the held-out error of each model tried, and how many rows (complete and cut at the
    barrier) and batch sizes it rests on."""

    worker: int
    overhead_s: float  # the affine fit's terms (whichever model is chosen)
    per_sample_s: float
    noise_sigma: float  # lognormal sigma around the chosen curve
    r2: float  # of the chosen curve (nan from one batch size)
    residual_cv: float
    rows: int  # complete rows fitted
    batch_sizes: int
    curve: Curve | None = None  # the chosen curve (None: the affine terms above)
    se: Mapping[str, float | None] = field(default_factory=dict)  # standard error per parameter of the curve
    held_out: Mapping[str, float | None] = field(default_factory=dict)  # held-out relative error per model
    cancelled: int = 0  # rows cut at the barrier (fitted as censored)

    @property
    def model(self) -> str:
        return (self.curve or self.cost_curve()).name

    def cost_curve(self) -> Curve:
        return self.curve or AffineCurve(np.array([self.overhead_s, self.per_sample_s]))

    def to_scenario(self, name: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": name, "count": 1}
        curve = self.cost_curve()
        if isinstance(curve, AffineCurve):  # the affine terms as a worker's own keys
            entry.update(overhead_s=float(curve.values[0]), per_sample_s=float(curve.values[1]))
        else:
            entry["cost"] = curve.cost_model().to_dict()
        entry["noise"] = {"dist": "lognormal", "sigma": self.noise_sigma}
        return entry


def fit_worker(
    worker: int,
    local_batch: np.ndarray,
    compute_s: np.ndarray,
    included: np.ndarray | None = None,
    model: type[CostModel] | None = None,
) -> tuple[WorkerFit, list[str]]:
    """Fit one worker from its rows in step order: rows with ``local_batch > 0``; of those, rows
    with ``included`` false (cut at the barrier) as right-censored times. ``model``: the cost
    model to fit (its class: Affine, Hinge or Table), None to choose one by held-out error. A
    worker needs two complete computes (ConfigError otherwise)."""
    asked = None if model is None else curve_class(model)
    b_all = np.asarray(local_batch, dtype=float)
    y_all = np.asarray(compute_s, dtype=float)
    busy, cut = _complete(worker, b_all, y_all, included)
    b, y, cut = b_all[busy], y_all[busy], cut[busy]
    bd, yd = b[~cut], y[~cut]
    sizes = Sizes.of(bd, yd)
    held_out = held_out_errors(sizes)
    affine, warnings = _affine_fit(worker, sizes, b, y, cut)
    form = _chosen(worker, asked, sizes, held_out, bd, yd)
    found = None if form is AffineCurve else _curve_fit(worker, form, sizes, b, y, cut, asked is not None, affine)
    if found is None:
        chosen = affine
    else:
        chosen, warnings = found  # the affine fit's doubts are not the chosen curve's
    curve = chosen.curve
    if isinstance(curve, TableCurve) and yd.size <= sizes.batch.size:  # asked for: auto keeps the simplest here
        warnings.append(
            f"worker {worker}: the table passes through each of its {yd.size} complete rows (no batch size seen "
            "twice), so nothing tells its noise: written as sigma 0, a noise-free worker in a simulation"
        )
    if isinstance(curve, TableCurve) and curve.values[-1] <= curve.values[-2]:
        warnings.append(
            f"worker {worker}: the fitted table is flat from batch {int(sizes.batch[-2])} on, so it claims that "
            "larger batches take no longer; give the trace larger batches or fit another cost model"
        )
    fitted = curve.time_s(bd)
    resid = yd - fitted
    sst = float(((yd - yd.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / sst if sst > 0 and sizes.batch.size > 1 else math.nan
    cv = float(resid.std(ddof=1) / yd.mean())
    overhead, per_sample = (float(v) for v in affine.curve.values)
    fit = WorkerFit(
        worker,
        overhead,
        per_sample,
        chosen.sigma,
        r2,
        cv,
        int(yd.size),
        int(sizes.batch.size),
        curve=None if isinstance(curve, AffineCurve) else curve,
        se=dict(zip(curve.params(), chosen.se())),
        held_out=held_out,
        cancelled=int(cut.sum()),
    )
    return fit, warnings


def _complete(worker: int, b: np.ndarray, y: np.ndarray, included: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the rows with samples and of those cut at the barrier; ConfigError unless two
    computes completed (one step fits nothing: neither its noise nor two parameters)."""
    busy = b > 0
    if not busy.any():
        raise ConfigError("local_batch", f"worker {worker} never got samples (no row with local_batch > 0)")
    finished = np.ones(b.size, dtype=bool) if included is None else np.asarray(included, dtype=bool)
    done, cut = busy & finished, busy & ~finished
    if done.sum() < MIN_COMPLETE:
        raise ConfigError(
            "included" if cut.any() else "compute_s",
            f"worker {worker} completed {int(done.sum())} compute(s) ({int(cut.sum())} cut at the barrier); a fit "
            f"needs at least {MIN_COMPLETE} complete steps",
        )
    if not (y[done] > 0).all():
        raise ConfigError("compute_s", f"worker {worker} has a zero compute time in a row with local_batch > 0")
    return busy, cut


def _tiny(b: np.ndarray, y: np.ndarray) -> float:
    """A negligible positive per-sample cost for rows ``b``, ``y`` (the least slope a fit keeps:
    the cost models need one, so a flat curve keeps its level in the overhead, not in a slope
    through 0)."""
    return 1e-9 * float(y.mean()) / float(b.max())


def _bounds(curve: Curve, b: np.ndarray, y: np.ndarray) -> list[tuple[float, float]]:
    """Each value's bounds in a fit to rows ``b``, ``y`` (:meth:`~hetsim.calibrate.curves.Curve.bounds`):
    times at least a negligible positive value, slopes at least :func:`_tiny`."""
    return curve.bounds(1e-9 * float(y.mean()), _tiny(b, y))


def _refine(start: Curve, b: np.ndarray, y: np.ndarray, cut: np.ndarray, fixed: np.ndarray | None = None) -> CurveFit:
    """``start`` (least squares over the complete rows) as it is, with sandwich standard errors,
    when no row was cut; else the maximum likelihood of complete and cut rows from it."""
    bounds = _bounds(start, b, y)
    low = np.array([lo for lo, _ in bounds])
    start = start.with_values(np.maximum(start.values, low))
    if cut.any():
        return fit_mle(start, bounds, b, y, cut, fixed)
    free = np.ones(start.values.size, dtype=bool) if fixed is None else ~fixed
    return fit_lsq(start, b, y, free, free & (start.values <= low * (1 + 1e-9)))


def _affine_ls(sizes: Sizes, tiny: float) -> Curve:
    """Least squares over the rows (as weighted over the size means), overhead at least 0 and the
    slope at least ``tiny``: a flat curve keeps its level in the overhead."""
    w = np.sqrt(sizes.count)
    design = np.stack([w, w * sizes.batch], axis=1)
    low = np.array([0.0, tiny])
    # bvls: an active-set method, exact at a bound; the default (trf, interior) stops near one,
    # at an overhead of 1e-5 s where the truth is 0, by an amount that differs between CPUs.
    found = optimize.lsq_linear(design, w * sizes.mean, bounds=(low, [np.inf, np.inf]), method="bvls")
    return AffineCurve(np.where(found.active_mask < 0, low, found.x))  # at a bound: exactly it


def _affine_fit(worker: int, sizes: Sizes, b: np.ndarray, y: np.ndarray, cut: np.ndarray) -> tuple[CurveFit, list[str]]:
    """The affine curve; from one batch size the per-sample cost alone."""
    if sizes.batch.size == 1:
        start = AffineCurve(np.array([0.0, float(sizes.mean[0] / sizes.batch[0])]))
        note = (
            f"worker {worker}: seen at one batch size ({int(sizes.batch[0])}) only, so overhead and per-sample cost "
            "cannot be separated; fitted the per-sample cost alone (overhead_s = 0)"
        )
        return _refine(start, b, y, cut, fixed=np.array([True, False])), [note]
    found = _refine(_affine_ls(sizes, _tiny(b, y)), b, y, cut)
    notes = []
    overhead, per_sample = (float(v) for v in found.curve.values)
    if found.bound[0]:
        notes.append(
            f"worker {worker}: the affine fit puts the overhead at its bound 0 (per-sample {per_sample:.3g} s); "
            "fitted the per-sample cost alone (overhead_s = 0)"
        )
    if found.bound[1]:
        notes.append(
            f"worker {worker}: its time does not grow with the batch (overhead {overhead:.3g} s); fitted a flat "
            "curve (per-sample cost at its least positive value)"
        )
    return found, notes


def _chosen(
    worker: int,
    asked: type[Curve] | None,
    sizes: Sizes,
    held_out: Mapping[str, float | None],
    b: np.ndarray,
    y: np.ndarray,
) -> type[Curve]:
    """The form kept: ``asked``, or (None) the choice by held-out error."""
    if asked is None:
        return choose(dict(held_out), noise_floor(b, y, sizes))
    if asked is not AffineCurve and sizes.batch.size < asked.min_sizes:  # affine: the per-sample cost alone
        seen = f"worker {worker} was seen at {sizes.batch.size} batch size(s)"
        raise ConfigError("model", f"{seen}; {asked.name} needs {asked.min_sizes} or more")
    return asked


def _curve_fit(
    worker: int,
    form: type[Curve],
    sizes: Sizes,
    b: np.ndarray,
    y: np.ndarray,
    cut: np.ndarray,
    asked: bool,
    line: CurveFit,
) -> tuple[CurveFit, list[str]] | None:
    """A hinge or table: its least-squares fit to the size means, refined by :func:`_refine`;
    None when none fits and the form was chosen, not ``asked`` for (the affine is kept). A hinge
    whose kink the complete rows do not show is the line, its floor fixed at the line's time at
    the smallest size (a bound)."""
    start = form.fit(sizes)
    if start is None:
        if asked:
            raise ConfigError("model", f"worker {worker}: no {form.name} curve with a positive slope fits its times")
        return None
    if isinstance(start, HingeCurve):
        return _hinge_fit(worker, start, sizes, b, y, cut, line, forced=asked)
    found = _refine(start, b, y, cut)
    if isinstance(start, TableCurve) and np.any(np.diff(found.curve.values) < 0):  # cut rows can bend it
        weights = 1.0 / np.maximum(np.diag(found.cov), 1e-300)
        flat = optimize.isotonic_regression(found.curve.values, weights=weights).x
        found = replace(found, curve=found.curve.with_values(flat))  # non-decreasing again
    return found, []


def _hinge_fit(
    worker: int, start: Curve, sizes: Sizes, b: np.ndarray, y: np.ndarray, cut: np.ndarray, line: CurveFit, forced: bool
) -> tuple[CurveFit, list[str]]:
    """A hinge asked for (``forced``): the best hinge, with the errors of every kink the rows
    allow (:func:`~hetsim.calibrate.hinge.widened`), said in a warning where the rows do not
    show the kink. Under auto: the hinge where they show it, else ``line`` (the affine fit), its
    floor fixed at the line's time at the smallest size (a bound). The kink is shown by the F
    test of the least-squares fits over the complete rows
    (:func:`~hetsim.calibrate.hinge.kink_shown`), or where rows were cut by the likelihood ratio
    of the censored fits (two parameters more: the floor and the kink)."""
    tries: list[CurveFit] = []
    if cut.any():  # the likelihood cannot move the kink past a batch size: try it on each side of every one
        tries = [_refine(s, b, y, cut) for s in [start, *hinge_starts(sizes)]]
        found = min(tries, key=lambda f: f.nll if np.isfinite(f.nll) else np.inf)
        p_value = float(stats.chi2.sf(max(2.0 * (line.nll - found.nll), 0.0), 2))
    else:
        found = _refine(start, b, y, cut)
        p_value = kink_shown(sizes, b, y, line.curve.values, start)
    no_kink = f"worker {worker}: its times show no kink (a hinge is no better than a line, p = {p_value:.2g})"
    if forced:
        if cut.any():
            kinks = likelihood_kinks(tries, line, _level(b, y, cut))
        else:
            kinks = least_squares_kinks(sizes, b, y, line)
        if p_value < KINK_P:
            kept = widened(found, kinks)
            return kept, _untold(worker, kept, found.free)
        note = (
            f"{no_kink}; kept the hinge asked for, with the errors of every kink the rows allow (none where one "
            "leaves a parameter unknown: the floor where a line fits, the slope where a flat curve does)"
        )
        return widened(found, kinks), [note]
    if p_value < KINK_P:
        return found, _untold(worker, found, found.free)
    overhead, per_sample = (float(v) for v in line.curve.values)
    bent = HingeCurve(np.array([overhead + per_sample * sizes.batch[0], overhead, per_sample]))
    note = f"{no_kink}; fitted the line, with floor_s only known to be at most its time at batch {int(sizes.batch[0])}"
    return _refine(bent, b, y, cut, fixed=np.array([True, False, False])), [note]


def _untold(worker: int, hinge: CurveFit, free: np.ndarray) -> list[str]:
    """A warning where the rows show a hinge's kink but leave some of its parameters unknown: one
    batch size past the kink (at the fitted kink or at one the rows allow) fixes the time there,
    not the overhead and slope apart. ``free``: the parameters fitted (the widening drops the
    unknown ones from ``hinge.free``)."""
    names = ("floor_s", "overhead_s", "per_sample_s")
    unknown = [name for name, se, fitted in zip(names, hinge.se(), free) if fitted and se is None]
    if not unknown:
        return []
    return [
        f"worker {worker}: its rows do not tell {' and '.join(unknown)} apart (a kink they allow leaves them "
        "unknown: one batch size or none on its side fixes only the time there): no error is given for them, and "
        "the fitted curve between that size and the kink is one of many that fit"
    ]


def _level(b: np.ndarray, y: np.ndarray, cut: np.ndarray) -> CurveFit:
    """A flat curve by maximum likelihood of complete and cut rows: an affine fit whose slope is
    held at its least positive value."""
    level = AffineCurve(np.array([float(y[~cut].mean()), _tiny(b, y)]))
    return _refine(level, b, y, cut, fixed=np.array([False, True]))


def worker_table(fits: Sequence[WorkerFit]) -> list[dict[str, Any]]:
    """The fits as plain rows (for tables and JSON): the affine fit's terms (named so: a hinge's
    own overhead and slope, which ``se`` is of, are in ``params``), the chosen model with its
    parameters, their standard errors and every model's held-out error."""
    return [
        {
            "worker": f.worker,
            "affine_overhead_s": f.overhead_s,
            "affine_per_sample_s": f.per_sample_s,
            "noise_sigma": f.noise_sigma,
            "r2": f.r2 if math.isfinite(f.r2) else None,
            "residual_cv": f.residual_cv,
            "rows": f.rows,
            "batch_sizes": f.batch_sizes,
            "model": f.model,
            "params": f.cost_curve().params(),
            "se": dict(f.se),
            "held_out_error": dict(f.held_out),
            "cancelled_rows": f.cancelled,
        }
        for f in fits
    ]
