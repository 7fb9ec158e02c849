"""adaptive's bookkeeping: its block and per-step paths agree, and its results stay bit for bit
the ones recorded from hetsim 0.3 (a faster path must be an exact rewrite; the steps taken across
steps at once are checked against single steps in test_adaptive_steady.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.policies import StepInfo, StepRecord, WorkerHint, make_policy

PER_EPOCH = 20


def _times(rng, split, step, n):
    """Affine workers (a quarter twice as slow) with noise and delays (uniform draws: no libm in
    them, so the same numbers everywhere), a 3x slowdown of worker 0 from step 40 to 55 (the
    change detector restarts its fit) and a few excluded measurements."""
    a = 0.005 + 0.002 * np.arange(n) * (1 + (np.arange(n) < n // 4))
    c = 0.0002 * (1 + (np.arange(n) < n // 4))
    b = np.asarray(split, dtype=float)
    slow = np.where((np.arange(n) == 0) & (40 <= step < 55), 3.0, 1.0)
    noise, delay = 0.92 + 0.16 * rng.random(n), rng.random(n)
    t = np.where(b > 0, (a + c * b) * noise * slow + 0.004 * delay * delay * delay, 0.0)
    included = (b > 0) & (rng.random(n) > (0.1 if step % 7 == 0 else 0.0))
    return t, included


def _info(step, n):
    """Worker 1 is down from step 70 to 79 (its work moves to the others)."""
    available = tuple(i != 1 for i in range(n)) if 70 <= step < 80 else None
    return StepInfo(step, step // PER_EPOCH, step % PER_EPOCH, PER_EPOCH, available)


def _run(n, steps, blocks, caps=None, resplit="step"):
    """The splits a fresh adaptive policy takes, fed one step at a time (``blocks`` False) or as
    the blocks its steady_steps asks for (cut where availability changes), and the policy."""
    policy = make_policy("adaptive", {"resplit": resplit})
    policy.reset(n, 32 * n, None if caps is None else [WorkerHint(max_batch=cap) for cap in caps])
    rng = np.random.default_rng(7)
    splits, step = [], 0
    while step < steps:
        info = _info(step, n)
        split = policy.partition(info)
        if not blocks:
            t, included = _times(rng, split, step, n)
            policy.observe(StepRecord(info, split, tuple(t.tolist()), tuple(included.tolist())))
            taken = 1
        else:
            edge = next((e for e in (70, 80, steps) if e > step), steps)
            k = max(1, min(policy.steady_steps(info), edge - step))
            rows = [_times(rng, split, step + j, n) for j in range(k)]
            t, included = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
            taken = policy.observe_steps(info, tuple(split), t, included)
        splits.append(tuple(policy._batches))
        step += taken
    return splits, policy


def _state(policy):
    return [policy._stats, policy._slope, policy.fixed_s, policy.per_sample_s, policy._resid_var, policy._surprises]


@pytest.mark.parametrize(
    "caps", [None, [40.0 if i % 3 == 0 else np.inf for i in range(12)], [36.0 + i for i in range(12)]]
)
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_blocks_and_single_steps_give_the_same_splits_and_fits(caps):
    """observe_steps does what one observe per step does, on the same measurements (fed one
    block per step here, so both see the same draws), including its caches of the batches."""
    single, one = _run(12, 120, blocks=False, caps=caps)
    policy = make_policy("adaptive")
    policy.reset(12, 32 * 12, None if caps is None else [WorkerHint(max_batch=cap) for cap in caps])
    rng = np.random.default_rng(7)
    for step in range(120):
        info = _info(step, 12)
        split = policy.partition(info)
        t, included = _times(rng, split, step, 12)
        policy.observe_steps(info, tuple(split), t[None, :], included[None, :])  # (a new tuple each time)
        assert tuple(policy._batches) == single[step]
    for x, y in zip(_state(one), _state(policy)):
        np.testing.assert_array_equal(x, y)


# Recorded from hetsim 0.3 (the noise margin, the band that widens with the cluster), so that a
# faster path must give the same bits (n, blocks, caps, resplit): the number of distinct splits
# it went through, its last split, and repr of sums of its fitted costs. (With blocks, the times
# measured depend on the block lengths the policy asks for: _run draws a block's times at once.)
GOLDEN = {
    (6, False, None, "step"): (20, (31, 48, 44, 34, 23, 12), "0.04934690128782225", "0.001938125324159507"),
    (6, True, None, "step"): (13, (32, 54, 43, 31, 21, 11), "0.06743447983420803", "0.0014521749373652855"),
    (12, False, "some", "step"): (
        13,
        (40, 41, 32, 40, 63, 53, 40, 33, 26, 11, 5, 0),
        "0.18768724241359178",
        "0.00381587581978686",
    ),
    (12, True, "all", "epoch"): (
        2,
        (30, 31, 32, 33, 34, 35, 36, 37, 35, 30, 27, 24),
        "0.09556372195263317",
        "0.0061499409704309",
    ),
}
CAPS = {None: None, "some": [40.0 if i % 3 == 0 else np.inf for i in range(12)], "all": [30.0 + i for i in range(12)]}


@pytest.mark.parametrize("case", list(GOLDEN), ids=str)
def test_the_splits_and_fits_are_bit_for_bit_the_recorded_ones(case):
    n, blocks, caps, resplit = case
    splits, policy = _run(n, 120, blocks, CAPS[caps], resplit)
    got = (len(set(splits)), splits[-1], repr(float(policy.fixed_s.sum())), repr(float(policy.per_sample_s.sum())))
    assert got == GOLDEN[case]
