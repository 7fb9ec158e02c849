"""Which local batches ``validation profile`` measures, and how its measurements are summarised.

Pure functions and one small planner, no torch and no clock: the rank's driver
(:mod:`validation.profile_measure`) feeds them its measurements, and the tests feed them
synthetic curves.

**The grid.** :class:`GridPlanner` starts with a coarse grid, log-spaced from ``low`` to
``high`` (the two ends first, so that the table spans the whole range even when the budget
allows no more, then the interior points by bisection). After that it refines where the curve
bends: at each measured interior batch it knows how far linear interpolation between that
batch's two neighbours is from what was measured there (the *bend*, relative to the time; for
a batch just added it is exactly how badly interpolation mispredicted the new midpoint), and it
splits next the interval next to the largest bend, at its geometric midpoint (ties: the widest
interval in log space). A straight line has no bend anywhere, so it gets the coarse grid and
nothing more; a hinge (flat, then linear: a GPU that is not yet busy) collects points around its
kink. Refinement stops when no bend exceeds ``tolerance_rel`` (the measurements' own noise:
splitting further would chase it), when no interval can be split (neighbouring integers, or
within ``min_ratio`` of each other), or at ``max_points``.

**The budget.** :func:`run_grid` measures the planner's batches while the predicted cost of the
next one still fits in the budget: the time a measurement took per second of step time so far,
times the step time predicted at the new batch (interpolated from what is known, rough
estimates included). When the first two batches cannot both be measured within it,
:class:`BudgetTooSmall` says so before anything else is spent.

**The rest of the budget.** :func:`next_fill` spends it on more repeats, a chunk at a time, to
the measured batch with the fewest samples (round robin): a CPU's step time drifts over
seconds (its frequency, a neighbour's load, the host's), so samples taken in one burst per batch
would put that drift between the batches, as a bend the curve does not have; spread evenly over
the budget, every batch sees the same mix of the machine's states.

**Summaries.** :func:`median_ci`: the sample median and a distribution-free confidence interval
for the median from order statistics (the binomial, no normality assumed; step times are
skewed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

ROUNDING = 1e-9  # a bend this small is rounding error, even at a tolerance of 0


class BudgetTooSmall(Exception):
    """The budget cannot hold two batch sizes (the least a cost table needs)."""

    def __init__(self, needed_s: float, budget_s: float) -> None:
        super().__init__(f"{budget_s:g} s cannot hold two batch sizes (about {needed_s:.3g} s needed)")
        self.needed_s, self.budget_s = needed_s, budget_s


def coarse_grid(low: int, high: int, n: int) -> list[int]:
    """Up to ``n`` distinct integers log-spaced from ``low`` to ``high`` (both included), in
    measuring order: ``low``, ``high``, then the interior by bisection (the middle one first)."""
    if not 1 <= low <= high:
        raise ValueError(f"need 1 <= low <= high, got {low}, {high}")
    if low == high or n < 2:
        return [low] if low == high or n < 2 else [low, high]
    ratio = math.log(high / low)
    spaced = sorted({min(high, max(low, round(low * math.exp(ratio * k / (n - 1))))) for k in range(n)})
    interior = [b for b in spaced if low < b < high]
    return [low, high, *_bisection_order(interior)]


def _bisection_order(items: Sequence[int]) -> list[int]:
    """The middle item first, then the middles of each half, breadth first."""
    out: list[int] = []
    spans = [(0, len(items))]
    while spans:
        nxt = []
        for lo, hi in spans:
            if lo < hi:
                mid = (lo + hi) // 2
                out.append(items[mid])
                nxt += [(lo, mid), (mid + 1, hi)]
        spans = nxt
    return out


def interpolate(points: Mapping[int, float], batch: float) -> float:
    """Piecewise-linear through ``points`` (batch -> seconds), as hetsim's ``table`` cost: flat
    below the first point, the last segment's slope beyond the last."""
    xs = sorted(points)
    if len(xs) == 1 or batch <= xs[0]:
        return points[xs[0]]
    for a, c in zip(xs, xs[1:]):
        if batch <= c:
            return points[a] + (points[c] - points[a]) * (batch - a) / (c - a)
    a, c = xs[-2], xs[-1]
    return points[c] + (points[c] - points[a]) * (batch - c) / (c - a)


def bends(points: Mapping[int, float]) -> dict[int, float]:
    """At each interior batch, ``|t - interpolation between its neighbours| / t``."""
    xs = sorted(points)
    out = {}
    for a, b, c in zip(xs, xs[1:], xs[2:]):
        line = points[a] + (points[c] - points[a]) * (b - a) / (c - a)
        out[b] = abs(points[b] - line) / points[b] if points[b] > 0 else 0.0
    return out


@dataclass
class GridPlanner:
    """The batches to measure between ``low`` and ``high`` (see the module's docstring)."""

    low: int
    high: int
    coarse: int = 5
    tolerance_rel: float = 0.0
    max_points: int = 32
    min_ratio: float = 1.05  # an interval narrower than this (c / a) is not split: its points would differ by noise
    points: dict[int, float] = field(default_factory=dict)  # measured: batch -> step time (s)
    rough: dict[int, float] = field(default_factory=dict)  # estimates (one unrepeated step), until measured

    def record(self, batch: int, time_s: float) -> None:
        self.points[batch] = float(time_s)

    def propose(self) -> int | None:
        """The next batch to measure, or None when refining further is not worth it."""
        for b in coarse_grid(self.low, self.high, self.coarse):
            if b not in self.points:
                return b
        if len(self.points) >= self.max_points:
            return None
        interval = self.worst_interval()
        if interval is None:
            return None
        a, c = interval
        return min(max(round(math.sqrt(a * c)), a + 1), c - 1)

    def worst_interval(self) -> tuple[int, int] | None:
        """The splittable interval next to the largest bend above the tolerance (None: none)."""
        xs = sorted(self.points)
        bend = bends(self.points)
        best: tuple[float, float, int] | None = None  # (bend, log width, -a): the largest wins
        found = None
        for a, c in zip(xs, xs[1:]):
            if c - a < 2 or c / a < self.min_ratio:
                continue
            score = max(bend.get(a, 0.0), bend.get(c, 0.0)) if bend else math.inf
            key = (score, math.log(c / a), -a)
            if score > max(self.tolerance_rel, ROUNDING) and (best is None or key > best):
                best, found = key, (a, c)
        return found

    def predict_s(self, batch: int) -> float:
        """The step time expected at ``batch``: from the measured points, else the rough ones."""
        known = {**self.rough, **self.points}
        return interpolate(known, batch) if known else 0.0


def run_grid(
    planner: GridPlanner,
    measure: Callable[[int], tuple[float, float]],
    budget_s: float,
    steps_per_point: float,
) -> float:
    """Measure the planner's batches while each predicted cost fits in ``budget_s``; returns the
    time spent. ``measure(batch)`` -> (step time, time the measurement took). A measurement is
    predicted to take ``steps_per_point`` step times at first, then what the measurements so far
    took per second of step time. Raises :class:`BudgetTooSmall` when the first two batches
    cannot both be measured."""
    spent, stepped = 0.0, 0.0
    while True:
        batch = planner.propose()
        if batch is None:
            return spent
        per_step = spent / stepped if stepped > 0 else steps_per_point
        predicted = per_step * planner.predict_s(batch)
        if planner.points and spent + predicted > budget_s:
            if len(planner.points) < 2:
                raise BudgetTooSmall(spent + predicted, budget_s)
            return spent
        time_s, took_s = measure(batch)
        planner.record(batch, time_s)
        spent += took_s
        stepped += time_s


def next_fill(samples: Mapping[int, Sequence[float]], cap: int, fits: Callable[[int], bool]) -> int | None:
    """The batch to give the next chunk of repeats: of those with fewer than ``cap`` samples whose
    chunk ``fits`` in what is left of the budget, the one with the fewest samples (ties: the widest
    confidence interval, then the smallest batch); None when there is none. Between two chunks of
    steps: ``fits`` is asked, and intervals are computed, only as far as the order needs them."""
    for count in sorted({len(s) for s in samples.values() if len(s) < cap}):
        level = [b for b, s in samples.items() if len(s) == count]
        for b in sorted(level, key=lambda b: (-spread_rel(samples[b]), b)):
            if fits(b):
                return b
    return None


def median_ci(samples: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the sample median and the narrowest order-statistic interval
    ``[x_(j), x_(n+1-j)]`` whose coverage of the true median, ``1 - 2 P(Binomial(n, 1/2) < j)``,
    is at least ``level`` (with fewer than 6 samples none is: the interval is the whole range)."""
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    mid = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    j, tail = 1, 1 / 2**n  # tail = P(Binomial(n, 1/2) < j)
    while j < (n + 1) // 2:
        tail_next = tail + math.comb(n, j) / 2**n
        if 1 - 2 * tail_next < level:
            break
        tail, j = tail_next, j + 1
    return mid, xs[j - 1], xs[n - j]


def spread_rel(samples: Sequence[float]) -> float:
    """The confidence interval's half-width relative to the median (0 for one sample)."""
    mid, lo, hi = median_ci(samples)
    return 0.5 * (hi - lo) / mid if mid > 0 and len(samples) > 1 else 0.0


class DoesNotFit(Exception):
    """Not even a local batch of one sample fits on the device."""


def back_off(fits: Callable[[int], float | None], cap: int, close_rel: float = 0.05) -> tuple[int, float]:
    """The largest batch up to ``cap`` that ``fits`` (``fits(b)``: one step's time, or None when
    the device ran out of memory) and that step's time: ``cap`` when it fits, else halving until
    one fits, then bisecting between the largest that fit and the smallest that did not until
    they are within ``close_rel`` of each other (or neighbours). :class:`DoesNotFit` when even
    one sample does not."""
    good: tuple[int, float] | None = None
    bad: int | None = None
    batch = cap
    while True:
        time_s = fits(batch)
        if time_s is not None:
            good = (batch, time_s)
        else:
            bad = batch
            if batch == 1:
                raise DoesNotFit
        if bad is None and good is not None:
            return good
        if good is None:
            batch = max(1, batch // 2)
            continue
        assert bad is not None
        if bad - good[0] <= max(1.0, close_rel * good[0]):
            return good
        batch = (good[0] + bad) // 2
