"""One worker's rows -> its fitted cost curve, noise and standard errors (:func:`fit_worker`).

Only complete computes are fitted: rows with samples and, where the trace says, ``included``.
The affine fit is always made (least squares over the rows, as before: its terms are
``WorkerFit.overhead_s`` / ``per_sample_s`` whichever model is chosen, with OLS standard
errors); under ``model = "auto"`` the curve kept is the one :func:`~hetsim.calibrate.models.choose`
picks by held-out error. Steps cut at the barrier are then accounted for as censored times
(:func:`~hetsim.calibrate.noise.censored_scale`), which rescales the curve.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from hetsim.calibrate.models import (
    MIN_SIZES,
    Curve,
    Sizes,
    bootstrap_se,
    check_model,
    choose,
    fit_curve,
    held_out_errors,
    noise_floor,
)
from hetsim.calibrate.noise import censored_scale
from hetsim.errors import ConfigError


@dataclass(frozen=True)
class WorkerFit:
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
        return self.curve.model if self.curve is not None else "affine"

    def cost_curve(self) -> Curve:
        return self.curve or Curve("affine", np.array([self.overhead_s, self.per_sample_s]))

    def to_scenario(self, name: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": name, "count": 1}
        if self.model == "affine":
            entry.update(overhead_s=self.overhead_s, per_sample_s=self.per_sample_s)
        else:
            entry["cost"] = self.cost_curve().cost_model().to_dict()
        entry["noise"] = {"dist": "lognormal", "sigma": self.noise_sigma}
        return entry


def fit_worker(
    worker: int,
    local_batch: np.ndarray,
    compute_s: np.ndarray,
    included: np.ndarray | None = None,
    model: str = "auto",
) -> tuple[WorkerFit, list[str]]:
    """Fit one worker: rows with ``local_batch > 0``; of those, rows with ``included`` false
    (cut at the barrier) only as lower bounds. ``model``: auto, affine, hinge or table."""
    check_model(model)
    b_all = np.asarray(local_batch, dtype=float)
    y_all = np.asarray(compute_s, dtype=float)
    done, cut = _complete(worker, b_all, y_all, included)
    b, y = b_all[done], y_all[done]
    affine, affine_se, warnings = _affine_rows(worker, b, y)
    sizes = Sizes.of(b, y)
    held_out = held_out_errors(sizes)
    curve, se = _chosen(worker, model, affine, affine_se, sizes, held_out, b, y)
    if curve.model != "affine":
        warnings = []  # the affine fit's doubts are not the chosen curve's
    if curve.model == "table" and curve.values[-1] <= curve.values[-2]:
        warnings.append(
            f"worker {worker}: the fitted table is flat from batch {int(sizes.batch[-2])} on, so it claims that "
            "larger batches take no longer; give the trace larger batches or choose another --model"
        )
    sigma = float(np.log(y / curve.time_s(b)).std(ddof=1)) if y.size > 1 else 0.0
    if cut.any():
        censored = censored_scale(np.log(y / curve.time_s(b)), np.log(y_all[cut] / curve.time_s(b_all[cut])))
        curve, affine, sigma = curve.scaled(censored.factor), affine.scaled(censored.factor), censored.sigma
        se = _scaled_se(se, curve, censored.factor, censored.factor_se, one_size=sizes.batch.size == 1)
    fitted = curve.time_s(b)
    resid = y - fitted
    sst = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / sst if sst > 0 and sizes.batch.size > 1 else math.nan
    cv = float(resid.std(ddof=1) / y.mean()) if y.size > 1 else 0.0
    overhead, per_sample = (float(v) for v in affine.values)
    fit = WorkerFit(
        worker,
        overhead,
        per_sample,
        sigma,
        r2,
        cv,
        int(y.size),
        int(sizes.batch.size),
        curve=None if curve.model == "affine" else curve,
        se=se,
        held_out=held_out,
        cancelled=int(cut.sum()),
    )
    return fit, warnings


def _complete(worker: int, b: np.ndarray, y: np.ndarray, included: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the complete computes (samples, included) and of those cut at the barrier."""
    busy = b > 0
    if not busy.any():
        raise ConfigError("local_batch", f"worker {worker} never got samples (no row with local_batch > 0)")
    finished = np.ones(b.size, dtype=bool) if included is None else np.asarray(included, dtype=bool)
    done, cut = busy & finished, busy & ~finished
    if not done.any():
        raise ConfigError(
            "included",
            f"worker {worker} never completed a compute: all its {int(cut.sum())} rows with samples were cut at "
            "the barrier (included = false), so its cost cannot be fitted",
        )
    if not (y[done] > 0).all():
        raise ConfigError("compute_s", f"worker {worker} has a zero compute time in a row with local_batch > 0")
    return done, cut


def _scaled_se(
    se: Mapping[str, float | None], curve: Curve, k: float, k_se: float, one_size: bool
) -> dict[str, float | None]:
    """Standard errors of the parameters of ``curve`` (already scaled by ``k``) from those before
    scaling and ``k``'s. From one batch size the censored fit alone sets the level, so only
    ``k``'s counts; otherwise both (in quadrature)."""
    rel = k_se / k
    out: dict[str, float | None] = {}
    for name, value in curve.params().items():
        before = se.get(name)
        if before is None:
            out[name] = None
            continue
        own = 0.0 if one_size else k * before
        out[name] = float(math.hypot(own, value * rel)) if math.isfinite(rel) else own or None
    return out


def _affine_rows(worker: int, b: np.ndarray, y: np.ndarray) -> tuple[Curve, dict[str, float | None], list[str]]:
    """Least squares of compute ~ overhead + per_sample * b over the rows, with OLS standard
    errors; the per-sample cost alone from one batch size or an intercept below 0."""
    sizes = np.unique(b)
    if sizes.size == 1:
        note = (
            f"worker {worker}: seen at one batch size ({int(sizes[0])}) only, so overhead and per-sample cost "
            "cannot be separated; fitted the per-sample cost alone (overhead_s = 0)"
        )
        per_sample = float(y.sum() / b.sum())
        se = float(y.std(ddof=1) / math.sqrt(y.size) / sizes[0]) if y.size > 1 else None
        return Curve("affine", np.array([0.0, per_sample])), {"overhead_s": None, "per_sample_s": se}, [note]
    fit = stats.linregress(b, y)
    if fit.intercept >= 0 and fit.slope > 0:
        se_pair: dict[str, float | None] = {
            "overhead_s": float(fit.intercept_stderr),
            "per_sample_s": float(fit.stderr),
        }
        return Curve("affine", np.array([float(fit.intercept), float(fit.slope)])), se_pair, []
    note = (
        f"worker {worker}: the affine fit gave overhead {fit.intercept:.3g} s and per-sample {fit.slope:.3g} s; "
        "fitted the per-sample cost alone (overhead_s = 0)"
    )
    per_sample = float(np.linalg.lstsq(b[:, None], y, rcond=None)[0][0])
    dof = y.size - 1
    se = float(math.sqrt(((y - per_sample * b) ** 2).sum() / dof / (b * b).sum())) if dof > 0 else None
    return Curve("affine", np.array([0.0, per_sample])), {"overhead_s": None, "per_sample_s": se}, [note]


def _chosen(
    worker: int,
    model: str,
    affine: Curve,
    affine_se: dict[str, float | None],
    sizes: Sizes,
    held_out: Mapping[str, float | None],
    b: np.ndarray,
    y: np.ndarray,
) -> tuple[Curve, dict[str, float | None]]:
    """The curve kept (``model``, or under auto the choice by held-out error) and its standard errors."""
    if model == "auto":
        name = choose(dict(held_out), noise_floor(b, y, sizes))
    else:
        name = model
        if name != "affine" and sizes.batch.size < MIN_SIZES[name]:  # affine: the per-sample cost alone
            raise ConfigError(
                "--model",
                f"worker {worker} was seen at {sizes.batch.size} batch size(s); {name} needs {MIN_SIZES[name]} or more",
            )
    if name == "affine":
        return affine, affine_se
    curve = fit_curve(name, sizes)
    if curve is None:
        if model != "auto":
            raise ConfigError("--model", f"worker {worker}: no {name} curve with a positive slope fits its times")
        return affine, affine_se
    spread = bootstrap_se(curve, b, y, sizes)
    keys = list(curve.params())
    return curve, {k: (None if spread is None else float(spread[i])) for i, k in enumerate(keys)}


def worker_table(fits: Sequence[WorkerFit]) -> list[dict[str, Any]]:
    """The fits as plain rows (for tables and JSON): the affine terms, the chosen model with its
    parameters, their standard errors and every model's held-out error."""
    return [
        {
            "worker": f.worker,
            "overhead_s": f.overhead_s,
            "per_sample_s": f.per_sample_s,
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
