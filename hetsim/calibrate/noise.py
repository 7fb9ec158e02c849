"""The noise around the fitted costs: how much of it a step's workers share, and how it persists.

* :func:`shared_sigma`: the sigma of a log factor common to every worker of a step, by maximum
  likelihood over every row with samples (cut rows as censored), the common factor integrated
  out per step; :func:`shared_correlation` turns it into the mean correlation of two workers'
  log times, the ``shared`` that ``calibrate`` reports.
* :func:`persistence`: each worker's lag-1 correlation of its log-residuals over its complete
  steps in order (consecutive rows of an epoch-mean table, consecutive updates of an async one).

Cut rows are the censored part of a worker's own fit (:mod:`hetsim.calibrate.censored`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special

MIN_PAIRS = 3  # steps a correlation needs
QUADRATURE_NODES = 24  # Gauss-Hermite nodes over a step's common factor


def shared_sigma(step: np.ndarray, worker: np.ndarray, resid: np.ndarray, cut: np.ndarray,
                 sigma: np.ndarray) -> float:  # fmt: skip
    """The sigma ``tau`` of a log factor common to every worker of a step, by maximum likelihood.

    ``resid`` is each row's ``log y - log c(b)`` around its worker's fitted curve, ``sigma`` each
    worker's fitted (total) sigma, ``worker`` indexes it. Given the step's common log factor
    ``s ~ N(0, tau^2)`` a worker's log residual is ``N(s - sigma^2 / 2, sigma^2 - tau^2)``, its rows
    independent: complete rows by their density, cut rows by their survival, and ``s``
    integrated out per step by Gauss-Hermite quadrature. The rows cut at a step's barrier are
    the slow ones, so correlating only the complete rows sees a common factor where there is
    none; the likelihood does not."""
    if sigma.size < 2 or float(sigma.min()) <= 0:
        return 0.0
    order = np.argsort(step, kind="stable")
    step, worker, resid, cut = step[order], worker[order], resid[order], cut[order]
    starts = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    if starts.size < MIN_PAIRS:
        return 0.0
    nodes, weights = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)
    log_w = np.log(weights / weights.sum())
    total = sigma[worker] ** 2
    centred = resid + 0.5 * total

    def nll(tau: float) -> float:
        own = np.sqrt(np.maximum(total - tau * tau, 1e-300))[:, None]
        z = (centred[:, None] - tau * nodes[None, :]) / own
        ll = np.where(cut[:, None], special.log_ndtr(-z), -0.5 * z * z - np.log(own))
        per_step = np.add.reduceat(ll, starts, axis=0) + log_w[None, :]
        return -float(special.logsumexp(per_step, axis=1).sum())

    top = 0.999 * float(sigma.min())
    found = optimize.minimize_scalar(nll, bounds=(0.0, top), method="bounded", options={"xatol": 1e-6 * top})
    tau = float(found.x)
    return tau if nll(tau) < nll(0.0) else 0.0


@dataclass(frozen=True)
class NoiseStructure:
    """``shared``: the mean correlation of two workers' log times in a step that a common factor
    of sigma ``shared_sigma`` gives (``tau^2 / (sigma_i sigma_j)``; None: fewer than two fitted
    workers, or fewer than MIN_PAIRS steps with two: an async trace's); ``shared_steps``: steps
    with two or more workers with samples; ``persistence``: per worker, the lag-1
    autocorrelation of its log-residuals over its complete steps in order (None: fewer than
    MIN_PAIRS + 1, or a worker left idle)."""

    shared: float | None
    shared_steps: int
    persistence: tuple[float | None, ...]
    shared_sigma: float | None = None

    @property
    def mean_persistence(self) -> float | None:
        known = [p for p in self.persistence if p is not None]
        return float(np.mean(known)) if known else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "shared": self.shared,
            "shared_sigma": self.shared_sigma,
            "shared_steps": self.shared_steps,
            "persistence": list(self.persistence),
            "mean_persistence": self.mean_persistence,
        }


def shared_correlation(tau: float, sigma: np.ndarray) -> float | None:
    """The mean over worker pairs of ``tau^2 / (sigma_i sigma_j)`` (None: fewer than two)."""
    if sigma.size < 2:
        return None
    if tau == 0.0:
        return 0.0
    pair = np.outer(sigma, sigma)[np.triu_indices(sigma.size, 1)]
    return float(np.mean(tau * tau / pair))


def persistence(
    step: np.ndarray, worker: np.ndarray, resid: np.ndarray, workers: Sequence[int]
) -> tuple[float | None, ...]:
    """Per worker, the lag-1 correlation of its log-residuals over its complete steps in order."""
    table = pd.DataFrame({"step": step, "worker": worker, "e": resid}).pivot(index="step", columns="worker", values="e")
    table = table.reindex(columns=list(workers)).sort_index()
    out = []
    for w in workers:
        col = table[w].dropna().to_numpy()  # the worker's complete steps in step order
        a, b = col[:-1], col[1:]
        ok = a.size >= MIN_PAIRS and a.std() > 0 and b.std() > 0
        out.append(float(np.corrcoef(a, b)[0, 1]) if ok else None)
    return tuple(out)
