"""The noise around the fitted costs: censored steps, and how the noise is shared and persists.

* :func:`censored_scale`: a worker whose steps were cut at the barrier (backup, K-sync:
  ``included = false``, ``compute_s`` the time until cancelled) has only a lower bound for those
  steps, and its complete steps are the lucky ones. With lognormal noise of mean 1 the
  log-ratios ``log(measured / fitted)`` are ``N(log k - sigma^2 / 2, sigma^2)``, complete steps
  exactly and cut steps right-censored; their maximum likelihood gives the factor ``k`` the
  fitted curve is off by, the noise sigma, and the standard error of ``k`` (delta method on the
  observed information).
* :func:`noise_structure`: from the log-residuals of every worker's complete steps (around its
  mean at that batch size, so that a misfit of the curve does not look like noise), the share of
  the noise common to all workers of a step (the mean correlation of two workers' residuals over
  the steps both completed) and each worker's lag-1 persistence (the correlation of its
  residuals in consecutive complete steps: consecutive rows of an epoch-mean table, consecutive
  updates of an async one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

MIN_PAIRS = 3  # steps a correlation needs


@dataclass(frozen=True)
class Censored:
    factor: float  # the fitted curve times this is the cost
    factor_se: float
    sigma: float


def censored_scale(done: np.ndarray, cut: np.ndarray) -> Censored:
    """Maximum likelihood of lognormal log-ratios: ``done`` observed exactly, ``cut`` known
    only to be at least their value."""

    def nll(theta: np.ndarray) -> float:
        m, log_sigma = float(theta[0]), float(theta[1])
        sigma = math.exp(log_sigma)
        z = (done - m) / sigma
        return float(0.5 * (z * z).sum() + done.size * log_sigma - stats.norm.logsf((cut - m) / sigma).sum())

    spread = float(done.std()) if done.size > 1 else 0.1
    start = np.array([float(done.mean()), math.log(max(spread, 1e-6))])
    found = optimize.minimize(nll, start, method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-12})
    m, log_sigma = (float(x) for x in found.x)
    sigma = math.exp(log_sigma)
    factor = math.exp(m + sigma * sigma / 2)
    cov = _inverse_hessian(nll, np.array([m, log_sigma]))
    grad = np.array([factor, factor * sigma * sigma])  # d factor / d (m, log sigma)
    variance = float(grad @ cov @ grad) if cov is not None else math.nan
    return Censored(factor, math.sqrt(variance) if variance >= 0 else math.nan, sigma)


def _inverse_hessian(f: Any, x: np.ndarray, h: float = 1e-4) -> np.ndarray | None:
    n = x.size
    hess = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            e_i, e_j = np.eye(n)[i] * h, np.eye(n)[j] * h
            hess[i, j] = (f(x + e_i + e_j) - f(x + e_i - e_j) - f(x - e_i + e_j) + f(x - e_i - e_j)) / (4 * h * h)
    try:
        return np.linalg.inv(hess)
    except np.linalg.LinAlgError:
        return None


@dataclass(frozen=True)
class NoiseStructure:
    """``shared``: mean correlation of two workers' log-residuals in a step (None: fewer than two
    workers or MIN_PAIRS common steps); ``shared_steps``: steps with two or more complete workers;
    ``persistence``: per worker, the lag-1 autocorrelation of its log-residuals over its complete
    steps in order (None: fewer than MIN_PAIRS + 1)."""

    shared: float | None
    shared_steps: int
    persistence: tuple[float | None, ...]

    @property
    def mean_persistence(self) -> float | None:
        known = [p for p in self.persistence if p is not None]
        return float(np.mean(known)) if known else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "shared": self.shared,
            "shared_steps": self.shared_steps,
            "persistence": list(self.persistence),
            "mean_persistence": self.mean_persistence,
        }


def noise_structure(step: np.ndarray, worker: np.ndarray, resid: np.ndarray, workers: Sequence[int]) -> NoiseStructure:
    """From one log-residual per complete (step, worker)."""
    table = pd.DataFrame({"step": step, "worker": worker, "e": resid}).pivot(index="step", columns="worker", values="e")
    table = table.reindex(columns=list(workers)).sort_index()
    corr = table.corr(min_periods=MIN_PAIRS).to_numpy()
    off = corr[~np.eye(corr.shape[0], dtype=bool)]
    off = off[np.isfinite(off)]
    shared = float(off.mean()) if off.size else None
    shared_steps = int((table.notna().sum(axis=1) >= 2).sum())
    persistence = []
    for w in workers:
        col = table[w].dropna().to_numpy()  # the worker's complete steps in step order
        a, b = col[:-1], col[1:]
        ok = a.size >= MIN_PAIRS and a.std() > 0 and b.std() > 0
        persistence.append(float(np.corrcoef(a, b)[0, 1]) if ok else None)
    return NoiseStructure(shared, shared_steps, tuple(persistence))
