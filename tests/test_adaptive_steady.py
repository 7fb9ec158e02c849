"""adaptive's steady steps taken across steps at once (:mod:`hetsim.policies.adaptive_steady`)
are bit for bit the steps taken one at a time: the same splits, step by step, and the same
state after, on clusters where the noise margin, surprises, restarts and re-splits all occur."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.policies import StepInfo, StepRecord, WorkerHint, adaptive, make_policy
from hetsim.policies.adaptive_steady import noise_margin, steady_prefix

PER_EPOCH = 25


@st.composite
def runs(draw):
    """A cluster (now and then one past 157 workers, where the detector's band widens), its
    affine costs with noise and a slowdown of some workers for a while (surprises, then
    restarts), caps (loose, or binding near the mean batch), a stretch with some workers down,
    the policy's parameters and the engine's block length."""
    n = draw(st.integers(2, 40) | st.just(200))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    steps = draw(st.integers(20, 160))
    noise = np.exp(draw(st.sampled_from([0.0, 0.01, 0.05, 0.2])) * rng.standard_normal((steps, n)))
    if draw(st.booleans()):
        first = draw(st.integers(0, steps - 1))
        noise[first : first + draw(st.integers(1, 40)), : draw(st.integers(1, n))] *= draw(st.sampled_from([0.5, 3.0]))
    batch = draw(st.integers(2 * n, 64 * n))
    caps = draw(st.sampled_from([None, "half", "tight"]))
    hints = None
    if caps is not None:  # "tight": each cap the mean batch plus 0, 1 or 2
        cap = [float(batch // 2) if i % 3 else np.inf for i in range(n)] if caps == "half" else \
            [float(-(-batch // n) + i % 3) for i in range(n)]  # fmt: skip
        hints = [WorkerHint(max_batch=c) for c in cap]
    down_from = draw(st.integers(0, steps))
    down = (down_from, down_from + draw(st.integers(0, 30)), draw(st.integers(1, max(1, n // 4))))
    params = {
        "forgetting": draw(st.sampled_from([0.5, 0.9, 0.98, 1.0])),
        "hysteresis": draw(st.sampled_from([0.0, 0.01, 0.05])),
        "resplit": draw(st.sampled_from(["step", "step", "epoch"])),
    }
    costs = (rng.uniform(0.0, 0.02, n), rng.uniform(1e-4, 2e-3, n), noise)
    return n, batch, hints, params, costs, down, draw(st.integers(4, 64))


def _times(costs, split, step):
    a, c, factor = costs
    b = np.asarray(split, dtype=float)
    return np.where(b > 0, (a + c * b) * factor[step], 0.0)


def _state(policy):
    return [policy._stats, policy._slope, policy.fixed_s, policy.per_sample_s, policy._resid_var, policy._surprises]


def _info(step, n, down=(0, 0, 0)):
    """Step ``step``'s info: workers ``0 .. down[2] - 1`` are down from ``down[0]`` to ``down[1]``."""
    start, end, count = down
    available = tuple(i >= count for i in range(n)) if start <= step < end else None
    return StepInfo(step, step // PER_EPOCH, step % PER_EPOCH, PER_EPOCH, available)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(runs())
def test_steady_blocks_are_the_single_steps_bit_for_bit(run):
    n, batch, hints, params, costs, down, block = run
    steps = len(costs[2])
    single, blocked = make_policy("adaptive", params), make_policy("adaptive", params)
    single.reset(n, batch, hints)
    blocked.reset(n, batch, hints)
    splits = []
    for step in range(steps):
        info = _info(step, n, down)
        split = single.partition(info)
        t = _times(costs, split, step)
        single.observe(StepRecord(info, split, tuple(t.tolist()), tuple((t > 0).tolist())))
        splits.append(split)
    step = 0
    while step < steps:  # blocks end where the workers' availability changes, as the engine's do
        info = _info(step, n, down)
        split = blocked.partition(info)
        assert split == splits[step], step
        k = min(block, steps - step, *(edge - step for edge in down[:2] if edge > step))
        t = np.array([_times(costs, split, step + j) for j in range(k)])
        step += blocked.observe_steps(info, tuple(split), t, np.asarray(split) > 0)
    assert blocked._batches == single._batches
    for x, y in zip(_state(single), _state(blocked)):
        np.testing.assert_array_equal(x, y)


def test_the_blocks_do_take_steps_at_once(monkeypatch):
    """On a steady cluster most steps do go across steps (else the test above proves little)."""
    taken = []

    def counted(fit, block):
        steps, after, due = steady_prefix(fit, block)
        taken.append(steps)
        return steps, after, due

    monkeypatch.setattr(adaptive, "steady_prefix", counted)
    n, rng = 64, np.random.default_rng(1)
    policy = make_policy("adaptive")
    policy.reset(n, 32 * n)
    step = 0
    while step < 400:
        b = np.asarray(policy.partition(_info(step, n)), dtype=float)
        t = (0.01 + 1e-3 * b) * np.exp(0.05 * rng.standard_normal((64, n)))
        step += policy.observe_steps(_info(step, n), tuple(policy._batches), t, b > 0)
    assert sum(taken) > 0.9 * 400


def test_the_noise_margin_bounds_the_expected_maximum_of_the_fit_errors():
    rng = np.random.default_rng(0)
    for n in (2, 6, 64, 1024):  # sqrt(2 ln n): above the mean maximum of n normals, by about its spread
        maxima = rng.standard_normal((4000, n)).max(axis=1)
        bound = float(noise_margin(1.0, 0.0, n))  # (f = 0: the fit is one measurement, var 1)
        assert maxima.mean() < bound < maxima.mean() + 1.5 * maxima.std()
    # in standard errors of a forgetting fit: sqrt(var (1 - f) / (1 + f))
    assert np.isclose(noise_margin(0.01, 0.98, 1024), np.sqrt(2 * np.log(1024) * 0.01 * 0.02 / 1.98), rtol=1e-15)
    assert float(noise_margin(0.04, 0.9, 1)) == 0.0
