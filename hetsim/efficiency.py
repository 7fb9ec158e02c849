"""Statistical efficiency: how much a step of a given effective batch advances training.

A workload may carry ``[workload.efficiency]``: the gradient noise scale (``noise_scale``,
``B_noise`` in samples; or Pollux's ``grad_sqr`` and ``grad_var``, with
``B_noise = base_batch * grad_var / grad_sqr``), the batch its learning-rate schedule was tuned
for (``base_batch``, ``M0``) and, optionally, the optimizer steps at ``M0`` that reach the
target accuracy (``target_steps``).

A step whose applied gradients came from ``B_eff`` samples advances training by

    gain(B_eff) = (var + sqr) / (var / (B_eff / M0) + sqr)            (Pollux, Qiao et al. 2021)
                = (B_eff / M0) * (B_noise + M0) / (B_noise + B_eff)

steps at ``M0``: the form of McCandlish et al. 2018, ``S = S_min (1 + B_noise / B)``. At
``B_eff = M0`` the gain is 1; far below ``B_noise`` it grows linearly with the batch, far above
it saturates at ``1 + B_noise / M0``. The target is reached when the gains sum to ``target_steps``.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsim.errors import ConfigError
from hetsim.params import Param
from hetsim.tables import Table

EFFICIENCY_PARAMS = (
    Param("noise_scale", default=None, low=0.0, low_open=True, doc="gradient noise scale B_noise, samples"),
    Param("grad_sqr", default=None, low=0.0, low_open=True, doc="squared norm of the true gradient (Pollux)"),
    Param("grad_var", default=None, low=0.0, doc="variance of a gradient at base_batch (Pollux)"),
    Param("base_batch", "integer", low=1, doc="M0: the batch the learning rate was tuned for"),
    Param("target_steps", default=None, low=0.0, low_open=True, doc="steps at base_batch to the target accuracy"),
)


@dataclass(frozen=True)
class Efficiency:
    """A workload's statistical efficiency (see the module's docstring)."""

    noise_scale: float
    base_batch: int
    target_steps: float | None = None

    def gain(self, effective_batch: float | np.ndarray) -> Any:
        """Progress, in steps at ``base_batch``, of a step of ``effective_batch`` samples (0 for 0)."""
        b = np.asarray(effective_batch, dtype=float)
        m0, noise = float(self.base_batch), self.noise_scale
        out = (b / m0) * (noise + m0) / (noise + b)
        return float(out) if out.ndim == 0 else out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"noise_scale": self.noise_scale, "base_batch": self.base_batch}
        if self.target_steps is not None:
            out["target_steps"] = self.target_steps
        return out


def make_efficiency(data: Any, path: str = "workload.efficiency") -> Efficiency:
    """``[workload.efficiency]``: ``noise_scale``, or ``grad_sqr`` with ``grad_var``, and ``base_batch``."""
    values = Table(data, path, [p.name for p in EFFICIENCY_PARAMS]).read(EFFICIENCY_PARAMS)
    pollux = values["grad_sqr"] is not None or values["grad_var"] is not None
    if values["noise_scale"] is not None and pollux:
        raise ConfigError(f"{path}.noise_scale", "give noise_scale or grad_sqr and grad_var, not both")
    if pollux:
        for key in ("grad_sqr", "grad_var"):
            if values[key] is None:
                raise ConfigError(f"{path}.{key}", "missing (required with the other of grad_sqr and grad_var)")
        noise = values["base_batch"] * values["grad_var"] / values["grad_sqr"]
        if noise <= 0:
            raise ConfigError(f"{path}.grad_var", "must be > 0 (a zero variance has no noise scale)")
    elif values["noise_scale"] is None:
        raise ConfigError(f"{path}.noise_scale", "missing (required, or grad_sqr and grad_var)")
    else:
        noise = values["noise_scale"]
    return Efficiency(float(noise), int(values["base_batch"]), values["target_steps"])


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
