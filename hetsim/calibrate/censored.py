"""One worker's cost curve by maximum likelihood, complete and cut steps together (:func:`fit_mle`).

The model is the simulator's: a step with ``b`` samples takes ``c(b) * X``, ``c`` the cost
curve and ``X`` a mean-1 lognormal factor, so ``log y - log c(b)`` is ``N(-sigma^2/2, sigma^2)``.
A complete step is an exact observation; a step cut at the barrier (backup, K-sync:
``included = false``) is known only to take longer than the time it ran (right-censored). The
log-likelihood of both, maximised over the curve's parameters and ``log sigma`` together, is
right whatever the split did, fixed or re-split every step: which worker is cut depends on the
others' times, which are independent of this worker's given the shared noise (censoring at
random), and the batch a policy hands a worker depends only on earlier steps.

Why not least squares: the noise is multiplicative, so the spread grows with the batch and
ordinary least squares understates its own standard errors; the likelihood of the log times
weights every row by its own spread, and the observed information gives standard errors that
match the spread of the estimates (checked over seeds by ``benchmarks/calibration_coverage.py``).

Steps whose noise persists (the simulator's ``persistence``, of a worker's own factor or of a
shared one) are not independent: the residuals' autocorrelation is read as ``share * rho^k`` at
lag ``k`` (:func:`persistence_terms`), and the information-based covariance is widened by the
sandwich ``sigma^2 (A^-1 B A^-1 - A^-1)``, ``A = sum u u'`` and
``B = sum a(|i-j|) u_i u_j'`` over the rows' log-curve gradients ``u`` (exact for a linear model
in the logs).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, signal, special

from hetsim.calibrate.curves import Curve

LOG_SIGMA_BOUNDS = (math.log(1e-6), math.log(10.0))
MAX_LAGS = 20  # lags read for the persistence's decay
EXACT = 1e-9  # relative misfit below which complete rows with no cut ones are a noise-free curve


@dataclass(frozen=True)
class CurveFit:
    """A fitted curve, its noise sigma and the covariance of the curve's free parameters
    (``free``: those not fixed by the design; the others have no standard error), by maximum
    likelihood here or by least squares (:mod:`hetsim.calibrate.lsq`). ``bound``: the free
    parameters the fit left at a bound (an overhead of 0, a flat slope). Their standard errors,
    and the others', are those of the fit without bounds: a bound the noise pushed the estimate
    onto tells nothing the data did not, and holding it as known made the other parameters'
    errors several times too small."""

    curve: Curve
    sigma: float
    cov: np.ndarray  # over curve.values[free]
    free: np.ndarray  # bool per curve parameter
    bound: np.ndarray  # bool per curve parameter
    nll: float = math.nan  # the negative log-likelihood reached (maximum likelihood only)

    def se(self) -> list[float | None]:
        out: list[float | None] = [None] * self.curve.values.size
        diag = np.diag(self.cov)
        for k, i in enumerate(np.flatnonzero(self.free)):
            out[i] = float(math.sqrt(diag[k])) if diag[k] >= 0 and math.isfinite(diag[k]) else None
        return out


class _Likelihood:
    """The negative log-likelihood of scaled parameters ``x`` (the curve's free values over
    their scales) and ``log sigma``, with its gradient."""

    def __init__(self, start: Curve, b: np.ndarray, y: np.ndarray, cut: np.ndarray, free: np.ndarray) -> None:
        self.start, self.b, self.log_y, self.cut, self.free = start, b, np.log(y), cut, free
        typical = np.abs(start.jacobian(b)).mean(axis=0)
        floor = 0.01 * float(y.mean()) / np.where(typical > 0, typical, 1.0)
        self.scale = np.maximum(np.abs(start.values), floor)[free]
        self.design: np.ndarray | None = None  # each row's d time / d values, held (see frozen)

    def frozen(self, x: np.ndarray) -> _Likelihood:
        """This likelihood with each row on the side of a hinge's kink it lies at scaled values
        ``x``: smooth, so that its Hessian by differences is the information. A hinge's maximum
        often lies where a size's rows sit at the kink, and across it the gradient jumps (the
        differences then read a negative variance). Affine and table curves are linear already."""
        held = copy.copy(self)
        held.design = self.curve(x).jacobian(self.b)
        return held

    def curve(self, x: np.ndarray) -> Curve:
        values = self.start.values.copy()
        values[self.free] = x * self.scale
        return self.start.with_values(values)

    def __call__(self, p: np.ndarray) -> tuple[float, np.ndarray]:
        x, s = p[:-1], float(p[-1])
        sigma = math.exp(s)
        curve = self.curve(x)
        design = curve.jacobian(self.b) if self.design is None else self.design
        c = np.maximum(design @ curve.values, 1e-300)
        z = (self.log_y - np.log(c) + 0.5 * sigma * sigma) / sigma
        zc, zx = z[~self.cut], z[self.cut]
        log_sf = special.log_ndtr(-zx)
        hazard = _hazard(zx, log_sf)
        nll = float(zc.size * s + 0.5 * (zc * zc).sum() - log_sf.sum())
        d_logc = np.empty_like(z)  # d nll / d log c, per row
        d_logc[~self.cut], d_logc[self.cut] = -zc / sigma, -hazard / sigma
        jac = design[:, self.free] / c[:, None]
        grad_x = (d_logc @ jac) * self.scale
        grad_s = float((1.0 + zc * (sigma - zc)).sum() + (hazard * (sigma - zx)).sum())
        return nll, np.append(grad_x, grad_s)


def fit_mle(start: Curve, bounds: list[tuple[float, float]], b: np.ndarray, y: np.ndarray, cut: np.ndarray,
            fixed: np.ndarray | None = None) -> CurveFit:  # fmt: skip
    """Maximum likelihood of ``start``'s model over rows ``b``, ``y`` (``cut``: right-censored),
    from ``start``'s values; ``bounds`` per curve parameter; ``fixed``: parameters held as given."""
    b, y, cut = np.asarray(b, dtype=float), np.asarray(y, dtype=float), np.asarray(cut, dtype=bool)
    free = np.ones(start.values.size, dtype=bool) if fixed is None else ~np.asarray(fixed, dtype=bool)
    if not cut.any() and _exact(start, b, y):
        return CurveFit(start, 0.0, np.zeros((int(free.sum()),) * 2), free, np.zeros_like(free))
    like = _Likelihood(start, b, y, cut, free)
    resid = like.log_y[~cut] - np.log(start.time_s(b[~cut]))
    s0 = math.log(max(float(resid.std()), 1e-3)) if resid.size > 1 else math.log(0.1)
    scaled = [(lo / k, hi / k) for (lo, hi), k in zip(np.array(bounds)[free], like.scale)]
    found = optimize.minimize(
        like, np.append(start.values[free] / like.scale, s0), jac=True, method="L-BFGS-B",
        bounds=[*scaled, LOG_SIGMA_BOUNDS], options={"maxiter": 500, "ftol": 1e-13, "gtol": 1e-9},
    )  # fmt: skip
    x, s = found.x[:-1], float(found.x[-1])
    curve, sigma = like.curve(x), math.exp(s)
    at_bound = np.zeros_like(free)
    at_bound[free] = [math.isfinite(lo) and v <= lo + 1e-9 * max(1.0, abs(lo)) for v, (lo, _) in zip(x, scaled)]
    cov = _covariance(like.frozen(x), found.x) * np.outer(like.scale, like.scale)
    keep = np.flatnonzero(free)
    z = (like.log_y - np.log(curve.time_s(b)) + 0.5 * sigma * sigma) / sigma
    z[cut] = _hazard(z[cut], special.log_ndtr(-z[cut]))  # E[z | z > cut]
    terms = persistence_terms(z)  # generalised residuals: the complete rows alone are the lucky ones
    if terms is not None and cov.size:
        cov = cov + sigma * sigma * _ar_excess(curve, b, keep, terms)
    return CurveFit(curve, sigma, cov, free, at_bound, float(found.fun))


def _hazard(z: np.ndarray, log_sf: np.ndarray) -> np.ndarray:
    """``phi(z) / (1 - Phi(z))``, from ``log(1 - Phi(z))``: the slope of a cut row's log-likelihood,
    and the mean of a standard normal beyond ``z``."""
    return np.asarray(np.exp(-0.5 * z * z - 0.5 * math.log(2 * math.pi) - log_sf))


def _exact(curve: Curve, b: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.all(np.abs(y / curve.time_s(b) - 1.0) < EXACT))


def _covariance(like: _Likelihood, p: np.ndarray) -> np.ndarray:
    """The inverse observed information of the free parameters (log sigma profiled in): the
    Hessian by central differences of the analytic gradient."""
    n = p.size
    hess = np.empty((n, n))
    for i in range(n):
        h = 1e-5 * max(1.0, abs(float(p[i])))
        up, down = p.copy(), p.copy()
        up[i] += h
        down[i] -= h
        hess[:, i] = (like(up)[1] - like(down)[1]) / (2 * h)
    inverse, known = generalized_inverse(0.5 * (hess + hess.T))
    return unknown_blank(inverse, known)[:-1, :-1]


NULL = 1e-10  # an eigenvalue of a scaled information matrix below this times the largest: zero information
IN_NULL = 1e-6  # a parameter whose share of a direction of zero information exceeds this is not identified


def unknown_blank(cov: np.ndarray, known: np.ndarray) -> np.ndarray:
    """``cov`` with nan in the rows and columns of the parameters not ``known``: no error for them."""
    cov[~known, :] = np.nan
    cov[:, ~known] = np.nan
    return cov


def generalized_inverse(info: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A generalized inverse of a symmetric information matrix and which parameters the rows
    identify (those with no share in a direction of zero information). A hinge with one batch
    size past its kink fixes its floor but not its overhead and slope apart (only the time at
    that size), and a plain inverse of the singular matrix gave no error at all, the floor's
    included; an identified parameter's variance, and a sandwich's, is the same under any
    generalized inverse. Scaled to a unit diagonal first, so that parameters in different units
    compare."""
    n = info.shape[0]
    if not np.all(np.isfinite(info)):
        return np.full(info.shape, np.nan), np.zeros(n, dtype=bool)
    d = np.sqrt(np.abs(np.diag(info)))
    d = np.where(d > 0, d, 1.0)  # a parameter the rows never move: a direction of zero information, its own
    values, vectors = np.linalg.eigh(info / np.outer(d, d))
    null = np.abs(values) <= NULL * float(np.abs(values).max())  # a negative one stays: its variance reads < 0
    known = ~np.any(np.abs(vectors[:, null]) > IN_NULL, axis=1)
    kept = ~null
    return (vectors[:, kept] / values[kept]) @ vectors[:, kept].T / np.outer(d, d), known


def _lags(resid: np.ndarray, most: int) -> list[float | None]:
    e = resid - resid.mean()
    denom = float(e @ e)
    return [float(e[:-k] @ e[k:] / denom) if denom > 0 else None for k in range(1, most + 1)]


def persistence_terms(resid: np.ndarray) -> tuple[float, float] | None:
    """The residuals' autocorrelation as ``share * rho^k`` at lag ``k >= 1`` (an AR(1) part of
    the noise, the rest independent: the simulator's persistent own or shared factor under
    independent noise); None unless lag 1 is clearly above 0 (three standard errors: a chance
    one widens every standard error for nothing). ``rho`` is the decay over the run of lags
    clearly above 0 (least squares of their logs), or lag 1 itself when only it is: a ratio of
    two small, noisy lags could put ``rho`` near 1 and the widening far beyond the truth."""
    if resid.size < 8:
        return None
    clear = 3.0 / math.sqrt(resid.size)
    lags = _lags(resid, MAX_LAGS)
    run = []
    for r in lags:
        if r is None or r <= clear:
            break
        run.append(r)
    if not run:
        return None
    if len(run) == 1:
        return 1.0, min(run[0], 0.99)
    slope = float(np.polyfit(np.arange(1, len(run) + 1), np.log(run), 1)[0])
    rho = min(max(math.exp(slope), run[0]), 0.99)
    return min(run[0] / rho, 1.0), rho


def autocorrelated(u: np.ndarray, terms: tuple[float, float] | None) -> np.ndarray:
    """``sum_ij a(|i-j|) u_i u_j'`` for rows ``u`` in order, ``a(0) = 1`` and ``a(k) = share rho^k``."""
    plain = u.T @ u
    if terms is None:
        return np.asarray(plain)
    share, rho = terms
    q = signal.lfilter([0.0, rho], [1.0, -rho], u, axis=0)  # q_t = rho (q_{t-1} + u_{t-1})
    return np.asarray(plain + share * (q.T @ u + u.T @ q))


def _ar_excess(curve: Curve, b: np.ndarray, keep: np.ndarray, terms: tuple[float, float]) -> np.ndarray:
    """``A^-1 B A^-1 - A^-1`` over the log-curve gradients ``u`` of the parameters ``keep``, rows
    in order: ``A = sum u u'`` (a generalized inverse, nan for the parameters the rows leave
    unknown), ``B`` as :func:`autocorrelated`."""
    u = curve.jacobian(b)[:, keep] / curve.time_s(b)[:, None]
    a_inv, known = generalized_inverse(u.T @ u)  # as the information's: one size past a kink
    return unknown_blank(np.asarray(a_inv @ autocorrelated(u, terms) @ a_inv - a_inv), known)
