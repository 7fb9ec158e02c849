"""Fitting ``[workload.efficiency]`` to measured steps to a target accuracy at several global batches.

The model is :mod:`hetsim.model.efficiency`'s: a run at a fixed global batch ``B`` reaches the target
after ``S(B) = steps_to_target(B)`` steps, which at a constant noise scale is McCandlish et al.'s
(2018) ``S = S_min (1 + B_noise / B)`` written at the base batch ``M0``,

    S(B) = target_steps * (B_noise(B) + B) * M0 / (B * (B_noise(B) + M0)),
    B_noise(B) = noise_scale * (B / M0) ** batch_exponent,

and, when the run measured the noise scale over training, the same with ``noise_scale`` a schedule
over progress of the measured shape, scaled as a whole (``shape``: the knots' progress as a
fraction of the target, and their noise scale relative to the first). The free parameters are
``ln target_steps``, ``ln noise_scale`` and ``batch_exponent``; how many are fitted follows the
distinct batches measured (one: the target only, at the given noise scale; two: and the noise
scale; three or more: and the exponent), as a model with more parameters than batches is not
identified. :func:`fit` minimises the squared error of ``ln S`` over every run (each seed one
point; the errors of steps to a target are closer to multiplicative than additive), by
:func:`scipy.optimize.least_squares`, and takes the parameters' covariance from the Jacobian,
``s^2 (J^T J)^-1`` with ``s^2`` the residuals' variance (the runs' scatter about the fit);
:meth:`Fit.predict` gives a prediction with its interval by the delta method.

A run that stopped before the target (a sweep's ``--quick`` cap) says only that its steps exceed
the ones it ran. Leaving it out would keep the fast seeds of that batch and bias the fit toward
fewer steps, so such runs enter as right-censored (``censored``): ``ln S`` is taken normal about
the model's, and the likelihood of the runs that reached the target and of those cut
(``P(ln S > ln steps_run)``) is maximised over the free parameters and ``ln sigma`` together
(a Tobit regression); the covariance is the inverse of the observed information. Without a cut
run it is the least-squares fit above, exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.model.efficiency import EXPONENT_BOUND, SD_MAX, Efficiency

Shape = tuple[tuple[float, float], ...]  # (progress / target_steps, B_noise / first B_noise) knots
DEFAULT_NOISE = 1.0  # the starting noise scale when none was measured, in units of the base batch
LOG_SIGMA_BOUNDS = (float(np.log(1e-3)), float(np.log(10.0)))  # the censored fit's ln sigma
LEVEL = 0.95  # the intervals' confidence level


@dataclass(frozen=True)
class Fit:
    """A fitted efficiency, the covariance of its free parameters (``ln target_steps``, then
    ``ln noise_scale``, then ``batch_exponent``, as many as were free) and the residuals' sd."""

    efficiency: Efficiency
    free: tuple[str, ...]
    covariance: np.ndarray
    residual_sd: float  # with censored runs, the likelihood's sigma of ln(steps)
    censored: int = 0  # runs stopped before the target that the fit took as censored

    def predict(self, batch: float, level: float = LEVEL, one_run: bool = False) -> tuple[float, float, float]:
        """:func:`steps_interval` of the fitted efficiency (which carries the covariance and the
        runs' scatter)."""
        return steps_interval(self.efficiency, batch, level, one_run)


def steps_interval(eff: Efficiency, batch: float, level: float = LEVEL, one_run: bool = False,
                   ) -> tuple[float, float, float]:  # fmt: skip
    """Steps to the target at ``batch``: ``eff``'s, and the ``level`` interval of its fitted
    parameters' uncertainty; ``one_run``: of a single run's steps (:func:`steps_log_sd`). NaN
    bounds where that is not known (a table written by hand, or a fit with no residual degree of
    freedom)."""
    centre, found = bands(eff, batch, level=level)
    low, high = ("one_run_low", "one_run_high") if one_run else ("low", "high")
    return centre, found.get(low, float("nan")), found.get(high, float("nan"))


def bands(eff: Efficiency, batch: float, value: float | None = None, level: float = LEVEL,
          ) -> tuple[float, dict[str, float]]:  # fmt: skip
    """The steps to the target at ``batch``, and the ``level`` intervals of :func:`steps_log_sd`
    about ``value`` (default those steps; a time in proportion to them): ``low``/``high`` the
    fitted parameters', ``one_run_low``/``one_run_high`` a single run's; each absent where the
    table lacks it."""
    centre, fit_sd, run_sd = steps_log_sd(eff, batch)
    value = centre if value is None else value
    z = quantile(eff, level)
    out = {}
    for (low, high), sd in ((("low", "high"), fit_sd), (("one_run_low", "one_run_high"), run_sd)):
        if sd is not None:
            out[low], out[high] = band(value, sd, z)
    return centre, out


def quantile(eff: Efficiency, level: float = LEVEL) -> float:
    """How many sds of ln S a two-sided ``level`` interval spans: Student's t with the fit's
    residual degrees of freedom (``run_dof``: the runs' scatter is itself estimated from them, so
    a few runs' normal interval covers less, 88% of a 95% one at 4), normal without it."""
    from scipy import stats

    tail = 0.5 + level / 2
    return float(stats.t.ppf(tail, eff.run_dof) if eff.run_dof else stats.norm.ppf(tail))


def band(value: float, log_sd: float, z: float) -> tuple[float, float]:
    """``value`` times ``exp(-z log_sd)`` and ``exp(z log_sd)``: an interval of a lognormal figure."""
    with np.errstate(over="ignore"):  # a parameter known to nothing: an interval to infinity
        return value * float(np.exp(-z * log_sd)), value * float(np.exp(z * log_sd))


def steps_log_sd(eff: Efficiency, batch: float) -> tuple[float, float | None, float | None]:
    """Steps to the target at ``batch``; the sd of their log from the fitted parameters'
    ``covariance`` (delta method on ``ln S``); and a single run's, the runs' scatter about the fit
    (``run_sd``) added. None where the table does not hold what it needs."""
    centre = eff.steps_to_target(batch)
    free = eff.fitted
    if eff.covariance is None or not free:
        return centre, None, None
    x = _params_of(eff, free)
    shape = tuple((p / (eff.target_steps or 1.0), v / eff.noise_scale) for p, v in eff.schedule)
    grad = np.empty(len(x))
    for i in range(len(x)):  # central differences of ln S in each free parameter
        h = np.zeros(len(x))
        h[i] = 1e-5
        up = _efficiency(x + h, free, eff, shape).steps_to_target(batch)
        down = _efficiency(x - h, free, eff, shape).steps_to_target(batch)
        grad[i] = (np.log(up) - np.log(down)) / 2e-5
    fit_sd = float(np.sqrt(max(0.0, grad @ np.asarray(eff.covariance, dtype=float) @ grad)))
    return centre, fit_sd, None if eff.run_sd is None else float(np.hypot(fit_sd, eff.run_sd))


# the fit's bounds on (ln target steps, ln noise scale, batch exponent): _params_of's order
LOWER, UPPER = np.array([-np.inf, -5.0, -EXPONENT_BOUND]), np.array([np.inf, 25.0, EXPONENT_BOUND])


def _params_of(eff: Efficiency, free: Sequence[str]) -> np.ndarray:
    values = {"target_steps": np.log(eff.target_steps or 1.0), "noise_scale": np.log(eff.noise_scale),
              "batch_exponent": eff.batch_exponent}  # fmt: skip
    return np.array([values[k] for k in free], dtype=float)


def _efficiency(x: np.ndarray, free: Sequence[str], start: Efficiency, shape: Shape) -> Efficiency:
    """``start`` with the free parameters set from ``x`` (the schedule rebuilt from ``shape``)."""
    values = dict(zip(free, x.tolist()))
    target = float(np.exp(values["target_steps"])) if "target_steps" in values else start.target_steps
    noise = float(np.exp(values["noise_scale"])) if "noise_scale" in values else start.noise_scale
    exponent = float(values.get("batch_exponent", start.batch_exponent))
    assert target is not None
    schedule = tuple((f * target, noise * r) for f, r in shape) if shape else ()
    return replace(start, target_steps=target, noise_scale=noise, batch_exponent=exponent, schedule=schedule)


def check_shape(shape: Shape) -> Shape:
    """A measured shape: starts at progress 0 with ratio 1, progress increasing, ratios > 0."""
    if not shape:
        return ()
    if shape[0] != (0.0, 1.0):
        raise ConfigError("shape", f"starts at (0, 1), got {shape[0]}")
    for (p0, _), (p1, r) in zip(shape, shape[1:]):
        if p1 <= p0 or r <= 0:
            raise ConfigError("shape", f"progress must increase and ratios be > 0, got ({p1:g}, {r:g}) after {p0:g}")
    return shape


def fit(batches: Sequence[float], steps: Sequence[float], base_batch: int, noise_scale: float | None = None,
        shape: Shape = (), lr_scaling: str | None = None, exponent: bool = True,
        censored: Sequence[tuple[float, float]] = ()) -> Fit:  # fmt: skip
    """Fit the efficiency to runs at ``batches`` that took ``steps`` to the target (see the
    module's docstring); ``noise_scale`` is the measured one at ``base_batch`` (the starting
    point, and the value kept when only one batch was run); ``exponent=False`` keeps the batch
    exponent at 0 whatever the batches; ``censored``: ``(batch, steps run)`` of runs stopped
    before the target (how many parameters are free follows the batches that reached it)."""
    from scipy.optimize import least_squares

    b, s, cut = _checked_runs(batches, steps, censored)
    distinct = np.unique(b).size
    if noise_scale is None and distinct < 2:
        raise ConfigError("runs", "one batch alone needs a measured noise scale")
    n_free = 1 if distinct < 2 else 2 if distinct == 2 or not exponent else 3  # no more than the batches identify
    free = ("target_steps", "noise_scale", "batch_exponent")[:n_free]
    start_noise = noise_scale if noise_scale is not None else DEFAULT_NOISE * base_batch
    at_base = s[b == base_batch] if np.any(b == base_batch) else s
    start = Efficiency(start_noise, int(base_batch), float(np.exp(np.mean(np.log(at_base)))), lr_scaling=lr_scaling,
                       fit_batches=(float(b.min()), float(b.max())))  # fmt: skip
    shape = check_shape(shape)

    def log_steps(x: np.ndarray, batches: np.ndarray) -> np.ndarray:  # the model's ln S at ``batches``
        return np.log([_efficiency(x, free, start, shape).steps_to_target(v) for v in batches])

    residuals = lambda x: np.log(s) - log_steps(x, b)  # noqa: E731

    x0 = _params_of(_efficiency(_params_of(start, free), free, start, shape), free)
    bounds = (LOWER[: len(free)], UPPER[: len(free)])
    x0 = np.clip(x0, bounds[0] + 1e-9, bounds[1] - 1e-9)
    result = least_squares(residuals, x0, bounds=bounds, x_scale=1.0)
    dof = b.size - len(free)
    sd = float(np.sqrt(np.sum(result.fun**2) / dof)) if dof > 0 else float("nan")
    jtj = result.jac.T @ result.jac
    cov = (sd**2) * np.linalg.pinv(jtj) if dof > 0 else np.full((len(free), len(free)), np.nan)
    x, used = result.x, 0
    if cut.size and dof > 0:  # sigma needs a residual degree of freedom among the runs that reached it
        found = _tobit(lambda x: log_steps(x, b), lambda x: log_steps(x, cut[:, 0]), np.log(s), np.log(cut[:, 1]),
                       x, bounds, sd)  # fmt: skip
        if found is not None:  # else the optimiser failed: the least-squares fit, the cut runs left out
            # the likelihood's sigma divides by the runs, least squares' by the runs less the parameters:
            # scaled so, a cut run that says nothing leaves the least-squares fit and its errors as they were
            x, cov, sigma = found
            widen = b.size / dof
            cov, sd, used = cov * widen, sigma * float(np.sqrt(widen)), len(cut)
    eff = _with_errors(_efficiency(x, free, start, shape), free, cov, sd, dof)
    return Fit(eff, free, cov, sd, used)


def _with_errors(eff: Efficiency, free: Sequence[str], cov: np.ndarray, sd: float, dof: int) -> Efficiency:
    """``eff`` with what its intervals need: each free parameter's standard error (None where
    the runs leave it unknown), and where every one is known, the covariance, the runs' scatter
    ``sd`` and its degrees of freedom ``dof``."""
    variances = np.diag(cov)
    known = variances >= -1e-15  # below: the information was not positive definite, the error unknown
    sds = dict(zip(free, np.where(known, np.sqrt(np.clip(variances, 0.0, None)), np.nan).tolist()))
    whole = bool(np.all(np.isfinite(cov))) and all(_finite(v) is not None for v in [sd, *sds.values()])
    written = (cov + cov.T) / 2  # symmetric to the last digit, as the table's check wants it
    np.fill_diagonal(written, np.square(np.sqrt(np.clip(variances, 0.0, None))))  # the *_sd fields' squares exactly
    return replace(eff, noise_scale_sd=_finite(sds.get("noise_scale")),
                   batch_exponent_sd=_finite(sds.get("batch_exponent")),
                   target_steps_sd=_finite(sds.get("target_steps")),
                   covariance=tuple(tuple(row) for row in written.tolist()) if whole else None,
                   run_sd=float(sd) if whole else None, run_dof=int(dof) if whole else None)  # fmt: skip


def _checked_runs(batches: Sequence[float], steps: Sequence[float], censored: Sequence[tuple[float, float]],
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The runs as arrays (batches, steps, censored ``(batch, steps run)`` rows); ConfigError on
    ``runs`` where they cannot be fitted."""
    b, s = np.asarray(batches, dtype=float), np.asarray(steps, dtype=float)
    if b.size == 0 or b.size != s.size:
        raise ConfigError("runs", f"need steps for every batch, got {b.size} batches and {s.size} steps")
    if np.any(b <= 0) or np.any(s <= 0):
        raise ConfigError("runs", "batches and steps to the target must be > 0")
    cut = np.asarray(censored, dtype=float).reshape(-1, 2)
    if np.any(cut <= 0):
        raise ConfigError("runs", "a run stopped before the target needs a batch and steps run > 0")
    return b, s, cut


def _tobit(log_s: Callable[[np.ndarray], np.ndarray], log_cut: Callable[[np.ndarray], np.ndarray], y: np.ndarray,
           c: np.ndarray, x0: np.ndarray, bounds: tuple[np.ndarray, np.ndarray], sd0: float,
           ) -> tuple[np.ndarray, np.ndarray, float] | None:  # fmt: skip
    """The censored fit (module docstring): the maximum-likelihood parameters, their covariance
    (the inverse observed information, by central differences) and sigma; started from the
    least-squares fit of the runs that reached the target (``x0``, residual sd ``sd0``). None
    where the optimiser does not converge."""
    from scipy import optimize, stats

    def nll(p: np.ndarray) -> float:
        sigma = float(np.exp(p[-1]))
        z_obs, z_cut = (y - log_s(p[:-1])) / sigma, (c - log_cut(p[:-1])) / sigma
        return float(np.sum(0.5 * z_obs**2) + y.size * p[-1] - np.sum(stats.norm.logsf(z_cut)))

    start = np.append(x0, np.log(sd0 if np.isfinite(sd0) and sd0 > 1e-3 else 0.2))
    box = list(zip(bounds[0], bounds[1])) + [LOG_SIGMA_BOUNDS]
    result = optimize.minimize(nll, start, method="L-BFGS-B", bounds=box)
    if not result.success:
        return None
    p = result.x
    n = p.size
    h = 1e-4
    hess = np.empty((n, n))
    for i in range(n):  # central differences of the negative log-likelihood
        for j in range(i, n):
            e_i, e_j = np.eye(n)[i] * h, np.eye(n)[j] * h
            hess[i, j] = hess[j, i] = (nll(p + e_i + e_j) - nll(p + e_i - e_j) - nll(p - e_i + e_j)
                                       + nll(p - e_i - e_j)) / (4 * h * h)  # fmt: skip
    try:
        cov = np.linalg.inv(hess)[:-1, :-1]
    except np.linalg.LinAlgError:
        cov = np.full((n - 1, n - 1), np.nan)
    return p[:-1], cov, float(np.exp(p[-1]))


def _finite(value: float | None) -> float | None:
    """A standard error the table can hold: None where the runs leave the parameter unknown
    (not finite, or beyond :data:`~hetsim.model.efficiency.SD_MAX`)."""
    return None if value is None or not np.isfinite(value) or value > SD_MAX else float(value)


def noise_shape(steps: Sequence[float], grad_sq: Sequence[float], trace: Sequence[float], target_step: float,
                bins: int = 4) -> tuple[float | None, Shape]:  # fmt: skip
    """The noise scale over a run to its target, from the estimator's sums of blocks ending at
    ``steps`` (:mod:`validation.noise_scale`): the ratio of the sums in each of ``bins`` equal
    spans of progress (``step / target_step``), as ``(the first span's B_noise, the shape
    relative to it)``; a span whose sums are not both positive is left out (None, (): none was)."""
    at = np.asarray(steps, dtype=float) / float(target_step)
    g, t = np.asarray(grad_sq, dtype=float), np.asarray(trace, dtype=float)
    values = []
    for k in range(bins):
        inside = (at > k / bins) & (at <= (k + 1) / bins) if k else at <= 1 / bins
        if g[inside].sum() > 0 and t[inside].sum() > 0:
            values.append(((k + 0.5) / bins, float(t[inside].sum() / g[inside].sum())))
    if not values:
        return None, ()
    (at_first, first), rest = values[0], values[1:]
    start = 0.0 if at_first < 1 / bins else at_first  # the first span starts the run; a later one keeps its place
    return first, ((start, 1.0), *((p, v / first) for p, v in rest))
