"""Analytic models: closed forms from the literature, and agreement with 10^5-step simulations."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

from hetsim.analysis.analytic import NoClosedForm, predict
from hetsim.analysis.orderstats import ComputeTime, expected_kth, expected_max, expected_max_exponential
from hetsim.core.errors import ConfigError
from hetsim.model.costs import Affine
from hetsim.model.distributions import Constant, Empirical, Exponential, LogNormal, Uniform
from hetsim.model.partition import water_fill
from hetsim.model.workers import WorkerSpec
from hetsim.policies import Adaptive, Async, Dynamic, Equal, Optimal, Proportional, StepInfo, WorkerHint, make_policy
from hetsim.run.metrics import mean_ci, step_times, summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict


def harmonic(n: int) -> float:
    return math.fsum(1.0 / k for k in range(1, n + 1))


# ----------------------------------------------------------------------------- order statistics


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("mu", [0.5, 4.0])
def test_max_of_iid_exponentials_is_harmonic_over_rate(n, mu):
    expected = harmonic(n) / mu
    assert expected_max([Exponential(1.0 / mu)] * n) == pytest.approx(expected, rel=1e-9)
    assert expected_max_exponential([mu] * n) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_kth_of_iid_exponentials(k):
    n, mu = 5, 2.5
    assert expected_kth([Exponential(1.0 / mu)] * n, k) == pytest.approx((harmonic(n) - harmonic(n - k)) / mu, rel=1e-9)


def test_two_non_identical_exponentials():
    l1, l2 = 3.0, 5.0
    closed = 1 / l1 + 1 / l2 - 1 / (l1 + l2)
    assert expected_max([Exponential(1 / l1), Exponential(1 / l2)]) == pytest.approx(closed, rel=1e-10)
    assert expected_max_exponential([l1, l2]) == pytest.approx(closed, rel=1e-14)
    assert expected_kth([Exponential(1 / l1), Exponential(1 / l2)], 1) == pytest.approx(1 / (l1 + l2), rel=1e-10)


def test_numeric_max_matches_inclusion_exclusion_for_mixed_rates():
    rates = [0.7, 1.3, 2.0, 5.5, 9.0]
    assert expected_max([Exponential(1 / r) for r in rates]) == pytest.approx(expected_max_exponential(rates), rel=1e-9)


def test_discrete_times_are_summed_exactly():
    assert expected_max([Constant(0.3), Constant(0.7), Constant(0.5)]) == pytest.approx(0.7, abs=1e-15)
    assert expected_kth([Constant(0.3), Constant(0.7), Constant(0.5)], 2) == pytest.approx(0.5, abs=1e-15)
    # max of two fair draws from {1, 3}: 3 unless both are 1 -> 3 - 2/4
    assert expected_max([Empirical((1.0, 3.0))] * 2) == pytest.approx(2.5, abs=1e-15)


def test_max_of_uniforms_and_of_a_constant_with_a_uniform():
    assert expected_max([Uniform(0.0, 1.0)] * 3) == pytest.approx(3 / 4, rel=1e-9)
    # max(0.5, U(0,1)) = 0.5 * 0.5 + E[U | U > 0.5] * 0.5 = 0.25 + 0.375
    assert expected_max([Constant(0.5), Uniform(0.0, 1.0)]) == pytest.approx(0.625, rel=1e-9)


def test_kth_argument_checked():
    with pytest.raises(ValueError):
        expected_kth([Exponential(1.0)] * 3, 4)
    with pytest.raises(ValueError):
        expected_max_exponential([1.0, 0.0])


# ----------------------------------------------------------------------------- compute-time distribution


def test_compute_time_with_constant_delay_is_a_shift():
    ct = ComputeTime(0.2, Exponential(1.0), Constant(0.05))
    t = np.array([0.0, 0.05, 0.1, 0.3, 1.0])
    assert np.allclose(ct.cdf(t), np.where(t > 0.05, 1 - np.exp(-(t - 0.05) / 0.2), 0.0))
    assert ct.mean() == pytest.approx(0.25)
    assert ct.var() == pytest.approx(0.04)


def test_the_expected_slowest_of_two_lognormals_needs_no_warning():
    """Two workers of a real profile (sigmas 0.14 and 0.25): the tail past 12 sds is 1e-9 of the
    whole, and quad's relative-accuracy warning on it reached plan's output as a scipy warning."""
    times = [
        ComputeTime(0.00708, LogNormal(0.139788), Constant(0.0)),
        ComputeTime(0.006, LogNormal(0.253703), Constant(0.0)),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slowest = expected_max(times)
    assert max(t.mean() for t in times) < slowest < sum(t.mean() for t in times)


HYPO_SCALE_S, HYPO_MEAN_S = 0.2, 0.05  # scale * Exp(1) + Exp(m): a hypoexponential time


def _hypoexp_cdf(t: np.ndarray) -> np.ndarray:
    """F = 1 - (l2 e^{-l1 t} - l1 e^{-l2 t}) / (l2 - l1), l1 = 1 / scale, l2 = 1 / m."""
    l1, l2 = 1 / HYPO_SCALE_S, 1 / HYPO_MEAN_S
    return 1 - (l2 * np.exp(-l1 * t) - l1 * np.exp(-l2 * t)) / (l2 - l1)


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_compute_time_with_random_delay_is_the_convolution():
    ct = ComputeTime(HYPO_SCALE_S, Exponential(1.0), Exponential(HYPO_MEAN_S))
    t = np.linspace(0.0, 2.0, 41)
    assert np.max(np.abs(ct.cdf(t) - _hypoexp_cdf(t))) < 1e-7
    # E[max] of two such workers: numerically integrated convolution vs the exact hypoexponential
    closed = _hypoexp_max_mean(1 / HYPO_SCALE_S, 1 / HYPO_MEAN_S)
    assert expected_max([ct, ct]) == pytest.approx(closed, rel=1e-5)


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_many_points_of_a_convolution_are_read_off_a_checked_spline():
    """20,001 points at once (backup's inclusion grid): the spline through every sixth, and the
    sum itself where the spline misses it, agree with the exact hypoexponential as the sum does;
    on a grid reaching far beyond the body (a heavy tail's grid: the body in a few cells) the
    intervals the spline misses are summed, so every point is the sum's value."""
    ct = ComputeTime(HYPO_SCALE_S, Exponential(1.0), Exponential(HYPO_MEAN_S))
    t = np.linspace(0.0, 4.0, 20_001)
    assert np.max(np.abs(ct.cdf(t) - _hypoexp_cdf(t))) < 1e-7
    assert not ct._convolved._spline.bad.any()  # smooth: the spline is read everywhere
    heavy = ComputeTime(0.5, LogNormal(0.3), Exponential(2.0))
    far = np.linspace(0.0, 4000.0, 20_001)
    picked = far[::997]
    assert np.max(np.abs(heavy.cdf(far)[::997] - heavy._convolved.summed(picked))) < 1e-7
    assert heavy._convolved._spline.bad.any()


def test_compute_time_with_a_discrete_delay_is_a_mixture():
    ct = ComputeTime(0.1, Exponential(1.0), Empirical((0.0, 0.05)))
    t = np.linspace(0.0, 1.0, 21)
    mixture = 0.5 * (1 - np.exp(-t / 0.1)) + 0.5 * np.where(t > 0.05, 1 - np.exp(-(t - 0.05) / 0.1), 0.0)
    assert np.max(np.abs(ct.cdf(t) - mixture)) < 1e-15
    assert expected_max([ct]) == pytest.approx(ct.mean(), rel=1e-9)


def _hypoexp_max_mean(l1: float, l2: float) -> float:
    """E[max of two iid Exp(l1) + Exp(l2)] from the survival function, by a fine trapezoid."""
    t = np.linspace(0.0, 60.0 / min(l1, l2), 2_000_001)
    f = 1 - (l2 * np.exp(-l1 * t) - l1 * np.exp(-l2 * t)) / (l2 - l1)
    return float(np.trapezoid(1 - f**2, t))


# ----------------------------------------------------------------------------- partitions and predictions


def test_proportional_split_with_exponential_noise_is_tau_star_times_harmonic():
    per_sample = [1e-3, 2e-3, 4e-3]  # speeds 1000, 500, 250 samples/s
    global_batch = 70
    workers = [
        {"name": f"w{i}", "overhead_s": 0.0, "per_sample_s": c, "noise": {"dist": "exponential", "mean": 1.0}}
        for i, c in enumerate(per_sample)
    ]
    scenario = load_scenario(
        scenario_dict(workers, global_batch=global_batch, network={"kind": "constant", "time_s": 0.005})
    )
    tau_star = global_batch / sum(1 / c for c in per_sample)
    p = predict(scenario, Proportional())
    assert p.final_batches == (40, 20, 10)
    assert p.mean_step_s == pytest.approx(tau_star * harmonic(3) + 0.005, rel=1e-9)
    assert p.throughput_sps == pytest.approx(global_batch / p.mean_step_s)


def test_optimal_partition_uses_water_filling_with_caps_and_drops_a_hopeless_worker():
    workers = [
        WorkerSpec("fast", Affine(0.01, 0.001), max_batch=60),
        WorkerSpec("mid", Affine(0.01, 0.002)),
        WorkerSpec("hopeless", Affine(1.0, 0.001)),
        WorkerSpec("noisy", Affine(0.005, 0.003), noise=LogNormal(0.2), delay=Constant(0.01)),
    ]
    hints = [WorkerHint(w.cap, w.cost, w.noise.mean(), w.delay.mean()) for w in workers]
    policy = make_policy("optimal")
    policy.reset(len(workers), 128, hints)
    split = policy.partition(StepInfo(0, 0, 0, 1))
    assert sum(split) == 128 and split[0] <= 60 and split[2] == 0
    fixed = [0.01, 0.01, 1.0, 0.005 + 0.01]  # overhead x E[noise] + E[delay]
    per_sample = [0.001, 0.002, 0.001, 0.003]
    assert split == water_fill(fixed, per_sample, 128, [w.cap for w in workers])


def test_deterministic_prediction_equals_the_simulation():
    workers = [
        {"overhead_s": 0.01, "per_sample_s": 0.001},
        {"overhead_s": 0.002, "per_sample_s": 0.003, "delay": {"dist": "constant", "value": 0.004}},
    ]
    scenario = load_scenario(scenario_dict(workers, global_batch=100, network={"kind": "constant", "time_s": 0.002}))
    for policy in ("equal", "proportional", "optimal", "dynamic"):
        p = predict(scenario, scenario.named_policy(policy))
        s = summarize(simulate(scenario, scenario.named_policy(policy)))
        for name in ("mean_step_s", "p95_step_s", "throughput_sps", "mean_utilization", "idle_fraction"):
            assert getattr(p, name) == pytest.approx(getattr(s, name), rel=1e-9), (policy, name)
        assert p.utilization == pytest.approx(s.utilization, rel=1e-9)
        assert p.final_batches == s.final_batches


def test_dynamic_fixed_point_trajectory_and_convergence():
    scenario = load_scenario("paper")
    p = predict(scenario, Dynamic())
    workers = scenario.workers
    fixed = p.fixed_point_shares
    b = [f * scenario.workload.global_batch for f in fixed]
    times = [w.expected_compute_s(x) for w, x in zip(workers, b)]
    assert times[0] == pytest.approx(times[1], rel=1e-9)  # the DP fixed point balances expected times
    assert sum(fixed) == pytest.approx(1.0, rel=1e-12)
    assert len(p.trajectory) == scenario.workload.epochs
    n = scenario.n_workers
    assert p.trajectory[0] == tuple([scenario.workload.global_batch // n] * n)
    assert p.epochs_to_1pct is not None and 1 <= p.epochs_to_1pct < scenario.workload.epochs
    assert all(abs(a - c) <= 1 for a, c in zip(p.final_batches, p.fixed_point_batches))
    # the run mean includes the first, unbalanced epoch: at least the steady state
    assert p.mean_step_s >= p.steady_step_s - 1e-12


def test_policies_without_a_closed_form_say_why():
    scenario = load_scenario("paper")
    with pytest.raises(NoClosedForm, match="because"):
        predict(scenario, Adaptive())
    with pytest.raises(ConfigError, match=r"^policy: give a Policy object .*'no-such-policy' is not a registered one"):
        predict(scenario, "no-such-policy")  # type: ignore[arg-type]
    slowed = load_scenario("paper", ["workers.0.slowdown={every_s = 60.0, duration_s = 5.0, factor = 2.0}"])
    with pytest.raises(NoClosedForm, match="slowdown"):
        predict(slowed, Equal())


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_first_k_is_the_order_statistic_and_async_the_renewal_rate():
    workers = [{"overhead_s": 0.0, "per_sample_s": 0.01, "noise": {"dist": "exponential", "mean": 1.0}}] * 4
    scenario = load_scenario(scenario_dict(workers, global_batch=40, network={"kind": "constant", "time_s": 0.002}))
    # every worker: 10 samples -> Exp with mean 0.1 s (rate 10); the step waits for the first k
    for name, params, k in (("backup", {"backups": 1}, 3), ("ksync", {"k": 2}, 2)):
        p = predict(scenario, scenario.named_policy(name, params))
        assert p.mean_step_s == pytest.approx((harmonic(4) - harmonic(4 - k)) / 10 + 0.002, rel=1e-9)
        assert p.throughput_sps == pytest.approx(k * 10 / p.mean_step_s, rel=1e-4)  # k gradients of 10 samples
    p = predict(scenario, Async())
    assert p.mean_step_s == pytest.approx(1 / (4 / (0.1 + 0.002)))
    assert p.throughput_sps == pytest.approx(40 / (0.1 + 0.002))


def test_mean_ci():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    ci = mean_ci(x)
    half = 2.7764451051977987 * x.std(ddof=1) / math.sqrt(5)
    assert ci.mean == 3.0 and ci.half_width == pytest.approx(half) and ci.contains(3.5)
    batched = mean_ci(np.arange(100.0), batches=4)
    assert batched.mean == pytest.approx(49.5) and batched.high > batched.low


# ----------------------------------------------------------------------------- against the simulator

NOISES: dict[str, dict[str, Any]] = {
    "exponential": {"dist": "exponential", "mean": 1.0},
    "gamma": {"dist": "gamma", "shape": 2.0, "scale": 0.5},
    "lognormal": {"dist": "lognormal", "sigma": 0.3},
}


def _three_workers(noise: dict[str, Any]) -> dict[str, Any]:
    workers = [
        {"name": "a", "overhead_s": 0.010, "per_sample_s": 0.0010, "noise": noise},
        {
            "name": "b",
            "overhead_s": 0.005,
            "per_sample_s": 0.0020,
            "noise": noise,
            "delay": {"dist": "constant", "value": 0.01},
        },
        {"name": "c", "overhead_s": 0.020, "per_sample_s": 0.0005, "noise": noise},
    ]
    # 1000 steps per epoch x 100 epochs = 10^5 steps
    return scenario_dict(
        workers,
        global_batch=120,
        steps_per_epoch=1000,
        epochs=100,
        seed=11,
        network={"kind": "constant", "time_s": 0.003},
    )


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["equal", "proportional", "optimal"])
@pytest.mark.parametrize("noise", list(NOISES))
def test_prediction_agrees_with_a_1e5_step_simulation(noise, policy):
    scenario = load_scenario(_three_workers(NOISES[noise]))
    assert scenario.workload.total_steps == 100_000
    p = predict(scenario, scenario.named_policy(policy))
    trace = simulate(scenario, scenario.named_policy(policy))
    ci = mean_ci(step_times(trace))
    assert p.mean_step_s == pytest.approx(ci.mean, rel=0.01)
    assert abs(p.mean_step_s - ci.mean) <= 3 * ci.half_width, (p.mean_step_s, ci)
    s = summarize(trace)
    assert p.final_batches == s.final_batches
    assert p.throughput_sps == pytest.approx(s.throughput_sps, rel=0.01)
    assert p.utilization == pytest.approx(s.utilization, rel=0.01)


@pytest.mark.slow
def test_random_delay_prediction_agrees_with_a_1e5_step_simulation():
    """The convolution path: gamma noise and an exponential delay on the same worker."""
    workers = [
        {
            "name": "a",
            "overhead_s": 0.004,
            "per_sample_s": 0.001,
            "noise": NOISES["gamma"],
            "delay": {"dist": "exponential", "mean": 0.01},
        },
        {
            "name": "b",
            "overhead_s": 0.002,
            "per_sample_s": 0.002,
            "noise": NOISES["lognormal"],
            "delay": {"dist": "uniform", "low": 0.0, "high": 0.02},
        },
    ]
    scenario = load_scenario(scenario_dict(workers, global_batch=64, steps_per_epoch=1000, epochs=100, seed=5))
    p = predict(scenario, Optimal())
    ci = mean_ci(step_times(simulate(scenario, Optimal())))
    assert p.mean_step_s == pytest.approx(ci.mean, rel=0.01)
    assert abs(p.mean_step_s - ci.mean) <= 3 * ci.half_width, (p.mean_step_s, ci)


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "params"), [("backup", {}), ("ksync", {"k": 1}), ("async", {})])
def test_straggler_policies_agree_with_a_1e5_step_simulation(policy, params):
    scenario = load_scenario(_three_workers(NOISES["gamma"]))
    p = predict(scenario, scenario.named_policy(policy, params))
    trace = simulate(scenario, scenario.named_policy(policy, params))
    s = summarize(trace)
    assert p.mean_step_s == pytest.approx(s.mean_step_s, rel=0.01)
    assert p.throughput_sps == pytest.approx(s.throughput_sps, rel=0.01)
    assert p.utilization == pytest.approx(s.utilization, rel=0.01)
    if policy != "async":  # barrier steps are independent; async update intervals are not
        ci = mean_ci(step_times(trace))
        assert abs(p.mean_step_s - ci.mean) <= 3 * ci.half_width, (p.mean_step_s, ci)


# ----------------------------------------------------------------------------- backup / K-sync progress
