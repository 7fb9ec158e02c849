"""``adaptive``: online estimation of each worker's affine cost, then the min-max split.

Each worker's measured compute times are fitted to ``t = a + c * b`` by least squares with
exponential forgetting (the sufficient statistics of recursive least squares, decayed by
``forgetting`` per observation), which follows slow drift. Abrupt changes (a slowdown episode,
a throttled card) are caught by a change detector: two measurements in a row off the
prediction by more than ``max(z sigma, 10%)`` (sigma: the running spread of the worker's
relative residuals) reset the worker's statistics and rescale its fitted costs by the observed
ratio, so the split follows within a few steps instead of the ~1/(1 - forgetting) a plain
forgetting fit would need. While a worker has been seen at one batch size only, the slope is
unidentifiable: the fit keeps its last slope (or, at the start, assumes no fixed cost, the
paper's rule), which is exact again as soon as the split moves. The split is the
water-filling optimum of the fitted costs with ``max_batch`` caps, recomputed every step or
every epoch (``resplit``), and adopted only when it is predicted to be at least
``hysteresis`` faster than the current one plus a noise margin: the fitted time of the slowest
of n workers lies above its true time by about ``sqrt(2 ln n)`` standard errors of a fit, so a
predicted gain smaller than that is as likely noise (without the margin a 1024-worker cluster
re-split at every step on the noise of its fits). Unlike the
1/t rule it models per-step fixed costs, so it gets near the optimum in a few re-splits
instead of creeping towards it. It does not land on it: a split predicted within
``hysteresis`` (and the margin) of the optimum of the *fitted* costs is kept, so with the default
1% it may stop up to 1% short of that on deterministic workers, more on noisy
ones, and while a worker's slope is
not yet identified (its batch has hardly moved) the fitted optimum itself can differ from the
true one by more.

The detector's z is 4, widened on clusters of over 157 workers (4.4 at 1024 workers, 4.9 at
10,000) so that noise does not surprise ever more workers per step as the cluster grows: normal
residuals of a known spread would surprise one worker in a hundred steps; measured ones, skewed
and with an estimated spread, surprise more (0.3 workers per step at 1024 workers with lognormal
noise of sigma 0.05). A surprise alone only holds the worker's spread; two in a row restart it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from hetsim.core.params import Param
from hetsim.model.partition import fits_within, max_time, water_fill_array
from hetsim.policies.adaptive_steady import (
    BOUND_MARGIN,
    MIN_JUMP,
    Block,
    Fit,
    band,
    candidates,
    next_var,
    resplit_goal,
    steady_prefix,
    surprise_free,
    var_term,
)
from hetsim.policies.base import Policy, RunHint, StepInfo, StepRecord, WorkerHint

MAX_AHEAD = 256  # the most steps an engine computes ahead on the current split
AFTER_CHANGE_STEPS = 16  # the guess of steady_steps after a change of split, when steps go across steps
SPECULATE_STEPS = 8  # fewest steps computed across steps at once (fewer go one at a time)
MOST_SPECULATED_STEPS = 16  # most: more would be thrown away when the split changes (measured)
SPECULATE_ELEMENTS = 2**20  # most (steps x workers) computed at once, but never fewer than SPECULATE_STEPS


class Adaptive(Policy):
    """Online affine fit of each worker's cost (forgetting, change detection), then the min-max
    split of the fitted costs, adopted when predicted ``hysteresis`` faster (module docstring)."""

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
            doc="a new split is adopted only when predicted at least this much faster (plus the fits' noise margin)",
        ),
    )
    resplit: str
    forgetting: float
    hysteresis: float

    def reset(
        self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None, run: RunHint | None = None
    ) -> None:
        super().reset(n_workers, global_batch, hints, run)
        self._stats = np.zeros((5, n_workers))  # decayed sums of 1, b, b^2, t, b*t (a row each)
        self._slope = np.full(n_workers, np.nan)
        self.fixed_s = np.zeros(n_workers)
        self.per_sample_s = np.full(n_workers, np.nan)
        self._known = np.zeros(n_workers, dtype=bool)  # per_sample_s is not NaN
        self._resid_var = np.full(n_workers, MIN_JUMP**2 / 16)
        self._sigmas = band(n_workers)
        self._surprises = np.zeros(n_workers, dtype=np.int64)  # signed run of large residuals
        self._ahead_steps = 1  # steps an engine may compute before the split is next re-decided (a guess)
        self._span_steps = SPECULATE_STEPS  # steps computed across steps at once (doubles while they are steady)
        self._most_steps = max(SPECULATE_STEPS, min(MOST_SPECULATED_STEPS, SPECULATE_ELEMENTS // n_workers))
        # Caches, each valid for the object it was made from (held, so it cannot be a new one):
        self._b_of: tuple[int, ...] | None = None  # the local batches self._b holds as floats
        self._b = np.zeros(n_workers)
        self._rows_of: np.ndarray | None = None  # the b self._rows (a measurement's statistics) is for
        self._rows = np.ones((5, n_workers))
        self._positive = np.zeros(n_workers, dtype=bool)  # b > 0
        self._split_of: tuple[int, ...] | None = None  # the split self._split holds as floats
        self._split = np.zeros(n_workers)

    def steady_steps(self, info: StepInfo) -> int:
        if self.resplit == "epoch":  # sure: the split changes only at epoch ends
            return info.steps_per_epoch - info.step_in_epoch
        return self._ahead_steps  # a guess: observe_steps takes the steps up to a change

    def observe(self, record: StepRecord) -> None:
        row = np.asarray(record.compute_s, dtype=float)
        self._step(self._batch_array(record.local_batches), row, np.asarray(record.included, dtype=bool),
                   record.ends_epoch, record.info.available)  # fmt: skip

    def observe_steps(
        self, first: StepInfo, local_batches: tuple[int, ...], compute_s: np.ndarray, included: np.ndarray
    ) -> int:
        """The steps up to the first that changes the split: runs of steady steps across steps
        at once (:mod:`~hetsim.policies.adaptive_steady`; a run's length doubles while it is
        taken whole), the others one at a time. The guess of :meth:`steady_steps` doubles after a
        block taken whole (up to :data:`MAX_AHEAD`); after a change both start short again."""
        b = self._batch_array(local_batches)
        compute_s = np.asarray(compute_s, dtype=float)  # (float64, as one step's measurements become)
        flags = np.asarray(included, dtype=bool)  # one row for every step, or a row each
        before, per_epoch = self._batches, first.steps_per_epoch
        across, fitted, j = self._may_go_across(b, flags), self._fitted_all(), 0
        while j < len(compute_s):
            if across and fitted and len(compute_s) - j >= SPECULATE_STEPS:
                chunk = compute_s[j : j + self._span_steps]
                taken = self._steady(b, chunk, first.available)
                j += taken
                self._span_steps = min(2 * self._span_steps if taken == len(chunk) else self._span_steps,
                                       self._most_steps)  # fmt: skip
                if self._batches is not before:
                    break
                if taken:  # (none: a step whose times cannot go across steps, taken alone below)
                    continue
            ends = (first.step_in_epoch + j) % per_epoch == per_epoch - 1
            self._step(b, compute_s[j], flags if flags.ndim < 2 else flags[j], ends, first.available)
            j, fitted = j + 1, self._fitted_all()
            if self._batches is not before:
                break
        if self._batches is not before:  # a new split: short blocks again
            self._ahead_steps = AFTER_CHANGE_STEPS if across else 1
            self._span_steps = SPECULATE_STEPS
            return j
        self._ahead_steps = min(2 * self._ahead_steps, MAX_AHEAD)
        return len(compute_s)

    def _may_go_across(self, b: np.ndarray, flags: np.ndarray) -> bool:
        """Whether steps on split ``b`` may go across steps: re-split every step by this class's
        own step and update (a subclass's may do more: goodput counts progress and may change the
        batch), on the policy's split, every worker with samples waited for at every step."""
        own = type(self)._step is Adaptive._step and type(self)._update is Adaptive._update
        if not own or self.resplit != "step":
            return False
        return bool(np.array_equal(b, self._split_array()) and (flags == (b > 0)).all())

    def _fitted_all(self) -> bool:
        """Whether every worker has been measured and fitted with a positive slope."""
        return bool(self._known.all() and self._slope.min() > 0 and self._stats[0].min() > 0)

    def _steady(self, b: np.ndarray, compute_s: np.ndarray, available: tuple[bool, ...] | None) -> int:
        """Take the leading steps of ``compute_s`` up to one due its re-split at once, then that
        re-split; how many (none unless every worker with samples has a positive, finite time:
        the slopes then stay positive, as the steps across steps assume)."""
        busy = b > 0
        lowest, highest = np.min(compute_s, where=busy, initial=np.inf), np.max(compute_s, where=busy, initial=0)
        if not (lowest > 0 and highest < np.inf):  # (NaN fails both)
            return 0
        fit = Fit(self._stats, self._slope, self.fixed_s, self._resid_var, self._surprises)
        caps = self._caps_up(available)
        block = Block(b, compute_s, self.forgetting, self.hysteresis, caps, self.global_batch, self._sigmas)
        taken, fit, due = steady_prefix(fit, block)
        self._stats, self._slope, self.fixed_s, self._resid_var, self._surprises = fit
        self.per_sample_s = fit.slope.copy()
        if due:  # (what _update does after the fit just made)
            self._resplit(self.fixed_s, self.per_sample_s, caps)
        return taken

    def _batch_array(self, local_batches: tuple[int, ...]) -> np.ndarray:
        """The local batches as floats; the same array again for the same tuple (so that
        :meth:`_measured` finds its statistics cached)."""
        if local_batches is not self._b_of or not isinstance(local_batches, tuple):
            self._b_of, self._b = local_batches, np.asarray(local_batches, dtype=float)
        return self._b

    def _measured(self, b: np.ndarray, t: np.ndarray) -> np.ndarray:
        """One measurement's statistics, a row each as in ``_stats``: the rows of b are kept while
        b is the same array (an engine's block, or a split that stays), those of t are this step's."""
        if b is not self._rows_of:  # (row 0 holds ones since reset)
            self._rows_of, self._positive = b, b > 0
            np.copyto(self._rows[1], b)
            np.multiply(b, b, out=self._rows[2])
        np.copyto(self._rows[3], t)
        np.multiply(b, t, out=self._rows[4])
        return self._rows

    def _step(self, b: np.ndarray, t: np.ndarray, included: np.ndarray, ends_epoch: bool,
              available: tuple[bool, ...] | None) -> None:  # fmt: skip
        """One step's measurements into the fits, then (every step, or at epoch ends) an update."""
        rows = self._measured(b, t)
        ok = self._positive & included & (t > 0)
        restart = self._restarted(b, t, ok, rows)
        keep = ok if restart is None else ok & ~restart
        if keep.all():  # (in place: the same products and sums as on the kept columns)
            self._stats *= self.forgetting
            self._stats += rows
        else:  # (computed for all, kept where kept: faster than masked arithmetic)
            with np.errstate(invalid="ignore", over="ignore"):
                decayed = self._stats * self.forgetting
                decayed += rows
            np.copyto(self._stats, decayed, where=keep)
        if self.resplit == "step" or ends_epoch:
            self._update(available)

    def _restarted(self, b: np.ndarray, t: np.ndarray, ok: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        """Detect changes of speed; on a worker's second surprise in a row, restart its fit from
        this measurement, with its costs scaled by the surprise. Where it restarted (None: nowhere)."""
        check = ok & self._known
        if not check.any():
            return None
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = t / (self.fixed_s + self.per_sample_s * b)
            resid = ratio - 1.0
            calm = check & surprise_free(np.abs(resid), self._resid_var, self._sigmas)
            var = next_var(self._resid_var, var_term(resid))  # kept where calm (the others' is unused)
        if calm.all():  # the common case: no surprise anywhere
            self._surprises.fill(0)
            self._resid_var = var
            return None
        self._surprises[calm] = 0
        np.copyto(self._resid_var, var, where=calm)
        surprised = check & ~calm
        if not surprised.any():
            return None
        # A run is -1, 0 or 1 between steps (a second surprise in a row restarts and clears it),
        # so a surprise makes it 2 (a restart) where it has the surprise's sign, else the sign.
        sign = np.where(resid > 0, 1, -1)
        restart = surprised & (self._surprises == sign)
        self._surprises[surprised] = sign[surprised]
        if not restart.any():
            return None
        self._slope[restart] *= ratio[restart]
        self._stats[:, restart] = rows[:, restart]
        self._surprises[restart] = 0
        return restart

    def _fit(self) -> None:
        """Per worker: the weighted least-squares line, or the last slope through the mean."""
        seen = self._stats[0] > 0
        mean_b, mean_t, fitted, valid, through_mean = candidates(self._stats)
        with np.errstate(invalid="ignore"):
            slope = np.where(self._slope > 0, self._slope, through_mean)  # the last slope, or no fixed cost
            np.copyto(slope, fitted, where=valid)  # the fit, where it is one
            np.minimum(slope, through_mean, out=slope)  # a fixed cost cannot be negative
            fixed = mean_t - slope * mean_b
        if seen.all():
            self._slope, self.per_sample_s, self.fixed_s = slope, slope.copy(), fixed
        else:
            self._slope = np.where(seen, slope, self._slope)
            self.per_sample_s = np.where(seen, slope, self.per_sample_s)
            self.fixed_s = np.where(seen, fixed, self.fixed_s)
        self._known = ~np.isnan(self.per_sample_s)

    def _update(self, available: tuple[bool, ...] | None) -> None:
        estimates = self._estimates(available)
        if estimates is not None and estimates[2].sum() >= self.global_batch:  # else: wait for the workers
            self._resplit(*estimates)

    def _estimates(self, available: tuple[bool, ...] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Refit; the fitted ``(fixed_s, per_sample_s, caps)`` (caps 0 for the workers down), or
        None while no worker has been measured."""
        self._fit()
        if self._known.all():
            return self.fixed_s, self.per_sample_s, self._caps_up(available)
        assumed = self._unmeasured_costs()
        return None if assumed is None else (*assumed, self._caps_up(available))

    def _unmeasured_costs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(fixed_s, per_sample_s)`` with the workers never measured (down since the start)
        assumed average until they are measured; None while no worker has been."""
        known = self._known
        if not known.any():
            return None
        fixed = np.where(known, self.fixed_s, self.fixed_s[known].mean())
        return fixed, np.where(known, self.per_sample_s, self.per_sample_s[known].mean())

    def _caps_up(self, available: tuple[bool, ...] | None) -> np.ndarray:
        """The caps, 0 for the workers down."""
        return self.cap_array if available is None else np.where(available, self.cap_array, 0.0)

    def _resplit(self, fixed_s: np.ndarray, per_sample_s: np.ndarray, caps: np.ndarray) -> None:
        """Adopt the min-max split of the fitted costs when it is predicted faster by the
        ``hysteresis`` plus the noise margin; skip computing it when no integer split could be
        (:func:`fits_within`: O(n), no sort, the cheap check that lets steps go by unchanged)."""
        split = self._split_array()
        current = max_time(fixed_s, per_sample_s, split)
        busy = int(np.count_nonzero(split))
        goal = float(resplit_goal(current, float(self._resid_var.mean()), self.forgetting, self.hysteresis, busy))
        if np.isfinite(current) and not fits_within(
            fixed_s, per_sample_s, self.global_batch, caps, goal * (1 + BOUND_MARGIN)
        ):
            return
        # (checked: every caller has seen the caps hold the global batch)
        proposal = water_fill_array(fixed_s, per_sample_s, self.global_batch, caps, checked=True)
        as_float = proposal.astype(float)
        if not np.isfinite(current) or max_time(fixed_s, per_sample_s, as_float) < goal:
            self._batches = self._split_of = tuple(proposal.tolist())
            self._split = as_float

    def _split_array(self) -> np.ndarray:
        """The policy's split as floats (cached for the split it was made from)."""
        if self._batches is not self._split_of:
            self._split_of, self._split = self._batches, np.asarray(self._batches, dtype=float)
        return self._split
