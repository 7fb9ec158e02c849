"""One worker's cost curve by least squares over its rows, where none was cut (:func:`fit_lsq`).

Least squares of the times on the curve needs no noise family: it is unbiased for any mean-1
noise, and where the true curve is not of the fitted form it keeps the large steps, which
dominate a run's time, closest (the maximum likelihood of :mod:`hetsim.calibrate.censored`
weights every step's relative error alike). Its textbook standard errors assume a constant
spread, which multiplicative noise does not have (the spread grows with the time), so they are
replaced by the sandwich for that noise: with ``J`` the rows' curve gradients, ``c`` the fitted
times and ``v`` the variance of ``y / c``,
``Cov = v (J'J)^-1 [sum_ij a(|i-j|) c_i c_j J_i J_j'] (J'J)^-1``, ``a`` the autocorrelation of
the relative residuals in step order (``share * rho^k`` at lag ``k``, where lag 1 is clearly
above 0: noise that persists; else 0 off the diagonal).
"""

from __future__ import annotations

import numpy as np

from hetsim.calibrate.censored import CurveFit, autocorrelated, generalized_inverse, persistence_terms, unknown_blank
from hetsim.calibrate.curves import Curve


def fit_lsq(curve: Curve, b: np.ndarray, y: np.ndarray, free: np.ndarray, bound: np.ndarray) -> CurveFit:
    """The least-squares ``curve`` (already fitted; ``bound``: parameters it left at a bound)
    with its noise sigma and sandwich covariance over the parameters ``free``, as if unbounded
    (see :class:`~hetsim.calibrate.censored.CurveFit`); rows ``b``, ``y`` in step order."""
    c = curve.time_s(b)
    ratio = y / c
    sigma = float(np.log(ratio).std(ddof=1)) if y.size > 1 else 0.0
    k = int(free.sum())
    terms = persistence_terms(ratio - 1.0)
    if k == 0 or y.size <= k:
        return CurveFit(curve, sigma, np.full((k, k), np.nan), free, bound)
    jac = curve.jacobian(b)[:, free]
    v = float(((ratio - 1.0) ** 2).sum() / (y.size - k))
    scaled = jac * c[:, None]
    meat = autocorrelated(scaled, terms)
    bread, known = generalized_inverse(jac.T @ jac)
    return CurveFit(curve, sigma, unknown_blank(v * bread @ meat @ bread, known), free, bound)
