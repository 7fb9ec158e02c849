"""``adaptive``: online estimation of each worker's affine cost, then the min-max split.

Each worker's measured compute times are fitted to ``t = a + c * b`` by least squares with
exponential forgetting (the sufficient statistics of recursive least squares, decayed by
``forgetting`` per observation), which follows slow drift. Abrupt changes (a slowdown episode,
a throttled card) are caught by a change detector: two measurements in a row off the
prediction by more than ``max(4 sigma, 10%)`` (sigma: the running spread of the worker's
relative residuals) reset the worker's statistics and rescale its fitted costs by the observed
ratio, so the split follows within a few steps instead of the ~1/(1 - forgetting) a plain
forgetting fit would need. While a worker has been seen at one batch size only, the slope is
unidentifiable: the fit keeps its last slope (or, at the start, assumes no fixed cost, the
paper's rule), which is exact again as soon as the split moves. The split is the
water-filling optimum of the fitted costs with ``max_batch`` caps, recomputed every step or
every epoch (``resplit``), and adopted only when it is predicted to be at least
``hysteresis`` faster than the current one, so noise does not make it oscillate. Unlike the
1/t rule it models per-step fixed costs, so it gets near the optimum in a few re-splits
instead of creeping towards it. It does not land on it: a split predicted within
``hysteresis`` of the optimum of the *fitted* costs is kept, so with the default 1% it may stop
up to 1% short of that (0.98% measured on deterministic workers), and while a worker's slope is
not yet identified (its batch has hardly moved) the fitted optimum itself can differ from the
true one by more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from hetsim.params import Param
from hetsim.partition import max_time, water_fill
from hetsim.policies.base import Policy, RunHint, StepInfo, StepRecord, WorkerHint

MIN_SPREAD = 0.5  # samples; with MIN_SPREAD_REL of the mean: below this spread of b the slope is kept
MIN_SPREAD_REL = 0.05
MIN_JUMP = 0.10  # relative: smaller surprises are left to the forgetting fit


class Adaptive(Policy):
    name = "adaptive"
    weighted_gradients = True
    resplits = True
    autocorrelated_steps = True
    no_closed_form_reason = (
        "its split follows online estimates of the measured times, so it depends on the random history of the run"
    )
    params: ClassVar[tuple[Param, ...]] = (
        Param("resplit", "choice", default="step", choices=("step", "epoch"), doc="how often the split may change"),
        Param("forgetting", default=0.9, low=0.0, low_open=True, high=1.0, doc="decay of old measurements"),
        Param(
            "hysteresis",
            default=0.01,
            low=0.0,
            high=1.0,
            high_open=True,
            doc="a new split is adopted only when predicted at least this much faster",
        ),
    )
    resplit: str
    forgetting: float
    hysteresis: float

    def reset(
        self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None, run: RunHint | None = None
    ) -> None:
        super().reset(n_workers, global_batch, hints, run)
        self._stats = np.zeros((n_workers, 5))  # decayed sums of 1, b, b^2, t, b*t
        self._slope = np.full(n_workers, np.nan)
        self.fixed_s = np.zeros(n_workers)
        self.per_sample_s = np.full(n_workers, np.nan)
        self._resid_var = np.full(n_workers, MIN_JUMP**2 / 16)
        self._surprises = np.zeros(n_workers, dtype=np.int64)  # signed run of large residuals

    def steady_steps(self, info: StepInfo) -> int:
        return 1 if self.resplit == "step" else info.steps_per_epoch - info.step_in_epoch

    def observe(self, record: StepRecord) -> None:
        for i, (b, t, ok) in enumerate(zip(record.local_batches, record.compute_s, record.included)):
            if b > 0 and ok and t > 0 and not self._changed(i, b, t):
                self._stats[i] = self.forgetting * self._stats[i] + (1.0, b, b * b, t, b * t)
        if self.resplit == "step" or record.ends_epoch:
            self._update(record.info.available)

    def _changed(self, i: int, b: int, t: float) -> bool:
        """Detect a change of speed; on the second surprise in a row, restart the worker's fit
        from this measurement, with its costs scaled by the surprise. True when it restarted."""
        if np.isnan(self.per_sample_s[i]):
            return False
        predicted = self.fixed_s[i] + self.per_sample_s[i] * b
        resid = t / predicted - 1.0
        if abs(resid) <= max(4 * np.sqrt(self._resid_var[i]), MIN_JUMP):
            self._surprises[i] = 0
            self._resid_var[i] = 0.9 * self._resid_var[i] + 0.1 * resid**2
            return False
        sign = 1 if resid > 0 else -1
        self._surprises[i] = self._surprises[i] + sign if self._surprises[i] * sign > 0 else sign
        if abs(self._surprises[i]) < 2:
            return False
        self._slope[i] *= t / predicted
        self._stats[i] = (1.0, b, b * b, t, b * t)
        self._surprises[i] = 0
        return True

    def _fit(self) -> None:
        """Per worker: the weighted least-squares line, or the last slope through the mean."""
        for i, (s0, s1, s2, t0, t1) in enumerate(self._stats):
            if s0 <= 0:
                continue
            mean_b, mean_t = s1 / s0, t0 / s0
            var_b = s2 / s0 - mean_b**2
            identifiable = var_b > max(MIN_SPREAD, MIN_SPREAD_REL * mean_b) ** 2
            slope = (t1 / s0 - mean_b * mean_t) / var_b if identifiable else np.nan
            if not slope > 0:
                slope = self._slope[i] if self._slope[i] > 0 else mean_t / mean_b
            slope = min(slope, mean_t / mean_b)  # a fixed cost cannot be negative
            self._slope[i] = slope
            self.per_sample_s[i] = slope
            self.fixed_s[i] = mean_t - slope * mean_b

    def _update(self, available: tuple[bool, ...] | None) -> None:
        estimates = self._estimates(available)
        if estimates is not None:
            self._resplit(*estimates)

    def _estimates(self, available: tuple[bool, ...] | None) -> tuple[np.ndarray, np.ndarray, list[float]] | None:
        """Refit; the fitted ``(fixed_s, per_sample_s, caps)`` of the workers up, or None while
        no worker has been measured or the workers up cannot hold the batch."""
        self._fit()
        known = ~np.isnan(self.per_sample_s)
        if not known.any():
            return None
        # A worker never measured (down since the start) is assumed average until it is measured.
        fixed = np.where(known, self.fixed_s, self.fixed_s[known].mean())
        per_sample = np.where(known, self.per_sample_s, self.per_sample_s[known].mean())
        caps = list(self.caps) if available is None else [c if up else 0 for c, up in zip(self.caps, available)]
        if sum(caps) < self.global_batch:
            return None
        return fixed, per_sample, caps

    def _resplit(self, fixed: np.ndarray, per_sample: np.ndarray, caps: list[float]) -> None:
        """Adopt the min-max split of the fitted costs when it is ``hysteresis`` faster."""
        proposal = water_fill(fixed, per_sample, self.global_batch, caps)
        current = max_time(fixed, per_sample, self._batches)
        if not np.isfinite(current) or max_time(fixed, per_sample, proposal) < (1 - self.hysteresis) * current:
            self._batches = proposal
