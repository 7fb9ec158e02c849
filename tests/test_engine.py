"""The SimPy engine and the paper's policies against exact results."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.model.network import Ring
from hetsim.model.partition import balanced_time
from hetsim.policies import Dynamic, DynamicEnhanced, Equal, Optimal
from hetsim.run.metrics import step_times, summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario
from tests.helpers import scenario_dict

POLICY_NAMES = ["equal", "proportional", "dynamic", "dynamic-enhanced", "optimal"]


def test_identical_deterministic_workers_under_equal_give_the_analytic_step_time():
    net = {"kind": "ring", "latency_s": 1e-5, "bandwidth_gbps": 50}
    s = build_scenario(
        scenario_dict([{"count": 4, "overhead_s": 0.02, "per_sample_s": 0.001}], network=net, gradient_mb=40.0)
    )
    expected = 0.02 + 0.001 * 64 + Ring(1e-5, 50).allreduce_s(4, 40.0)
    trace = simulate(s, Equal())
    summary = summarize(trace)
    assert np.all(step_times(trace) == pytest.approx(expected, rel=1e-12))
    assert summary.total_time_s == pytest.approx(expected * s.workload.total_steps, rel=1e-12)
    assert summary.throughput_sps == pytest.approx(256 / expected, rel=1e-12)
    assert summary.utilization == pytest.approx([(0.02 + 0.064) / expected] * 4)
    assert summary.idle_fraction == 0.0
    assert summary.final_batches == (64, 64, 64, 64)


AFFINE = [
    {"name": "fast", "overhead_s": 0.01, "per_sample_s": 0.001},
    {"name": "mid", "overhead_s": 0.02, "per_sample_s": 0.002},
    {"name": "slow", "overhead_s": 0.005, "per_sample_s": 0.004, "delay": {"dist": "constant", "value": 0.03}},
]


def _continuous_equal_time_split(workers, total):
    a = [w["overhead_s"] + w.get("delay", {}).get("value", 0.0) for w in workers]
    c = [w["per_sample_s"] for w in workers]
    t = balanced_time(a, c, total, [math.inf] * len(a))
    return [(t - x) / y for x, y in zip(a, c)], t


def test_dynamic_converges_to_its_fixed_point_the_equal_time_split():
    s = build_scenario(scenario_dict(AFFINE, global_batch=512, steps_per_epoch=5, epochs=30))
    trace = simulate(s, Dynamic())
    target, t_star = _continuous_equal_time_split(AFFINE, 512)
    last = trace.per_step("local_batch")[-1]
    assert np.all(np.abs(last - np.asarray(target)) <= 1.0)
    compute = trace.per_step("compute_s")[-1]
    assert np.all(np.abs(compute - t_star) <= max(w["per_sample_s"] for w in AFFINE) + 1e-12)
    # Every epoch's split is constant within the epoch and changes only at epoch boundaries.
    batches = trace.per_step("local_batch").reshape(30, 5, 3)
    assert np.all(batches == batches[:, :1, :])


def test_dynamic_enhanced_has_the_timing_of_dynamic():
    s = build_scenario(scenario_dict(AFFINE, steps_per_epoch=4, epochs=5))
    a, b = simulate(s, Dynamic()), simulate(s, DynamicEnhanced())
    assert np.array_equal(a.compute_s, b.compute_s) and np.array_equal(a.local_batch, b.local_batch)
    assert b.policy == "dynamic-enhanced"


def test_optimal_matches_the_closed_form_water_filling_split():
    s = build_scenario(scenario_dict(AFFINE, global_batch=512, steps_per_epoch=2, epochs=1))
    target, t_star = _continuous_equal_time_split(AFFINE, 512)
    batches = simulate(s, Optimal()).per_step("local_batch")[0]
    assert sum(batches) == 512
    assert np.all(np.abs(batches - np.asarray(target)) <= 1.0)
    # No integer split has a smaller max; the continuous optimum is a lower bound.
    assert summarize(simulate(s, Optimal())).mean_step_s >= t_star


def test_optimal_respects_caps_and_drops_a_worker_too_slow_to_help():
    workers = [
        {"overhead_s": 0.0, "per_sample_s": 0.001, "max_batch": 100},
        {"overhead_s": 0.0, "per_sample_s": 0.002},
        {"overhead_s": 5.0, "per_sample_s": 0.001},
    ]
    s = build_scenario(scenario_dict(workers, global_batch=256, steps_per_epoch=1, epochs=1))
    trace = simulate(s, Optimal())
    assert tuple(trace.per_step("local_batch")[0]) == (100, 156, 0)
    assert not trace.per_step("included")[0][2] and trace.per_step("compute_s")[0][2] == 0.0


def test_the_same_seed_gives_the_identical_trace():
    s = load_scenario("workstation")
    a, b = simulate(s, Dynamic()), simulate(s, Dynamic())
    assert a.to_frame().equals(b.to_frame())
    c = simulate(s, Dynamic(), seed=1)
    assert not np.array_equal(a.compute_s, c.compute_s)


def test_paper_scenario_dynamic_balances_the_two_workers_within_five_epochs():
    s = load_scenario("paper")
    trace = simulate(s, Dynamic())
    epoch = trace.per_step("epoch")[:, 0]
    compute = trace.per_step("compute_s")
    means = compute[epoch == 4].mean(axis=0)
    assert abs(means[0] - means[1]) / means.mean() < 0.02
    first = compute[epoch == 0].mean(axis=0)
    assert abs(first[0] - first[1]) / first.mean() > 0.15  # it started 18% apart


def test_trace_accounting_is_consistent():
    s = load_scenario("workstation", ["workload.epochs=2"])
    for name in POLICY_NAMES:
        trace = simulate(s, s.named_policy(name))
        compute, wait = trace.per_step("compute_s"), trace.per_step("wait_s")
        barrier = compute + wait
        assert np.allclose(barrier, barrier[:, :1])  # everyone leaves the barrier together
        assert np.all(wait >= 0) and np.all(wait.min(axis=1) == 0)  # the slowest waits for nobody
        start = trace.per_step("start_s")[:, 0]
        assert np.allclose(np.diff(start), step_times(trace)[:-1])
        summary = summarize(trace)
        assert summary.total_time_s == pytest.approx(start[-1] + step_times(trace)[-1])
        comm_share = trace.per_step("comm_s")[:, 0].sum() / summary.total_time_s
        assert summary.mean_utilization + summary.idle_fraction + comm_share == pytest.approx(1.0)


@st.composite
def random_scenarios(draw):
    n_groups = draw(st.integers(1, 3))
    workers = []
    for _ in range(n_groups):
        w = {
            "count": draw(st.integers(1, 3)),
            "overhead_s": draw(st.floats(0.0, 0.05)),
            "per_sample_s": draw(st.floats(1e-4, 1e-2)),
            "noise": draw(
                st.sampled_from(
                    [
                        {"dist": "constant", "value": 1.0},
                        {"dist": "lognormal", "sigma": 0.3},
                        {"dist": "exponential", "mean": 1.0},
                        {"dist": "gamma", "shape": 4.0, "scale": 0.25},
                    ]
                )
            ),
            "delay": draw(
                st.sampled_from([{"dist": "constant", "value": 0.0}, {"dist": "uniform", "low": 0.0, "high": 0.05}])
            ),
        }
        if draw(st.booleans()):
            w["max_batch"] = draw(st.integers(1, 200))
        workers.append(w)
    n = sum(w["count"] for w in workers)
    cap = sum(w.get("max_batch", 10**9) * w["count"] for w in workers)
    global_batch = draw(st.integers(n, min(cap, 600)))
    return build_scenario(scenario_dict(workers, global_batch=global_batch, steps_per_epoch=3, epochs=3))


@settings(max_examples=60)
@given(random_scenarios(), st.sampled_from(POLICY_NAMES))
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_every_split_is_non_negative_within_caps_and_sums_to_the_global_batch(scenario, policy):
    batches = simulate(scenario, scenario.named_policy(policy)).per_step("local_batch")
    caps = np.array([w.cap for w in scenario.workers])
    assert np.all(batches.sum(axis=1) == scenario.workload.global_batch)
    assert np.all(batches >= 0) and np.all(batches <= caps)


def test_epochs_of_a_policy_that_varies_its_batch_follow_the_batch_in_force_when_each_begins():
    from hetsim.engines.base import Epochs
    from hetsim.policies import Goodput

    policy = Goodput()
    policy.global_batch = 25
    epochs = Epochs(100, policy)  # 4 steps of 25
    assert epochs.info(3)[:4] == (3, 0, 3, 4)
    policy.global_batch = 50  # the next epochs: 2 steps of 50
    assert epochs.info(9)[:4] == (9, 3, 1, 2)  # asked three epochs ahead: steps 4-5, 6-7, 8-9
