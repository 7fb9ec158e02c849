"""Statistical efficiency: how much a step of a given effective batch advances training.

A workload may carry ``[workload.efficiency]`` (read by :func:`hetsim.config.make_efficiency`):
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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsim.params import Param

EFFICIENCY_PARAMS = (
    Param("noise_scale", default=None, low=0.0, low_open=True,
          doc="gradient noise scale B_noise, samples; or [[progress, B_noise], ...] over progress"),
    Param("grad_sqr", default=None, low=0.0, low_open=True, doc="squared norm of the true gradient (Pollux)"),
    Param("grad_var", default=None, low=0.0, doc="variance of a gradient at base_batch (Pollux)"),
    Param("base_batch", "integer", low=1, doc="M0: the batch the learning rate was tuned for"),
    Param("target_steps", default=None, low=0.0, low_open=True, doc="steps at base_batch to the target accuracy"),
)  # fmt: skip

Schedule = tuple[tuple[float, float], ...]  # (progress in steps at base_batch, B_noise) knots, progress from 0


@dataclass(frozen=True)
class Efficiency:
    """A workload's statistical efficiency (see the module's docstring). ``schedule`` is empty
    for a constant ``noise_scale``; otherwise ``noise_scale`` is its first value."""

    noise_scale: float
    base_batch: int
    target_steps: float | None = None
    schedule: Schedule = ()

    def noise_at(self, progress: float) -> float:
        """``B_noise`` once ``progress`` steps at ``base_batch`` have been made."""
        if not self.schedule:
            return self.noise_scale
        at, value = zip(*self.schedule)
        return float(np.interp(progress, at, value))

    def gain(self, effective_batch: float | np.ndarray, noise_scale: float | None = None) -> Any:
        """Progress, in steps at ``base_batch``, of a step of ``effective_batch`` samples (0 for 0)
        at ``noise_scale`` (default: the noise scale at the start)."""
        b = np.asarray(effective_batch, dtype=float)
        m0 = float(self.base_batch)
        noise = self.noise_scale if noise_scale is None else noise_scale
        out = (b / m0) * (noise + m0) / (noise + b)
        return float(out) if out.ndim == 0 else out

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
        return out


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
