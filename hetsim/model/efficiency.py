"""Statistical efficiency: how much a step of a given effective batch advances training.

A workload may carry ``[workload.efficiency]`` (read by :func:`hetsim.scenario.config.make_efficiency`):
the gradient noise scale (``noise_scale``, ``B_noise`` in samples, a number or a schedule over
training progress; or Pollux's ``grad_sqr`` and ``grad_var``, with
``B_noise = base_batch * grad_var / grad_sqr``), the batch its learning-rate schedule was tuned
for (``base_batch``, ``M0``) and, optionally, the optimizer steps at ``M0`` that reach the
target accuracy (``target_steps``).

A step whose applied gradients came from ``B_eff`` samples advances training by

    gain(B_eff) = (var + sqr) / (var / (B_eff / M0) + sqr)            (Pollux, Qiao et al. 2021)
                = (B_eff / M0) * (B_noise + M0) / (B_noise + B_eff)

steps at ``M0``: the form of McCandlish et al. 2018, ``S = S_min (1 + B_noise / B)``. At
``B_eff = M0`` the gain is 1; far below ``B_noise`` it grows linearly with the batch, far above
it saturates at ``1 + B_noise / M0``. The target is reached when the gains sum to ``target_steps``.

The noise scale that governs a batch may depend on the batch itself (the measured ``B_simple`` is
not the critical batch, and how the learning rate is scaled with the batch moves it again:
McCandlish et al., sections 2.2 and 3.3): ``batch_exponent`` ``alpha`` makes it

    B_noise(progress, B) = B_noise(progress) * (B / measured_batch) ** alpha

(``measured_batch`` defaults to ``base_batch``; ``alpha = 0``, the default, is the gain above
exactly). ``lr_scaling`` records the learning-rate rule (``sqrt``, ``linear``, ``none``) the table
was fitted under: a fit holds for that rule only. ``fit_batches`` is the range of global batches
the fit measured (beyond it a prediction extrapolates: :meth:`Efficiency.extrapolates`) and the
``*_sd`` fields its standard errors (:mod:`hetsim.model.efficiency_fit`, which fits the table).

The noise scale grows as training proceeds (McCandlish et al., fig. 4: often tenfold or more), so
it may be a schedule: ``[[progress, B_noise], ...]`` knots, progress in steps at ``M0`` from 0,
interpolated linearly and held beyond the last. A step's gain then uses the noise scale at the
progress made before it, so progress is a recurrence, summed step by step
(:meth:`Efficiency.progress`), by the simulator's summaries and ``analyze`` alike.

``B_eff`` counts the samples whose gradients were applied (:func:`effective_batch`): the
included workers only (backup and K-sync drop the rest), and, for a combine that averages the
workers' gradients instead of weighting them by their batches (the paper's DP-SGD), the
``n^2 / sum_i (1 / b_i)`` of n unequal means, which is below ``sum_i b_i`` whenever the batches
differ (the variance of a plain mean of means).

A stale update (asynchronous training: ``tau`` updates were applied between the worker's read of
the model and the application of its gradient) is discounted by :func:`staleness_discount`,
``1 / max(1, tau)``: the staleness-dependent learning rate ``eta / tau`` of Zhang, Gupta, Lian and
Liu, "Staleness-aware Async-SGD for Distributed Deep Learning" (IJCAI 2016), with progress taken
as proportional to the step's learning rate. This is an assumption, not a measurement: hetsim's
real runs (``validation``) are synchronous, so it has not been checked against an asynchronous one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_COUNT, MAX_LR, Param

LR_RULES = ("sqrt", "linear", "none")  # how a trainer scales its learning rate with the batch
OPTIMIZERS = ("sgd", "adam")  # the optimizers a fitted table may come from (validation batch-sweep trains with them)


def lr_factor(rule: str, batch: float, base_batch: float) -> float:
    """What a learning rate set at ``base_batch`` is multiplied by at ``batch`` under ``rule`` (one
    of :data:`LR_RULES`): ``sqrt`` (Krizhevsky 2014; Hoffer et al. 2017), ``linear`` (Goyal et al.
    2017) or ``none``. A table holds only for the rule it was fitted under, so a trainer that
    runs at another batch scales its rate by this."""
    ratio = batch / base_batch
    return {"sqrt": math.sqrt(ratio), "linear": ratio, "none": 1.0}[rule]


EXPONENT_BOUND = 4.0  # |batch_exponent| at most this: in a table, and in the fit (hetsim.model.efficiency_fit)
# An sd of a log (or of the exponent) beyond this is no measurement: the fit leaves it out, a table may not hold it
# (goodput's draws of the noise scale, exp(sd x a Gauss-Hermite node), stay within a float; an interval's bound
# past a float's range reads as unbounded)
SD_MAX = 50.0

EFFICIENCY_PARAMS = (
    Param("noise_scale", default=None, low=0.0, low_open=True,
          doc="gradient noise scale B_noise, samples; or [[progress, B_noise], ...] over progress"),
    Param("grad_sqr", default=None, low=0.0, low_open=True, doc="squared norm of the true gradient (Pollux)"),
    Param("grad_var", default=None, low=0.0, doc="variance of a gradient at base_batch (Pollux)"),
    Param("base_batch", "integer", low=1, high=MAX_COUNT, doc="M0: the batch the learning rate was tuned for"),
    Param("target_steps", default=None, low=0.0, low_open=True, doc="steps at base_batch to the target accuracy"),
    Param("batch_exponent", default=None, low=-EXPONENT_BOUND, high=EXPONENT_BOUND,
          doc="alpha: the noise scale at batch B is B_noise * (B / measured_batch) ** alpha (default 0)"),
    Param("measured_batch", "integer", default=None, low=1, high=MAX_COUNT,
          doc="the batch B_noise holds at (default base_batch)"),
    Param("lr_scaling", "choice", default=None, choices=LR_RULES,
          doc="the learning-rate rule the table was fitted under: sqrt, linear or none"),
    Param("lr", default=None, low=0.0, low_open=True, high=MAX_LR,
          doc="the learning rate set at base_batch that the table was measured with (scaled by lr_scaling)"),
    Param("optimizer", "choice", default=None, choices=OPTIMIZERS, doc="the optimizer it was measured with"),
    Param("measured_on", "string", default=None, blank=False, doc="the workload it was measured on (plan names it)"),
    Param("fit_batches", "numbers", default=None, doc="[smallest, largest] global batch the fit measured"),
    Param("noise_scale_sd", default=None, low=0.0, high=SD_MAX, doc="standard error of ln(noise_scale), the fit's"),
    Param("batch_exponent_sd", default=None, low=0.0, high=SD_MAX, doc="standard error of batch_exponent, the fit's"),
    Param("target_steps_sd", default=None, low=0.0, high=SD_MAX, doc="standard error of ln(target_steps), the fit's"),
    Param("covariance", "matrix", default=None,
          doc="covariance of the fitted ln(target_steps), ln(noise_scale), batch_exponent (those with an *_sd)"),
    Param("run_sd", default=None, low=0.0, high=SD_MAX,
          doc="sd of one run's ln(steps) about the fit (the runs' scatter)"),
    Param("run_dof", "integer", default=None, low=1, high=MAX_COUNT,
          doc="the fit's residual degrees of freedom (runs less parameters): its intervals' t quantile"),
)  # fmt: skip
EXTENSION_FIELDS = ("batch_exponent", "measured_batch", "lr_scaling", "lr", "optimizer", "measured_on", "fit_batches",
                    "noise_scale_sd", "batch_exponent_sd", "target_steps_sd", "covariance", "run_sd",
                    "run_dof")  # fmt: skip
FITTED = ("target_steps", "noise_scale", "batch_exponent")  # the free parameters' order in ``covariance``

Schedule = tuple[tuple[float, float], ...]  # (progress in steps at base_batch, B_noise) knots, progress from 0


@dataclass(frozen=True)
class Efficiency:
    """A workload's statistical efficiency (see the module's docstring). ``schedule`` is empty
    for a constant ``noise_scale``; otherwise ``noise_scale`` is its first value."""

    noise_scale: float
    base_batch: int
    target_steps: float | None = None
    schedule: Schedule = ()
    batch_exponent: float = 0.0
    measured_batch: int | None = None
    lr_scaling: str | None = None
    lr: float | None = None  # the rate at base_batch it was measured with, where recorded
    optimizer: str | None = None
    measured_on: str | None = None  # the workload, where recorded (calibrate-efficiency writes the sweep's)
    fit_batches: tuple[float, float] | None = None
    noise_scale_sd: float | None = None
    batch_exponent_sd: float | None = None
    target_steps_sd: float | None = None
    # of the fitted parameters (:data:`FITTED`'s, those with an sd), and one run's scatter about the fit
    covariance: tuple[tuple[float, ...], ...] | None = None
    run_sd: float | None = None
    run_dof: int | None = None  # the runs less the fitted parameters: the intervals' t quantile (None: normal)

    @property
    def fitted(self) -> tuple[str, ...]:
        """The parameters the fit left free (:data:`FITTED`'s order), known by their standard errors."""
        return tuple(k for k in FITTED if getattr(self, f"{k}_sd") is not None)

    def noise_at(self, progress: float) -> float:
        """``B_noise`` once ``progress`` steps at ``base_batch`` have been made."""
        if not self.schedule:
            return self.noise_scale
        at, value = zip(*self.schedule)
        return float(np.interp(progress, at, value))

    def gain(self, effective_batch: float | np.ndarray, noise_scale: float | np.ndarray | None = None) -> Any:
        """Progress, in steps at ``base_batch``, of a step of ``effective_batch`` samples (0 for 0)
        at ``noise_scale`` (default: the noise scale at the start)."""
        b = np.asarray(effective_batch, dtype=float)
        m0 = float(self.base_batch)
        noise: Any = self.noise_scale if noise_scale is None else noise_scale
        if self.batch_exponent != 0:  # the batch's own noise scale; a batch of 0 gains 0 whatever it is
            ref = float(self.measured_batch or self.base_batch)
            noise = noise * (np.where(b > 0, b, ref) / ref) ** self.batch_exponent
        out = (b / m0) * (noise + m0) / (noise + b)
        return float(out) if out.ndim == 0 else out

    def steps_to_target(self, batch: float) -> float:
        """Steps at a fixed global ``batch`` until the progress reaches ``target_steps``: exactly
        ``target_steps / gain(batch)`` at a constant noise scale; under a schedule the integral
        ``int_0^target dp / gain(batch; B_noise(p))`` (the step-by-step recurrence of
        :meth:`progress` in the limit of small steps)."""
        if self.target_steps is None:
            raise ValueError("steps_to_target needs target_steps")
        if not self.schedule:
            return float(self.target_steps / self.gain(batch))
        p = np.linspace(0.0, self.target_steps, 1025)
        at, value = zip(*self.schedule)
        per_step = np.asarray(self.gain(np.full_like(p, batch), np.interp(p, at, value)))
        return float(np.trapezoid(1.0 / per_step, p))

    def extrapolates(self, batch: float) -> bool:
        """Whether ``batch`` lies outside the range the fit measured (False without one)."""
        return self.fit_batches is not None and not self.fit_batches[0] <= batch <= self.fit_batches[1]

    def progress(self, effective_batches: np.ndarray, discount: np.ndarray | None = None) -> np.ndarray:
        """The progress after each step of ``effective_batches`` (cumulative), each gain scaled
        by ``discount`` (stale updates); step by step under a schedule, each step at the noise
        scale of the progress before it."""
        b = np.asarray(effective_batches, dtype=float)
        scale = np.ones_like(b) if discount is None else np.asarray(discount, dtype=float)
        if not self.schedule:
            return np.cumsum(self.gain(b) * scale)
        out = np.empty_like(b)
        done = 0.0
        for k, (batch, factor) in enumerate(zip(b.tolist(), scale.tolist())):
            done += factor * self.gain(batch, self.noise_at(done))
            out[k] = done
        return out

    def to_dict(self) -> dict[str, Any]:
        noise: Any = [list(k) for k in self.schedule] if self.schedule else self.noise_scale
        out: dict[str, Any] = {"noise_scale": noise, "base_batch": self.base_batch}
        if self.target_steps is not None:
            out["target_steps"] = self.target_steps
        for key in EXTENSION_FIELDS:  # only those set: a plain table stays as it was
            value = getattr(self, key)
            if value is not None and not (key == "batch_exponent" and value == 0):
                out[key] = (
                    [list(v) if isinstance(v, tuple) else v for v in value] if isinstance(value, tuple) else value
                )
        return out


def extension_fields(values: dict[str, Any], path: str = "workload.efficiency") -> dict[str, Any]:
    """The checked ``[workload.efficiency]`` values of the batch-dependent extension, as
    :class:`Efficiency`'s keyword arguments (``fit_batches`` must be ``[smallest, largest]``)."""
    out = {k: values.get(k) for k in EXTENSION_FIELDS if values.get(k) is not None}
    fit = out.get("fit_batches")
    if fit is not None:
        if len(fit) != 2 or not 0 < fit[0] <= fit[1]:
            raise ConfigError(
                f"{path}.fit_batches", f"must be [smallest, largest] with 0 < smallest <= largest, got {list(fit)}"
            )
        out["fit_batches"] = (float(fit[0]), float(fit[1]))
    if out.get("covariance") is not None:
        _check_covariance(out, f"{path}.covariance")
    return out


def _check_covariance(values: dict[str, Any], field: str) -> None:
    """The fit's covariance must be of the parameters that have a standard error (:data:`FITTED`'s
    order), symmetric, with those errors squared on its diagonal, and positive semi-definite."""
    cov = np.asarray(values["covariance"], dtype=float)
    sds = [values[f"{k}_sd"] for k in FITTED if values.get(f"{k}_sd") is not None]
    if not sds:
        raise ConfigError(field, "is of the fitted parameters' standard errors, and none is given "
                          "(target_steps_sd, noise_scale_sd, batch_exponent_sd)")  # fmt: skip
    if cov.shape[0] != len(sds):
        n = cov.shape[0]
        raise ConfigError(field, f"must be {len(sds)} x {len(sds)}, one row per fitted parameter with an *_sd "
                          f"(ln target_steps, ln noise_scale, batch_exponent), got {n} x {n}")  # fmt: skip
    sd = np.asarray(sds, dtype=float)
    if not np.allclose(cov, cov.T, rtol=1e-6, atol=0.0):
        raise ConfigError(field, "must be symmetric")
    if not np.allclose(np.diag(cov), sd**2, rtol=1e-6, atol=0.0):
        text = lambda values: ", ".join(f"{v:.6g}" for v in values)  # noqa: E731
        raise ConfigError(
            field, f"its diagonal must be the *_sd fields squared ({text(sd**2)}), got ({text(np.diag(cov))})"
        )
    unit = np.where(sd > 0, sd, 1.0)  # the correlations, where an error is 0 its row as it is
    with np.errstate(all="ignore"):  # errors of 1e-200: their product underflows, a correlation overflows
        corr = cov / unit[:, None] / unit[None, :]
    if not np.all(np.isfinite(corr)) or np.linalg.eigvalsh(corr).min() < -1e-9:
        raise ConfigError(field, "must be positive semi-definite (a correlation beyond -1 or 1)")


def effective_batch(
    batches: Sequence[int] | np.ndarray, included: Sequence[bool] | np.ndarray, weighted: bool
) -> float:
    """The samples a step's applied gradients are worth: the included workers' batches summed
    (``weighted``: gradients combined as ``sum_i (b_i/B) g_i``), or ``n^2 / sum_i (1/b_i)`` over the
    n included workers with samples (a plain mean of their gradients)."""
    return float(effective_batches(np.asarray([batches]), np.asarray([included]), weighted)[0])


def effective_batches(per_step_batches: np.ndarray, per_step_included: np.ndarray, weighted: bool) -> np.ndarray:
    """:func:`effective_batch` of every row (a step) of two steps x workers arrays."""
    b = np.where(per_step_included.astype(bool), per_step_batches.astype(float), 0.0)
    if weighted:
        return np.asarray(b.sum(axis=1))
    n = (b > 0).sum(axis=1)
    inverse = np.where(b > 0, 1.0 / np.where(b > 0, b, 1.0), 0.0).sum(axis=1)
    return np.where(n > 0, n**2 / np.where(inverse > 0, inverse, 1.0), 0.0)


def staleness_discount(staleness: np.ndarray) -> np.ndarray:
    """``1 / max(1, tau)`` per update (see the module's docstring: an assumption)."""
    return 1.0 / np.maximum(1.0, np.asarray(staleness, dtype=float))
