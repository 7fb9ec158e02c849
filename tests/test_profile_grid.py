"""``python -m validation profile``'s batch grid, as pure functions on synthetic curves: the
adaptive grid and its budget, the order-statistic interval of the median, and the back-off to
the largest batch that fits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validation.profile_grid import (
    BudgetTooSmall,
    DoesNotFit,
    GridPlanner,
    back_off,
    bends,
    coarse_grid,
    interpolate,
    median_ci,
    next_fill,
    run_grid,
)

ROOT = Path(__file__).resolve().parents[1]
STEPS = 9.0  # a measurement: 2 warm-ups and 7 repeats


def grid_on(curve, low, high, budget_s, **kwargs):
    """The adaptive grid on a noise-free ``curve`` (a measurement costs STEPS step times)."""
    planner = GridPlanner(low, high, rough={high: curve(high)}, **kwargs)
    spent = run_grid(planner, lambda b: (curve(b), STEPS * curve(b)), budget_s, STEPS)
    return planner, spent


def hinge(floor_s, overhead_s, per_sample_s):
    return lambda b: max(floor_s, overhead_s + per_sample_s * b)


def around_kink(points, kink):
    """The ratio c / a of the interval [a, c] of ``points`` that holds ``kink`` inside."""
    xs = sorted(points)
    return next(c / a for a, c in zip(xs, xs[1:]) if a < kink < c or kink in (a, c))


def max_error(points, curve, low, high):
    """The largest relative error of interpolating ``points`` over every batch in [low, high]."""
    return max(abs(interpolate(points, b) - curve(b)) / curve(b) for b in range(low, high + 1))


@given(st.integers(1, 64), st.integers(0, 2000), st.integers(2, 12))
def test_coarse_grid_spans_the_range_ends_first_without_repeats(low, extra, n):
    high = low + extra
    grid = coarse_grid(low, high, n)
    assert grid[0] == low and (high == low or grid[1] == high)
    assert len(set(grid)) == len(grid) <= n and all(low <= b <= high for b in grid)
    assert coarse_grid(1, 128, 5) == [1, 128, 11, 3, 38]  # log-spaced, interior by bisection


@given(st.floats(0.0, 0.1), st.floats(1e-5, 1e-2), st.integers(2, 4096))
def test_a_straight_line_gets_the_coarse_grid_and_nothing_more(overhead_s, per_sample_s, high):
    def curve(b):
        return overhead_s + per_sample_s * b + 1e-6

    planner, _ = grid_on(curve, 1, high, budget_s=1e9)
    assert sorted(planner.points) == sorted(coarse_grid(1, high, planner.coarse))
    assert max(bends(planner.points).values(), default=0.0) < 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(64, 4096), st.floats(0.03, 0.3), st.floats(0.001, 0.01), st.floats(1.0, 100.0))
def test_points_stay_in_bounds_and_the_budget_holds(high, kink_at, overhead_s, budget_steps):
    """Every batch in [1, high], none twice; a convex curve's measurements never exceed the
    budget (each is predicted from interpolation, which a convex curve never undershoots)."""
    per_sample_s = 1e-4
    curve = hinge(overhead_s + per_sample_s * kink_at * high, overhead_s, per_sample_s)
    budget_s = budget_steps * STEPS * curve(high)
    try:
        planner, spent = grid_on(curve, 1, high, budget_s)
    except BudgetTooSmall as exc:
        assert STEPS * (curve(1) + curve(high)) > budget_s  # refused only when two batches do not fit
        assert exc.budget_s == budget_s
        return
    assert all(1 <= b <= high for b in planner.points) and len(planner.points) >= 2
    assert spent <= budget_s * (1 + 1e-12)
    assert spent == pytest.approx(STEPS * sum(curve(b) for b in planner.points))


@settings(max_examples=40, deadline=None)
@given(st.integers(256, 4096), st.floats(0.05, 0.25), st.integers(8, 20))
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_points_gather_where_the_curve_bends(high, kink_share, n_points):
    """On a hinge, refining narrows the coarse grid's interval around the kink first (with two
    points more, it is narrower), and it never interpolates the curve worse than the coarse grid."""
    kink = max(4, round(kink_share * high))
    curve = hinge(0.01 + 1e-4 * kink, 0.01, 1e-4)
    planner, _ = grid_on(curve, 1, high, budget_s=1e9, max_points=n_points)
    coarse = {b: curve(b) for b in coarse_grid(1, high, planner.coarse)}
    assert around_kink(planner.points, kink) < around_kink(coarse, kink)
    assert max_error(planner.points, curve, 1, high) <= max_error(coarse, curve, 1, high) + 1e-12  # both 0 but rounding


@pytest.mark.slow  # 1.0 s here: out of make test-fast
def test_the_adaptive_grid_beats_a_log_spaced_one_of_as_many_points():
    """Over 108 hinges (kinks at 5-25% of the range, 8-20 points), the adaptive grid's worst
    interpolation error is at most the log-spaced grid's in most cases (where it is not, the
    log-spaced grid happened to put a point on the kink), and a small fraction of it at the median
    (0.07 when this was written)."""
    ratios = []
    for high in (256, 1000, 4096):
        for share in np.linspace(0.05, 0.25, 9):
            for n_points in (8, 12, 16, 20):
                kink = max(4, round(share * high))
                curve = hinge(0.01 + 1e-4 * kink, 0.01, 1e-4)
                planner, _ = grid_on(curve, 1, high, budget_s=1e9, max_points=n_points)
                spaced = {b: curve(b) for b in coarse_grid(1, high, len(planner.points))}
                ratios.append(max_error(planner.points, curve, 1, high) / max(max_error(spaced, curve, 1, high), 1e-12))
    assert np.mean(np.array(ratios) <= 1.0) >= 0.8
    assert np.median(ratios) < 0.2


def test_refinement_stops_at_the_noise_tolerance():
    curve = hinge(0.02, 0.01, 1e-4)  # kink at 100: a bend of up to a third
    loose, _ = grid_on(curve, 1, 1024, 1e9, tolerance_rel=0.5)
    tight, _ = grid_on(curve, 1, 1024, 1e9, tolerance_rel=0.01)
    assert sorted(loose.points) == sorted(coarse_grid(1, 1024, 5))
    assert len(tight.points) > len(loose.points) + 3


def test_the_rest_of_the_budget_goes_round_robin_within_the_cap_and_the_deadline():
    samples = {1: [1.0] * 14, 8: [2.0] * 7, 64: [3.0, 3.3] * 4}
    assert next_fill(samples, 70, lambda b: True) == 8  # the fewest samples first
    samples[8].append(2.0)  # 8 and 64 now have 8 each: the wider interval (64's) first
    assert next_fill(samples, 70, lambda b: True) == 64
    assert next_fill(samples, 70, lambda b: b != 64) == 8  # a chunk that would overrun the deadline waits
    assert next_fill(samples, 8, lambda b: True) is None and next_fill(samples, 70, lambda b: False) is None


def test_a_drifting_machine_measured_round_robin_keeps_a_straight_line_straight():
    """A straight line measured on a machine that slows by a third over the budget: the grid's
    one chunk of each batch, then the rest of the budget by :func:`next_fill`. Chunks round robin
    give every batch the same mix of the machine's states; the same samples in one burst per
    batch put the drift between the batches, as bends the line does not have."""
    line = {b: 0.001 + 1e-4 * b for b in coarse_grid(1, 256, 5)}
    chunk, cap = 7, 70
    total = cap * len(line)
    samples: dict[int, list[float]] = {}
    order: list[int] = []

    def take(b: int) -> None:
        samples.setdefault(b, []).extend(line[b] * (1 + (len(order) + k) / (3 * total)) for k in range(chunk))
        order.extend([b] * chunk)

    for b in line:
        take(b)
    while (b := next_fill(samples, cap, lambda b: True)) is not None:
        take(b)
    assert len(order) == total and all(len(s) == cap for s in samples.values())
    robin = bends({b: float(np.median(s)) for b, s in samples.items()})
    burst = bends({b: line[b] * (1 + (k + 0.5) / (3 * len(line))) for k, b in enumerate(line)})
    assert max(robin.values()) < 0.02 < 0.05 < max(burst.values())


def test_a_budget_for_one_batch_is_refused_before_the_second():
    curve = hinge(0.0, 0.01, 1e-3)
    with pytest.raises(BudgetTooSmall):
        grid_on(curve, 1, 100, budget_s=STEPS * curve(1) * 1.5)


@given(st.lists(st.floats(1e-4, 10.0), min_size=1, max_size=60))
def test_median_interval_holds_the_median_and_its_coverage(samples):
    mid, lo, hi = median_ci(samples)
    n, xs = len(samples), sorted(samples)
    assert lo <= mid <= hi and mid == pytest.approx(float(np.median(samples)))
    j = xs.index(lo) + 1  # the order statistic chosen (the first of equal values)
    coverage = 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n
    assert coverage >= 0.95 or j == 1


def test_median_interval_exact_cases():
    assert median_ci(range(1, 8)) == (4.0, 1.0, 7.0)  # n = 7: [x1, x7], coverage 1 - 2/128
    assert median_ci(range(1, 10)) == (5.0, 2.0, 8.0)  # n = 9: [x2, x8], coverage 0.961
    assert median_ci(range(1, 21)) == (10.5, 6.0, 15.0)  # n = 20: [x6, x15], coverage 0.959


@given(st.integers(2, 5000), st.integers(0, 6000))
def test_back_off_finds_the_largest_batch_that_fits(cap, limit):
    tried = []

    def fits(b):
        tried.append(b)
        return 0.001 * b if b <= limit else None

    if limit == 0:
        with pytest.raises(DoesNotFit):
            back_off(fits, cap)
        return
    batch, time_s = back_off(fits, cap)
    assert batch <= min(cap, limit) and time_s == 0.001 * batch
    assert batch == cap or min(cap, limit) - batch <= max(1, 0.05 * batch)
    assert len(tried) <= 2 * math.log2(cap) + 2
