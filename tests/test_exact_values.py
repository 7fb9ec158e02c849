"""Exact values, derived by hand, for metrics and predictions whose existing tests only bound them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from hetsim.analysis.analytic import predict
from hetsim.engines import SimPyEngine, VectorEngine
from hetsim.model.costs import Affine
from hetsim.plan.rows import Estimate, extrapolated
from hetsim.policies import Async, Dynamic, Equal, KSync, WorkerHint, make_policy
from hetsim.policies.base import StepInfo
from hetsim.run.metrics import summarize
from hetsim.run.recovery import Recovered, Run, recovery
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario
from tests.helpers import scenario_dict

COMM_S = 0.002


def _exponential_four(k: int | None = None) -> tuple:
    """4 identical workers, 10 samples each at 10 ms/sample with Exp(mean 1) noise: each time
    is Exp(rate 10); a constant 2 ms all-reduce. Returns (scenario, ksync params)."""
    workers = [{"overhead_s": 0.0, "per_sample_s": 0.01, "noise": {"dist": "exponential", "mean": 1.0}}] * 4
    raw = scenario_dict(workers, global_batch=40, network={"kind": "constant", "time_s": COMM_S})
    return load_scenario(raw), ({} if k is None else {"k": k})


def test_recovery_steps_counts_from_onset_to_the_first_run_within_5_percent():
    """Onset at step 10 (worker 0 slowed 2x; best split 33/67 takes 67 ms); 36/64 takes 72 ms,
    1.075x the best, so not recovered; 33/67 at step 13 recovers: 13 - 10 = 3 steps. Pins the
    count (not end - first + 1) and the 5% threshold (10% would close at step 12: 2)."""
    hints = [WorkerHint(cost=Affine(0.0, 0.001)), WorkerHint(cost=Affine(0.0, 0.001))]
    up = np.array([True, True])

    def run(first: int, factors: tuple[float, float], batches: tuple[int, int]) -> Run:
        return Run(first, np.array(factors), up, np.array(batches))

    runs = [
        run(0, (1.0, 1.0), (50, 50)),
        run(10, (2.0, 1.0), (50, 50)),  # the onset: max(2 ms * 50, 1 ms * 50) = 100 ms
        run(12, (2.0, 1.0), (36, 64)),  # 72 ms > 1.05 * 67 = 70.35 ms
        run(13, (2.0, 1.0), (33, 67)),  # 67 ms: the optimum (34/66 would take 68 ms)
    ]
    best = min(max(2 * b, 100 - b) for b in range(101))  # ms, by enumeration
    assert best == 67 and 72 > 1.05 * best and 72 <= 1.10 * best
    assert recovery(runs, hints) == Recovered(3.0, 1.0)
    # not recovered before the run ends, nor before the episode ends: no steps (not the steps it
    # lasted, which read a static split as recovering in an episode's length), share 0
    assert recovery(runs[:3], hints) == Recovered(None, 0.0)
    assert recovery([*runs[:3], run(15, (1.0, 1.0), (36, 64))], hints) == Recovered(None, 0.0)
    again = [*runs, run(20, (1.0, 1.0), (33, 67)), run(30, (2.0, 1.0), (36, 64))]  # a second onset, open at the end
    assert recovery(again, hints) == Recovered(3.0, 0.5)
    assert recovery(runs[:1], hints) == Recovered(None, None)  # no onset


def test_split_changes_is_samples_moved_over_the_step_transitions():
    """DP-SGD on 1 ms and 3 ms per sample, B = 400, 2 steps x 2 epochs: 200/200 twice, then shares
    (0.5/0.2) : (0.5/0.6) = 3 : 1, i.e. 300/100 twice. One move of 100 samples over 3 transitions:
    100/3 (a division by the 4 steps gives 25)."""
    workers = [{"name": "a", "per_sample_s": 0.001}, {"name": "b", "per_sample_s": 0.003}]
    s = build_scenario(scenario_dict(workers, global_batch=400, steps_per_epoch=2, epochs=2))
    trace = simulate(s, Dynamic())
    assert [tuple(b) for b in trace.per_step("local_batch")] == [(200, 200)] * 2 + [(300, 100)] * 2
    moved = (abs(300 - 200) + abs(100 - 200)) / 2
    assert summarize(trace).split_changes == pytest.approx(moved / 3, rel=1e-12)


def test_first_k_idle_utilization_and_p95_for_ksync_on_exponentials():
    """k = 2 of 4 Exp(10) workers: worker-time busy per step is X(1) + 3 X(2) (the first runs to
    its end, the others to the barrier X(2)), so idle = (4 E2 - E1 - 3 E2) / (4 (E2 + comm)) and
    utilization = (E1 + 3 E2) / 4 / (E2 + comm); p95 is the 0.95 quantile of X(2) plus comm.
    Pins n * barrier (not n * mean step) in the idle time and the 0.95 (not 0.9) quantile."""
    scenario, params = _exponential_four(k=2)
    p = predict(scenario, KSync(**params))
    e1 = 1 / 40  # E[min of 4 Exp(10)]
    e2 = 1 / 40 + 1 / 30  # E[2nd of 4]
    step = e2 + COMM_S
    assert p.mean_step_s == pytest.approx(step, rel=1e-9)
    assert p.idle_fraction == pytest.approx((e2 - e1) / (4 * step), rel=1e-9)
    assert p.idle_fraction == pytest.approx(0.138122, abs=1e-6)
    for u in p.utilization:
        assert u == pytest.approx((e1 + 3 * e2) / 4 / step, rel=1e-9)
    assert p.utilization[0] == pytest.approx(0.828729, abs=1e-6)

    def second_done_by(t: float) -> float:  # P(at least 2 of 4 finished by t), q = P(one still running)
        q = math.exp(-10 * t)
        return 1 - q**4 - 4 * (1 - q) * q**3

    t95 = brentq(lambda t: second_done_by(t) - 0.95, 0.0, 10.0, xtol=1e-15)
    assert p.p95_step_s == pytest.approx(t95 + COMM_S, rel=1e-9)


def _largest_remainder(shares: list[float], total: int) -> list[int]:
    """Floors of shares * total, the rest one each to the largest fractional parts (ties: lower index)."""
    x = [p * total for p in shares]
    base = [math.floor(v + 1e-9) for v in x]
    order = sorted(range(len(x)), key=lambda i: (-(x[i] - base[i]), i))
    for i in order[: total - sum(base)]:
        base[i] += 1
    return base


def test_epochs_to_1pct_is_the_first_epoch_from_which_dp_sgd_stays_within_1pct():
    """On ``paper`` (t_i = 0.02 + 0.00383 b_i, plus 0.1 s for worker 1; noise mean 1), iterate
    p_i <- (p_i / t_i) / sum_j (p_j / t_j) by hand from 1/2, 1/2 at the integer split of each epoch's
    shares; the answer is the first epoch whose shares and all later ones are within 0.01 of
    the balanced split. Pins the epoch index (epoch + 1 passed the bound-only test)."""
    s = load_scenario("paper")
    B, epochs = 256, s.workload.epochs
    # fixed point: 0.02 + 0.00383 b0 = 0.02 + 0.00383 (B - b0) + 0.1
    b0 = (B + 0.1 / 0.00383) / 2
    fixed = [b0 / B, (B - b0) / B]
    shares, history = [0.5, 0.5], []
    for _ in range(epochs):
        history.append(shares)
        batches = _largest_remainder(shares, B)
        times = [0.02 + 0.00383 * batches[0], 0.02 + 0.00383 * batches[1] + 0.1]
        speed = [p / t for p, t in zip(shares, times)]
        shares = [v / sum(speed) for v in speed]
    close = [all(abs(p - f) <= 0.01 for p, f in zip(ps, fixed)) for ps in history]
    expected = next(e for e in range(epochs) if all(close[e:]))
    assert expected == 1  # epoch 0 is the equal split, 0.05 away; one update lands within 1%
    p = predict(s, Dynamic())
    assert p.fixed_point_shares == pytest.approx(fixed, abs=1e-12)
    assert p.epochs_to_1pct == expected


def _async_updates(count: int) -> tuple[list[int], list[int]]:
    """The first ``count`` updates of two async workers with periods 121 and 271 (ms: 100 or 250
    ms of compute plus a 21 ms exchange), in order: (worker, k-th push) each; integer times, no ties."""
    periods = (121, 271)
    events = sorted((k * periods[w], w, k) for w in (0, 1) for k in range(1, count + 1))[:count]
    return [w for _, w, _ in events], [k for _, _, k in events]


def test_async_staleness_mean_and_p95_match_a_hand_count():
    """Two deterministic async workers (test_straggler's setting): update k of worker w read the
    model at its (k-1)-th push and sees as stale every push of the other worker strictly between.
    Pins staleness_p95 (asserted nowhere) as numpy's default linear 95th percentile."""
    workers = [{"name": "a", "per_sample_s": 0.001}, {"name": "b", "per_sample_s": 0.0025}]
    network = {"kind": "constant", "time_s": 0.021}
    raw = scenario_dict(workers, global_batch=200, steps_per_epoch=10, epochs=3, network=network)
    summary = summarize(simulate(build_scenario(raw), Async()))
    who, nth = _async_updates(60)
    periods = (121, 271)
    hand = []
    for w, k in zip(who, nth):
        p, other = periods[w], periods[1 - w]
        # other's pushes j with (k-1) p < j other < k p (integers: no ties, as 121 and 271 are coprime)
        hand.append((k * p - 1) // other - ((k - 1) * p) // other)
    assert summary.steps == 60
    assert summary.staleness_mean == pytest.approx(sum(hand) / 60, rel=1e-12)
    ordered = sorted(hand)
    pos = 0.95 * (60 - 1)  # linear interpolation between order statistics 56 and 57 (0-based)
    lo = math.floor(pos)
    p95 = ordered[lo] + (pos - lo) * (ordered[lo + 1] - ordered[lo])
    assert p95 == pytest.approx(float(np.percentile(hand, 95)), rel=1e-12)
    assert summary.staleness_p95 == pytest.approx(p95, rel=1e-12)


def test_proportional_split_measures_speed_at_the_equal_share():
    """Workers 0.05 s + 1 ms/sample and 2 ms/sample, B = 200: at B/n = 100 samples they take 0.15 s
    and 0.2 s, speeds 100/0.15 : 100/0.2 = 4 : 3, so 200 * 4/7 = 114.29 and 85.71, rounded by largest
    remainder to (114, 86). Measuring at one sample (0.051 s vs 0.002 s) would give about (8, 192)."""
    hints = [WorkerHint(cost=Affine(0.05, 0.001)), WorkerHint(cost=Affine(0.0, 0.002))]
    policy = make_policy("proportional")
    policy.reset(2, 200, hints)
    assert tuple(policy.initial_split()) == (114, 86)
    assert _largest_remainder([4 / 7, 3 / 7], 200) == [114, 86]


def test_ksync_waits_for_n_minus_1_by_default():
    """ksync without k waits for n - 1 gradients: on 4 Exp(10) workers the step is the 3rd order
    statistic, 1/40 + 1/30 + 1/20, plus the 2 ms all-reduce (a default of n or n - 2 would differ)."""
    policy = make_policy("ksync")
    policy.reset(4, 40)
    assert policy.wait_for() == 3
    scenario, params = _exponential_four()
    p = predict(scenario, KSync(**params))
    assert p.mean_step_s == pytest.approx(1 / 40 + 1 / 30 + 1 / 20 + COMM_S, rel=1e-9)


def test_extrapolated_time_to_target_is_ceil_of_target_over_rate_times_step():
    """target_steps 30, 20 steps in the job: progress 75 over 50 steps is 1.5 a step, so 20 steps
    (exactly the budget) times the step's estimate; 70 over 50 (1.4 a step) needs ceil(21.4) = 22
    steps, beyond the budget: None. Pins the step count (one step more, or a floor, would differ)."""
    workers = [{"name": "a", "per_sample_s": 0.001}]
    raw = scenario_dict(workers, global_batch=10, steps_per_epoch=10, epochs=2)
    raw["workload"]["efficiency"] = {"noise_scale": 100.0, "base_batch": 10, "target_steps": 30}
    s = build_scenario(raw)
    assert s.workload.total_steps == 20
    got = extrapolated(s, 75.0, 50, Estimate(0.025, 0.02, 0.03))
    assert got is not None
    assert (got.value, got.low, got.high) == pytest.approx((20 * 0.025, 20 * 0.02, 20 * 0.03), rel=1e-15)
    assert (got.value, got.low, got.high) == pytest.approx((0.5, 0.4, 0.6), rel=1e-15)
    assert extrapolated(s, 70.0, 50, Estimate(0.025, 0.02, 0.03)) is None
    # with a 30-step budget the same 22 steps fit
    raw["workload"]["epochs"] = 3
    got = extrapolated(build_scenario(raw), 70.0, 50, Estimate(0.025, 0.02, 0.03))
    assert got is not None and got.value == pytest.approx(22 * 0.025, rel=1e-15)


def test_extrapolated_steps_are_not_one_more_for_a_rounding_error():
    """target 1 at 1 per 49 steps is 49 steps; target / (progress / steps) read 49.000000000000007
    and the ceiling made it 50 (off by one in 563 small whole-number cases)."""
    workers = [{"name": "a", "per_sample_s": 0.001}]
    raw = scenario_dict(workers, global_batch=10, steps_per_epoch=49, epochs=1)
    raw["workload"]["efficiency"] = {"noise_scale": 100.0, "base_batch": 10, "target_steps": 1}
    got = extrapolated(build_scenario(raw), 1.0, 49, Estimate(1.0, 1.0, 1.0))
    assert got is not None and got.value == 49.0  # and within the 49-step budget
    for target, progress, steps in [(3, 7, 11), (5, 3, 9), (30, 75, 50), (1, 10, 100)]:
        raw["workload"]["efficiency"]["target_steps"] = target
        raw["workload"]["epochs"] = 100  # a budget none of them reaches
        got = extrapolated(build_scenario(raw), float(progress), steps, Estimate(1.0, 1.0, 1.0))
        assert got is not None and got.value == math.ceil(target * steps / progress)  # exact in integers


@pytest.mark.parametrize("name", ["optimal", "dynamic"])  # its own rule, and the base class's
def test_the_workers_up_take_the_batch_when_their_caps_hold_it_exactly(name):
    """Worker 2 down, workers 0 and 1 capped at 50 each, B = 100: their caps hold the batch exactly,
    so they take 50 each and the worker down none (a `<=` where `<` is meant would keep the split
    that gives worker 2 samples and wait for it)."""
    hints = [WorkerHint(max_batch=50, cost=Affine(0.0, 0.001)), WorkerHint(max_batch=50, cost=Affine(0.0, 0.002)),
             WorkerHint(max_batch=100, cost=Affine(0.0, 0.001))]  # fmt: skip
    policy = make_policy(name)
    policy.reset(3, 100, hints)
    assert policy.partition(StepInfo(0, 0, 0, 1))[2] > 0  # all up: worker 2 has samples
    assert tuple(policy.partition(StepInfo(1, 0, 1, 2, (True, True, False)))) == (50, 50, 0)


@pytest.mark.parametrize(
    ("costs", "samples"),
    [
        ((0.394, 0.522), [0.5, 0.5, 0.5, 0.5, 3.0]),  # 0.394 * 3 / 0.394 is an ulp below 3
        ((0.1, 0.3), [0.25, 1.75]),
        ((0.7, 0.11), [0.9, 0.9, 1.2]),
    ],
)
def test_the_expected_slowest_of_discrete_noise_is_the_sum_over_its_outcomes(costs, samples):
    """A step CDF read at its atoms missed the jump where scale x atom / scale fell an ulp below
    the atom, so analyze put the slowest of two-point noise 11% (and up to 27%) too high."""
    workers = [
        {
            "cost": {"model": "affine", "overhead_s": c - 0.001, "per_sample_s": 0.001},
            "noise": {"dist": "empirical", "samples": samples},
        }
        for c in costs
    ]  # fmt: skip (one sample each)
    values, counts = np.unique(samples, return_counts=True)
    mass = counts / counts.sum()
    exact = sum(p * q * max(costs[0] * x, costs[1] * y) for x, p in zip(values, mass) for y, q in zip(values, mass))
    prediction = predict(load_scenario(scenario_dict(workers, global_batch=2)), Equal())
    assert prediction.mean_step_s == pytest.approx(exact, rel=1e-12)


def test_dynamic_under_caps_rescales_the_split_that_ran_and_balances_in_one_epoch():
    """Two fast workers (5 ms + 1 ms a sample, cap 200) and two slow ones (5 ms + 4 ms, cap 50),
    400 samples: the equal split capped is 150/150/50/50 (155 and 205 ms). The rule rescaled the
    nominal shares (0.25 each), credited the slow workers with samples they never ran, kept their
    share above the cap and stayed at 150/150/50/50 for epochs; by the shares that ran (0.375 and
    0.125: speeds 2.42 and 0.61) it moves to 160/160/40/40, equal times of 165 ms, after one epoch."""
    fast = {"name": "fast", "count": 2, "overhead_s": 0.005, "per_sample_s": 0.001, "max_batch": 200}
    slow = {"name": "slow", "count": 2, "overhead_s": 0.005, "per_sample_s": 0.004, "max_batch": 50}
    scenario = load_scenario(scenario_dict([fast, slow], global_batch=400, steps_per_epoch=10, epochs=3))
    trace = simulate(scenario, Dynamic(), engine=SimPyEngine())
    splits = [tuple(trace.per_step("local_batch")[e * 10]) for e in range(3)]
    assert splits == [(150, 150, 50, 50), (160, 160, 40, 40), (160, 160, 40, 40)]
    assert simulate(scenario, Dynamic(), engine=VectorEngine()) == trace
    assert predict(scenario, Dynamic()).mean_step_s == pytest.approx((0.205 + 2 * 0.165) / 3, rel=1e-12)
