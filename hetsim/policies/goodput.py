"""``goodput``: the global batch and its split chosen together, for the fastest progress per second.

A larger global batch amortises every step's fixed costs (the all-reduce, each worker's
per-step overhead) and lets a heterogeneous cluster give its fast workers more work, so it
raises throughput; it also lowers the progress each sample buys once it nears the gradient
noise scale (:mod:`hetsim.model.efficiency`). This policy maximises their product, the goodput

    goodput(B) = gain(B; B_noise) / (T(B) + overhead_s)     (steps at base_batch per second)

over global batches ``B`` in ``[min_batch, max_batch]``, where ``T(B)`` is the compute phase of
the min-max split of ``B`` on the workers' fitted costs (``adaptive``'s online affine fit, change
detector and water-filling, which it inherits) and ``overhead_s`` the run's expected time outside
compute (:class:`~hetsim.policies.base.RunHint`). It is Pollux's goodput (Qiao et al., OSDI 2021)
with the per-worker split of a heterogeneous cluster inside ``T``.

``B_noise`` is the last measured noise scale when a trainer reports one
(:meth:`~hetsim.policies.base.Policy.observe_noise_scale`: ``validation``'s online estimate),
otherwise the workload's, at the progress this policy has counted from the steps it observed
(the simulator knows the true schedule; the policy follows it as a perfect estimator would).

At the end of every epoch (when ``validation`` measures a new noise scale; the engines and the
trainer end an epoch after one pass over the data at the batch it began with, so the batch
never changes inside one) it evaluates :data:`CANDIDATES` batches spaced geometrically over the range and moves to
the best only when its predicted goodput is at least ``batch_hysteresis`` above the current
batch's, so estimation noise does not make the batch oscillate; in between, the split is
re-balanced as ``adaptive`` does (every step or every epoch, ``resplit``). A run keeps the
workload's number of steps whatever the batch, so its samples differ from a fixed-batch run's:
compare policies by ``time_to_target_s``. The learning rate that a real trainer pairs with a
changed batch is the trainer's business (``validation`` scales it by the square-root rule).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param
from hetsim.model.efficiency import effective_batch
from hetsim.model.partition import max_time, water_fill
from hetsim.policies.adaptive import Adaptive
from hetsim.policies.base import RunHint, StepInfo, WorkerHint

CANDIDATES = 24  # global batches tried per update, geometrically spaced over [min_batch, max_batch]
DEFAULT_RANGE = 8  # without max_batch: up to this many times the workload's global batch


class Goodput(Adaptive):
    """The global batch and its split chosen together for the most progress per second
    (Pollux's goodput with ``adaptive``'s per-worker split inside the step time)."""

    name = "goodput"
    needs_efficiency = True
    varies_batch = True
    no_closed_form_reason = "its batch and split follow online estimates of the measured times and the progress made"
    params = (
        *Adaptive.params,
        Param("min_batch", "integer", default=None, low=1, doc="smallest global batch (default: the workload's)"),
        Param("max_batch", "integer", default=None, low="min_batch",
              doc=f"largest global batch (default: {DEFAULT_RANGE}x the workload's), within the workers' caps"),
        Param("batch_hysteresis", default=0.05, low=0.0, high=1.0, high_open=True,
              doc="a new global batch is adopted only when its predicted goodput is this much higher"),
    )  # fmt: skip
    min_batch: int | None
    max_batch: int | None
    batch_hysteresis: float

    def reset(
        self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None, run: RunHint | None = None
    ) -> None:
        capacity = sum(h.max_batch for h in hints) if hints is not None else np.inf
        if self.min_batch is not None and self.min_batch > capacity:
            raise ConfigError(
                "policy.min_batch", f"{self.min_batch} is more than the workers' caps hold ({capacity:g})"
            )
        lowest = self.min_batch or global_batch
        highest = DEFAULT_RANGE * max(global_batch, lowest) if self.max_batch is None else self.max_batch
        self.highest_batch = int(min(highest, capacity))
        self.lowest_batch = min(lowest, self.highest_batch)  # without min_batch: the workload's, within max_batch
        super().reset(n_workers, int(np.clip(global_batch, self.lowest_batch, self.highest_batch)), hints, run)
        self.progress = 0.0  # steps at base_batch, counted from the observed steps
        self.measured_noise: float | None = None
        self._rebatch = False  # the next update may change the batch (at epoch ends)

    def steady_steps(self, info: StepInfo) -> int:
        """Never past the epoch's end: the next epoch's batch, and so its length, may differ."""
        return min(super().steady_steps(info), info.steps_per_epoch - info.step_in_epoch)

    def noise_scale(self) -> float:
        """The noise scale decisions use now: the last measured one, or the efficiency's."""
        if self.measured_noise is not None:
            return self.measured_noise
        assert self.run.efficiency is not None  # reset refuses a run without one
        return self.run.efficiency.noise_at(self.progress)

    def observe_noise_scale(self, noise_scale: float) -> None:
        self.measured_noise = float(noise_scale)

    def _step(self, b: np.ndarray, t: np.ndarray, included: np.ndarray, ends_epoch: bool,
              available: tuple[bool, ...] | None) -> None:  # fmt: skip
        """Count the step's progress (its applied samples' gain) before adaptive's bookkeeping."""
        assert self.run.efficiency is not None
        self.progress += self.run.efficiency.gain(effective_batch(b, included, True), self.noise_scale())
        self._rebatch = ends_epoch
        super()._step(b, t, included, ends_epoch, available)

    def _update(self, available: tuple[bool, ...] | None) -> None:
        """At an epoch's end, the batch of best goodput among those the workers up can hold (so
        it shrinks when failures leave too little room, rather than wait for repairs); otherwise,
        and when the batch stays, adaptive's re-split."""
        estimates = self._estimates(available)
        if estimates is None:
            return
        rebatch, self._rebatch = self._rebatch, False
        batch = self._best_batch(*estimates) if rebatch and estimates[2].sum() >= 1 else self.global_batch
        if batch != self.global_batch:
            self.global_batch = batch
            self._batches = water_fill(estimates[0], estimates[1], batch, estimates[2])
        elif estimates[2].sum() >= self.global_batch:
            self._resplit(*estimates)

    def goodput(self, batch: int, fixed: np.ndarray, per_sample: np.ndarray, caps: np.ndarray) -> float:
        """Predicted progress per second at global batch ``batch`` with its min-max split."""
        assert self.run.efficiency is not None
        step_s = max_time(fixed, per_sample, water_fill(fixed, per_sample, batch, caps)) + self.run.overhead_s
        return float(self.run.efficiency.gain(batch, self.noise_scale())) / step_s

    def _best_batch(self, fixed: np.ndarray, per_sample: np.ndarray, caps: np.ndarray) -> int:
        """The candidate of highest goodput if it beats the current batch's by the hysteresis."""
        highest = int(min(self.highest_batch, caps.sum()))
        lowest = min(self.lowest_batch, highest)
        sizes = np.unique(np.round(np.geomspace(lowest, highest, CANDIDATES)).astype(np.int64))
        rates = [self.goodput(int(b), fixed, per_sample, caps) for b in sizes]
        best = int(sizes[int(np.argmax(rates))])
        if self.global_batch > highest:  # the workers up cannot hold the current batch
            return best
        current = self.goodput(self.global_batch, fixed, per_sample, caps)
        return best if max(rates) >= (1 + self.batch_hysteresis) * current else self.global_batch
