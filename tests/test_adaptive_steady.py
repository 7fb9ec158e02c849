"""adaptive's steady steps taken across steps at once (:mod:`hetsim.policies.adaptive_steady`)
are bit for bit the steps taken one at a time: the same splits, step by step, and the same
state after, on clusters where the noise margin, surprises, restarts and re-splits all occur."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.policies import StepInfo, StepRecord, WorkerHint, adaptive, make_policy
from hetsim.policies.adaptive_steady import noise_margin, steady_prefix

PER_EPOCH = 25


@st.composite
def runs(draw):
    n = draw(st.integers(2, 40))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    steps = draw(st.integers(20, 160))
    sigma = draw(st.sampled_from([0.0, 0.01, 0.05, 0.2]))
    noise = np.exp(sigma * rng.standard_normal((steps, n)))
    slow = np.ones((steps, n))  # a slowdown of some workers for a while: surprises, then restarts
    if draw(st.booleans()):
        first = draw(st.integers(0, steps - 1))
        slow[first : first + draw(st.integers(1, 40)), : draw(st.integers(1, n))] = draw(
            st.sampled_from([0.5, 1.5, 3.0])
        )
    a = rng.uniform(0.0, 0.02, n)
    c = rng.uniform(1e-4, 2e-3, n)
    caps = draw(st.sampled_from([None, "some"]))
    params = {
        "forgetting": draw(st.sampled_from([0.5, 0.9, 0.98, 1.0])),
        "hysteresis": draw(st.sampled_from([0.0, 0.01, 0.05])),
    }
    batch = draw(st.integers(2 * n, 64 * n))
    hints = None if caps is None else [WorkerHint(max_batch=float(batch // 2) if i % 3 else np.inf) for i in range(n)]
    return n, batch, hints, params, (a, c, noise * slow), draw(st.integers(4, 64))


def _times(costs, split, step):
    a, c, factor = costs
    b = np.asarray(split, dtype=float)
    return np.where(b > 0, (a + c * b) * factor[step], 0.0)


def _state(policy):
    return [policy._stats, policy._slope, policy.fixed_s, policy.per_sample_s, policy._resid_var, policy._surprises]


def _info(step, n):
    return StepInfo(step, step // PER_EPOCH, step % PER_EPOCH, PER_EPOCH, None)


@settings(max_examples=150, deadline=None)
@given(runs())
def test_steady_blocks_are_the_single_steps_bit_for_bit(run):
    n, batch, hints, params, costs, block = run
    steps = len(costs[2])
    single, blocked = make_policy("adaptive", params), make_policy("adaptive", params)
    single.reset(n, batch, hints)
    blocked.reset(n, batch, hints)
    splits = []
    for step in range(steps):
        split = single.partition(_info(step, n))
        t = _times(costs, split, step)
        single.observe(StepRecord(_info(step, n), split, tuple(t.tolist()), tuple((t > 0).tolist())))
        splits.append(split)
    step = 0
    while step < steps:
        split = blocked.partition(_info(step, n))
        assert split == splits[step], step
        k = min(block, steps - step)
        t = np.array([_times(costs, split, step + j) for j in range(k)])
        step += blocked.observe_steps(_info(step, n), tuple(split), t, np.asarray(split) > 0)
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
