"""Splits: integers, within caps, summing to the global batch; water-filling is the min-max optimum."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hetsim.model.costs import Affine, Hinge, Table
from hetsim.model.partition import (
    balanced_split,
    balanced_time,
    fits_within,
    max_time,
    min_max_split,
    slowest_expected_s,
    split_by_shares,
    water_fill,
    water_fill_array,
)
from hetsim.policies import WorkerHint


@st.composite
def split_problems(draw):
    n = draw(st.integers(1, 12))
    total = draw(st.integers(n, 2000))
    shares = draw(st.lists(st.floats(0.0, 10.0), min_size=n, max_size=n))
    caps = draw(st.lists(st.one_of(st.just(math.inf), st.integers(1, 2000)), min_size=n, max_size=n))
    assume(sum(caps) >= total)
    return shares, total, caps


@given(split_problems())
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_split_by_shares_is_a_valid_split(problem):
    shares, total, caps = problem
    b = split_by_shares(shares, total, caps)
    assert sum(b) == total
    assert all(isinstance(x, int) and 0 <= x <= c for x, c in zip(b, caps))


@pytest.mark.slow
@given(split_problems())
def test_split_by_shares_stays_within_one_sample_of_proportional_when_uncapped(problem):
    shares, total, _ = problem
    assume(sum(shares) > 0)
    b = split_by_shares(shares, total)
    for x, s in zip(b, shares):
        assert abs(x - total * s / sum(shares)) < 1 + 1e-9


def test_split_by_shares_exact_cases():
    assert split_by_shares([1, 1, 1], 10) == (4, 3, 3)
    assert split_by_shares([1, 1], 256) == (128, 128)
    assert split_by_shares([3, 1], 100, [60, math.inf]) == (60, 40)
    assert split_by_shares([-1, 1, 1], 300) == (0, 150, 150)  # below zero counts as zero
    assert split_by_shares([0, 0, 0], 3) == (1, 1, 1)  # all zero: even
    assert split_by_shares([0.0, 0.0], 5) == (3, 2)


@pytest.mark.parametrize(("shares", "total", "problem"), [
    ([math.nan, 1, 1], 300, "share 0 is nan: a share must be finite"),  # was a NumPy warning and int64's minimum
    ([1, math.inf], 300, "share 1 is inf: a share must be finite"),
    ([1, 1], -700, "a total of -700: it must be >= 0"),  # was -350/-350
])  # fmt: skip
def test_split_by_shares_refuses_a_share_that_is_not_a_number_in_one_line(shares, total, problem):
    from hetsim.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        split_by_shares(shares, total)
    assert str(refused.value) == f"policy: split_by_shares: {problem}"


@st.composite
def affine_problems(draw, max_n=8, max_total=400):
    n = draw(st.integers(1, max_n))
    total = draw(st.integers(n, max_total))
    a = draw(st.lists(st.floats(0.0, 0.5), min_size=n, max_size=n))
    c = draw(st.lists(st.floats(1e-4, 0.05), min_size=n, max_size=n))
    caps = draw(st.lists(st.one_of(st.just(math.inf), st.integers(1, max_total)), min_size=n, max_size=n))
    assume(sum(caps) >= total)
    return a, c, total, caps


@pytest.mark.slow
@given(affine_problems())
def test_water_fill_is_valid_and_no_single_move_improves_it(problem):
    a, c, total, caps = problem
    b = water_fill(a, c, total, caps)
    assert sum(b) == total and all(0 <= x <= cap for x, cap in zip(b, caps))
    best = max_time(a, c, b)
    assert best >= balanced_time(a, c, total, caps) - 1e-9  # never beats the continuous bound
    for i, j in itertools.permutations(range(len(b)), 2):
        if b[i] > 0 and b[j] < caps[j]:
            moved = list(b)
            moved[i] -= 1
            moved[j] += 1
            assert max_time(a, c, moved) >= best - 1e-12


@pytest.mark.slow
@given(affine_problems(max_n=3, max_total=30))
def test_water_fill_matches_brute_force(problem):
    a, c, total, caps = problem
    n = len(a)
    best = math.inf
    for head in itertools.product(range(total + 1), repeat=n - 1):
        last = total - sum(head)
        split = (*head, last)
        if last >= 0 and all(x <= cap for x, cap in zip(split, caps)):
            best = min(best, max_time(a, c, split))
    assert max_time(a, c, water_fill(a, c, total, caps)) == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_water_fill_closed_form():
    # a_i + c_i b_i = T for all i: b = (T - a)/c with T = (B + sum a/c) / sum 1/c.
    a, c, total = [0.01, 0.02, 0.05], [0.001, 0.002, 0.004], 700
    t = (total + sum(x / y for x, y in zip(a, c))) / sum(1 / y for y in c)
    assert balanced_time(a, c, total, [math.inf] * 3) == pytest.approx(t)
    continuous = [(t - x) / y for x, y in zip(a, c)]
    b = water_fill(a, c, total)
    assert all(abs(x - y) < 1 for x, y in zip(b, continuous))
    # A worker whose overhead alone exceeds the balanced time of the others gets nothing.
    assert water_fill([0.0, 0.0, 10.0], [0.001, 0.001, 0.001], 100) == (50, 50, 0)
    # A cap binds and the rest is re-balanced among the others.
    assert water_fill([0.0, 0.0], [0.001, 0.004], 100, [50, math.inf]) == (50, 50)


# ----------------------------------------------------------------------------- any cost curve


@st.composite
def table_problems(draw):
    """A few workers with random non-decreasing tables (some flat stretches, some steep), caps
    and a global batch small enough for brute force."""
    n = draw(st.integers(1, 4))
    total = draw(st.integers(n, 12))
    hints = []
    for _ in range(n):
        steps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.01, 0.2]), min_size=3, max_size=3))
        start = draw(st.sampled_from([0.001, 0.01, 0.05]))
        times = list(itertools.accumulate([start, *steps]))
        points = [[b, t] for b, t in zip([1, 3, 6, 12], times)]
        cap = draw(st.one_of(st.just(math.inf), st.integers(0, total)))
        hints.append(
            WorkerHint(cap, Table(points=points), draw(st.sampled_from([1.0, 1.3])), draw(st.sampled_from([0.0, 0.02])))
        )
    assume(sum(h.max_batch for h in hints) >= total)
    return hints, total


@pytest.mark.slow
@given(table_problems())
def test_the_min_max_split_on_any_non_decreasing_curve_equals_brute_force(problem):
    hints, total = problem
    caps = [h.max_batch for h in hints]
    split = min_max_split(hints, total, caps)
    assert sum(split) == total and all(0 <= b <= c for b, c in zip(split, caps))
    ranges = [range(0, int(min(c, total)) + 1) for c in caps]
    best = min(slowest_expected_s(hints, s) for s in itertools.product(*ranges) if sum(s) == total)
    assert slowest_expected_s(hints, split) == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_the_min_max_split_takes_the_closed_form_for_affine_costs_and_agrees_with_it_as_a_table():
    hints = [WorkerHint(math.inf, Affine(0.01, 0.001)), WorkerHint(60, Affine(0.0, 0.003), 1.0, 0.005)]
    split = min_max_split(hints, 100, [math.inf, 60])
    assert split == water_fill([0.01, 0.005], [0.001, 0.003], 100, [math.inf, 60])
    as_tables = [WorkerHint(h.max_batch, Table(points=[[b, float(h.cost.time_s(b))] for b in (1, 200)]), 1.0, h.delay_s)
                 for h in hints]  # fmt: skip
    assert slowest_expected_s(as_tables, min_max_split(as_tables, 100, [math.inf, 60])) == pytest.approx(
        slowest_expected_s(hints, split), rel=1e-12
    )


def test_balanced_split_gives_equal_times_on_curves_and_the_closed_form_on_affine_costs():
    curves = [
        WorkerHint(math.inf, Hinge(0.02, 0.0, 0.001)),
        WorkerHint(math.inf, Table(points=[[1, 0.01], [100, 0.2]])),
    ]
    b = balanced_split(curves, 120, [math.inf, math.inf])
    assert b.sum() == pytest.approx(120, rel=1e-9)
    assert float(curves[0].expected_s(b[0])) == pytest.approx(float(curves[1].expected_s(b[1])), rel=1e-9)
    affine = [WorkerHint(math.inf, Affine(0.01, 0.001)), WorkerHint(math.inf, Affine(0.0, 0.002))]
    t = balanced_time([0.01, 0.0], [0.001, 0.002], 90, [math.inf, math.inf])
    assert balanced_split(affine, 90, [math.inf, math.inf]).tolist() == pytest.approx([(t - 0.01) / 0.001, t / 0.002])


# ----------------------------------------------------------------------------- the O(n) check


@st.composite
def tied_problems(draw):
    """Affine problems with many equal fixed costs (0.0 and -0.0 among them) and caps (0 for a
    worker that is down), as fitted costs have."""
    n = draw(st.integers(1, 40))
    a = np.array(draw(st.lists(st.sampled_from([0.0, -0.0, 0.01, 0.02, 0.035]) | st.floats(0.0, 0.05), min_size=n,
                               max_size=n)))  # fmt: skip
    c = np.array(draw(st.lists(st.sampled_from([0.001, 0.002]) | st.floats(1e-4, 0.01), min_size=n, max_size=n)))
    caps = np.array(draw(st.lists(st.sampled_from([math.inf, math.inf, 0.0, 5.0, 30.0]), min_size=n, max_size=n)))
    total = draw(st.integers(1, 40 * n))
    assume(caps.sum() >= total)
    return a, c, total, caps


@pytest.mark.slow
@given(tied_problems(), st.floats(0.5, 2.0))
def test_fits_within_tells_whether_the_integer_optimum_is_done_by_then(problem, scale):
    """The O(n) check against the integer min-max split itself: some split is done by ``t``
    exactly when water_fill's is (``t`` away from the optimum by more than rounding)."""
    a, c, total, caps = problem
    best = max_time(a, c, water_fill_array(a, c, total, caps).astype(float))
    t = best * scale
    assume(abs(t - best) > 1e-9 * max(best, 1e-3))
    assert fits_within(a, c, total, caps, t) == (best <= t)


def test_fits_within_exact_cases():
    a, c, caps = np.array([0.01, 0.02]), np.array([0.001, 0.002]), np.array([math.inf, 3.0])
    assert fits_within(a, c, 10, caps, 0.02)  # the first does 10 by 0.02
    assert not fits_within(a, c, 11, caps, 0.0209)  # 10 + 0 (the second needs 0.022 for one)
    assert fits_within(a, c, 14, caps, 0.0305)  # 20 + 5 capped at 3: 23 >= 14
    assert fits_within(a, c, 23, caps, 0.0305) and not fits_within(a, c, 24, caps, 0.0305)
