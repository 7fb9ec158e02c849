"""``goodput``: the global batch and its split chosen together, for the fastest progress per second.

A larger global batch amortises every step's fixed costs (the all-reduce, each worker's
per-step overhead) and lets a heterogeneous cluster give its fast workers more work, so it
raises throughput; it also lowers the progress each sample buys once it nears the gradient
noise scale (:mod:`hetsim.model.efficiency`). This policy maximises their product, the goodput

    goodput(B) = gain(B; B_noise) / (T(B) + overhead_s)     (steps at base_batch per second)

over global batches ``B`` in ``[min_batch, max_batch]``, where ``T(B)`` is the compute phase of
the min-max split of ``B`` on the workers' costs and ``overhead_s`` the run's expected time
outside compute (:class:`~hetsim.policies.base.RunHint`). It is Pollux's goodput (Qiao et al.,
OSDI 2021) with the per-worker split of a heterogeneous cluster inside ``T``.

The costs ``T`` is judged by: when the hints carry every worker's cost curve (the simulator's,
or a real run's probe, which measures up to the largest batch this policy may choose), those
curves, each scaled by the ratio of the worker's online fit to its curve at the local batch it
runs now (so a slowdown the fit has seen counts, while the curve's shape, measured over the
whole range, says how the time grows with the batch); the first batch is then chosen at
:meth:`reset`, before any step. Without them, ``adaptive``'s online affine fit (with its change
detector, which this policy inherits): a line fitted on the local batches run so far, which
may extrapolate far off at batches several times larger. The split between batch changes is
``adaptive``'s either way.

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
from dataclasses import replace

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param
from hetsim.model.efficiency import effective_batch
from hetsim.model.partition import max_time, min_max_split, water_fill
from hetsim.policies.adaptive import Adaptive
from hetsim.policies.base import RunHint, StepInfo, WorkerHint

CANDIDATES = 24  # global batches tried per update, geometrically spaced over [min_batch, max_batch]
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(9)
UNCERTAIN_NODES = (_NODES, _WEIGHTS / _WEIGHTS.sum())  # a standard normal's quadrature: E[f(Z)] = weights @ f(nodes)
DEFAULT_RANGE = 8  # without max_batch: up to this many times the workload's global batch


GRID_POINTS = 64  # local batches per worker, geometrically spaced, on which a curve's time is tabulated


class StepCosts:
    """The compute phase goodput expects at a global batch, and its split: on the workers'
    hinted curves, each scaled by ``ratios`` (the module's docstring), or, without curves, on
    the fitted lines. Lines (fitted, or affine curves) take the exact water-filling. Other curves
    take the balanced time of the continuous split, on each curve tabulated once at
    :data:`GRID_POINTS` local batches: a few array operations a candidate batch however many
    workers there are (the exact integer split, :func:`min_max_split`, calls each curve's
    Python methods hundreds of times, seconds for a thousand distinct curves). It approximates
    the integer optimum: the continuous split is up to a sample's time faster. The grid keeps
    each curve's declared bends (``CostModel.bends``: a table's points, a hinge's kink), so a
    piecewise-linear curve is tabulated exactly; a chord between grid points misses the bends of
    a curve that declares none, either way. The split adopted is the exact one."""

    def __init__(self, fixed_s: np.ndarray, per_sample_s: np.ndarray, caps: np.ndarray,
                 curves: Sequence[WorkerHint] | None = None, ratios: np.ndarray | None = None,
                 largest: int = 1) -> None:  # fmt: skip
        self.fixed_s, self.per_sample_s, self.caps, self.largest = fixed_s, per_sample_s, caps, largest
        # A ratio of exactly 1 keeps the curve object, so equal curves stay one kind for min_max_split.
        if curves is not None and ratios is not None:
            curves = [h if r == 1.0 else replace(h, noise_mean=h.noise_mean * r, delay_s=h.delay_s * r)
                      for h, r in zip(curves, ratios.tolist())]  # fmt: skip
        self.curves = None if curves is None else tuple(curves)
        affine = None if self.curves is None else [h.affine() for h in self.curves]
        if affine is not None and all(a is not None for a in affine):
            self.fixed_s = np.array([a[0] for a in affine if a is not None])
            self.per_sample_s = np.array([a[1] for a in affine if a is not None])
            self.curves = None  # (the water-filling is the same optimum, exact and vectorised)
        self._grid: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._upto = 0  # the batch the grid reaches

    def split(self, batch: int) -> tuple[int, ...]:
        if self.curves is None:
            return water_fill(self.fixed_s, self.per_sample_s, batch, self.caps)
        return min_max_split(self.curves, batch, self.caps)

    def step_s(self, batch: int) -> float:
        if self.curves is None:
            return max_time(
                self.fixed_s, self.per_sample_s, water_fill(self.fixed_s, self.per_sample_s, batch, self.caps)
            )
        return _time_for(*self._tabulated(batch), batch)

    def _tabulated(self, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each curve's local batches (a row each, up to its cap and the batch) and times there,
        then every distinct finite time and the samples all workers do by it: tabulated once up
        to ``largest`` (again when a larger batch is asked for)."""
        if self._grid is None or batch > self._upto:
            assert self.curves is not None
            self._upto = max(batch, self.largest)
            limits = np.minimum(self.caps, float(self._upto))
            b = _with_bends(np.geomspace(1.0, np.maximum(limits, 1.0), GRID_POINTS, axis=1), self.curves)
            t = np.array([np.asarray(h.expected_s(row), dtype=float) for h, row in zip(self.curves, b)])
            t[limits < 1] = np.inf  # a worker that can take no sample (down, or capped at 0)
            t = np.maximum.accumulate(t, axis=1)
            times = np.unique(t[np.isfinite(t)])
            self._grid = b, t, times, _samples_within(b, t, times)
        return self._grid


def _with_bends(grid: np.ndarray, curves: Sequence[WorkerHint]) -> np.ndarray:
    """Each row of ``grid`` with its curve's bends inside it added (``CostModel.bends``), so
    that a chord never crosses one: a curve linear between its bends is then exact between the
    points. Rows are padded with their last point to one width (a repeated point adds nothing)."""
    rows = []
    for row, hint in zip(grid, curves):
        assert hint.cost is not None  # StepCosts is given curves only where every cost is known
        bends = np.asarray(hint.cost.bends(), dtype=float)
        rows.append(np.union1d(row, bends[(bends > row[0]) & (bends < row[-1])]))
    width = max(len(r) for r in rows)
    return np.array([np.pad(r, (0, width - len(r)), mode="edge") for r in rows])


def _samples_within(b: np.ndarray, t: np.ndarray, times_s: np.ndarray) -> np.ndarray:
    """How many samples the workers do within each of ``times_s``: each row's batch at that
    time, linear between its tabulated points (none below the first point's time, the last
    point's above), summed over the rows."""
    width = t.shape[1]
    k = np.stack([np.searchsorted(row, times_s, side="right") for row in t])  # (rows, times): points by then
    j = np.clip(k, 1, width - 1)
    rows = np.arange(len(t))[:, None]
    t0, t1, b0, b1 = t[rows, j - 1], t[rows, j], b[rows, j - 1], b[rows, j]
    with np.errstate(invalid="ignore", divide="ignore"):
        between = b0 + (b1 - b0) * np.where(t1 > t0, (times_s - t0) / (t1 - t0), 1.0)
    inner = (k > 0) & (k < width)
    return np.asarray(np.where(inner, between, np.where(k == 0, 0.0, b[:, -1:])).sum(axis=0))


def _time_for(b: np.ndarray, t: np.ndarray, times_s: np.ndarray, done: np.ndarray, batch: float) -> float:
    """The least time by which the workers do ``batch`` samples between them (the last tabulated
    time if they cannot), exactly: ``done`` (the samples by each of the sorted tabulated
    ``times_s``) brackets it between two of them, and no row bends between two, so the count is
    linear there; its slope is read at the middle (a row starting or flat at the bracket's top
    jumps there, and the time is then the top)."""
    if times_s.size == 0:
        return 0.0
    reached = done >= batch
    if not reached.any():
        return float(times_s[-1])
    i = int(np.argmax(reached))
    if i == 0:
        return float(times_s[0])
    lo, hi, before = float(times_s[i - 1]), float(times_s[i]), float(done[i - 1])
    middle = 0.5 * (lo + hi)
    if middle <= lo:  # the two times equal, or a float apart (flat curves' floors): the count jumps at hi
        return hi
    slope = (float(_samples_within(b, t, np.array([middle]))[0]) - before) / (middle - lo)
    return hi if slope <= 0 else min(hi, lo + (batch - before) / slope)


class Goodput(Adaptive):
    """The global batch and its split chosen together for the most progress per second
    (Pollux's goodput with ``adaptive``'s per-worker split inside the step time)."""

    name = "goodput"
    needs_efficiency = True
    uses_costs = True
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
        if capacity < 1:
            raise ConfigError("workers.max_batch", "the workers' caps hold no sample: there is no batch to choose")
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
        self._curves = self.hints if self.costs_known else None
        if self._curves is not None:  # the first batch from the curves, before any step (nothing to hold it back)
            costs = StepCosts(self.fixed_s, self.per_sample_s, self.cap_array, self._curves, largest=self.highest_batch)
            self.global_batch = self._best_batch(costs, hysteresis=0.0)
            self._batches = costs.split(self.global_batch)

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
        if rebatch and estimates[2].sum() >= 1:
            costs = self.step_costs(*estimates)
            batch = self._best_batch(costs, self.batch_hysteresis)
            if batch != self.global_batch:
                self.global_batch, self._batches = batch, costs.split(batch)
                return
        if estimates[2].sum() >= self.global_batch:
            self._resplit(*estimates)

    def step_costs(self, fixed_s: np.ndarray, per_sample_s: np.ndarray, caps: np.ndarray) -> StepCosts:
        """What batches are judged by now: the hinted curves scaled by each worker's ratio of its
        fitted time to its curve's at its current local batch, or without curves the fitted lines.
        A worker that runs no samples keeps its curve (ratio 1): the ratio of a fit it stopped
        adding to is stale, and under heavy noise a few steps' ratio misleads more than the curve
        (``benchmarks/goodput.py``'s straggler cluster was slower with it kept); if the worker is
        slower than its curve, the first step that gives it samples shows it, and ``adaptive``'s
        re-split moves them."""
        if self._curves is None:
            return StepCosts(fixed_s, per_sample_s, caps)
        b = np.asarray(self._batches, dtype=float)
        ratios = np.ones(self.n_workers)
        for i in np.flatnonzero((b > 0) & self._known).tolist():
            hinted, fitted = float(self._curves[i].expected_s(b[i])), float(fixed_s[i] + per_sample_s[i] * b[i])
            if hinted > 0 and fitted > 0 and np.isfinite(fitted):
                ratios[i] = fitted / hinted
        return StepCosts(fixed_s, per_sample_s, caps, self._curves, ratios, self.highest_batch)

    def _unmeasured_costs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``adaptive``'s, except that with curves a worker not measured yet (one the curves'
        split left out) takes the line through its curve at 1 sample and at the global batch
        rather than the measured workers' mean: else the first re-split would load a slow worker
        that the curves rightly left out."""
        if self._curves is None:
            return super()._unmeasured_costs()
        fixed_s, per_sample_s = self.fixed_s.copy(), self.per_sample_s.copy()
        far = float(max(2, self.global_batch))
        for i in np.flatnonzero(~self._known).tolist():
            one, at_far = (float(self._curves[i].expected_s(b)) for b in (1.0, far))
            slope = (at_far - one) / (far - 1.0)
            per_sample_s[i] = max(slope, 1e-12)  # a flat curve: a tiny slope, as a line needs one
            fixed_s[i] = one - per_sample_s[i]
        return fixed_s, per_sample_s

    def goodput(self, batch: int, costs: StepCosts) -> float:
        """Predicted progress per second at global batch ``batch`` (its step time: ``costs.step_s``):
        one over the expected seconds a step of progress takes. Where the efficiency table states
        how well its noise scale is known (``noise_scale_sd``, of its log, from the fit) and no
        measured noise scale replaced it, the expectation runs over the noise scales the fit
        allows (Gauss-Hermite, :data:`UNCERTAIN_NODES` nodes): a large batch's gain rests on a
        large noise scale, and across the ones allowed the time to the target is dominated by
        the small. Without the sd (a run's measured noise scale states none) it is the gain at
        the estimate, exactly."""
        efficiency = self.run.efficiency
        assert efficiency is not None
        step_s = costs.step_s(batch) + self.run.overhead_s
        sd = efficiency.noise_scale_sd if self.measured_noise is None else None
        if not sd:
            return float(efficiency.gain(batch, self.noise_scale())) / step_s
        nodes, weights = UNCERTAIN_NODES
        per_progress = float(weights @ (1.0 / efficiency.gain(batch, self.noise_scale() * np.exp(sd * nodes))))
        return 1.0 / (per_progress * step_s)

    def _best_batch(self, costs: StepCosts, hysteresis: float) -> int:
        """The candidate of highest goodput if it beats the current batch's by ``hysteresis``."""
        highest = int(min(self.highest_batch, costs.caps.sum()))
        lowest = min(self.lowest_batch, highest)
        sizes = np.unique(np.round(np.geomspace(lowest, highest, CANDIDATES)).astype(np.int64))
        rates = [self.goodput(int(b), costs) for b in sizes]
        best = int(sizes[int(np.argmax(rates))])
        if self.global_batch > highest:  # the workers up cannot hold the current batch
            return best
        current = self.goodput(self.global_batch, costs)
        return best if max(rates) >= (1 + hysteresis) * current else self.global_batch
