"""The confidence interval of a run's expected mean step time (hetsim.analysis.step_ci), against theory."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hetsim.analysis.step_ci import (
    BATCH_MEANS,
    RENEWAL,
    REPLICATED,
    REPLICATIONS,
    ar1_sums,
    batch_count,
    batch_means,
    method,
    replication_seeds,
    simulated_mean,
)
from hetsim.engines import VectorEngine
from hetsim.policies import Adaptive, Async, Backup, Dynamic, Equal, Optimal
from hetsim.run.metrics import mean_ci
from hetsim.run.simulate import simulate_summary
from hetsim.scenario.config import load_scenario


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.93])
def test_ar1_sums_are_the_correlations_summed_over_each_pair_of_intervals(rho):
    sizes = np.array([3, 1, 4, 2])
    starts = np.r_[0, np.cumsum(sizes)[:-1]].astype(float)
    t = np.arange(sizes.sum())
    corr = rho ** np.abs(t[:, None] - t[None, :])
    which = np.repeat(np.arange(sizes.size), sizes)
    brute = np.array([[corr[np.ix_(which == j, which == k)].sum() for k in range(4)] for j in range(4)])
    np.testing.assert_allclose(ar1_sums(starts, sizes, rho), brute, rtol=1e-12)


def test_batches_span_one_autocorrelation_time_between_four_and_thirty():
    assert batch_count(1950, 0.0) == 30 and batch_count(12, 0.0) == 12
    assert batch_count(1950, 0.9) == 30  # (1 + 0.9) / (1 - 0.9) = 19 steps: 102 batches, at most 30
    assert batch_count(195, 0.9) == 10 and batch_count(40, 0.9) == 4


@pytest.mark.slow
@pytest.mark.parametrize(("rho", "n"), [(0.0, 50), (0.9, 195), (0.9, 60)])
def test_batch_means_are_unbiased_with_satterthwaite_dof_on_a_gaussian_ar1_series(rho, n):
    """For X_t = rho X_{t-1} + sqrt(1 - rho^2) e_t, var(mean) = sum_{s,t} rho^|s-t| / n^2. The
    estimate is the batch means' sum of squares over its expectation, so unbiased; Q is a
    Gaussian quadratic form, so var(estimate) / E^2 = 2 / dof; and the t interval covers 95%."""
    rng = np.random.default_rng(7)
    runs = 2000
    x = np.empty((runs, n))
    x[:, 0] = rng.standard_normal(runs)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(runs)
    truth = ar1_sums(np.zeros(1), np.array([n]), rho)[0, 0] / n**2
    estimates = np.array([batch_means(row, rho) for row in x])
    variance, dof = estimates[:, 0], estimates[0, 1]
    assert variance.mean() == pytest.approx(truth, rel=0.05)
    assert variance.var() / variance.mean() ** 2 == pytest.approx(2 / dof, rel=0.15)
    inside = np.abs(x.mean(axis=1)) <= stats.t.ppf(0.975, dof) * np.sqrt(variance)
    assert 0.935 <= inside.mean() <= 0.97


def test_each_run_gets_the_estimator_its_steps_allow():
    paper = load_scenario("paper")
    assert method(paper, Equal()) == method(paper, Backup()) == BATCH_MEANS  # stationary barrier steps
    assert method(load_scenario("paper", ["workers.0.noise.persistence=0.9"]), Optimal()) == BATCH_MEANS
    assert method(paper, Async()) == RENEWAL
    assert method(paper, Dynamic()) == method(paper, Adaptive()) == REPLICATED  # the split follows the noise
    assert method(load_scenario("shared-cluster"), Equal()) == REPLICATED  # episodes and failures


def test_replications_are_the_t_interval_of_runs_seeded_from_the_seed():
    scenario = load_scenario("paper", ["workload.epochs=2"])
    seeds = replication_seeds(3)
    assert seeds[0] == 3 and len(set(seeds)) == REPLICATIONS and seeds == replication_seeds(3)
    result = simulated_mean(scenario, Dynamic(), 3)
    means = [simulate_summary(scenario, Dynamic(), seed=s, engine=VectorEngine()).mean_step_s for s in seeds]
    assert result.runs == REPLICATIONS and result.ci == mean_ci(means)
    assert simulated_mean(scenario, Equal(), 3).ci == simulated_mean(scenario, Equal(), 3).ci


def test_a_noise_free_runs_interval_holds_a_prediction_that_differs_in_the_last_place():
    """analyze said "inside: no" where a noise-free run's zero-width interval and the closed form
    summed the same times in another order (0.6920199999999993 against 0.69202)."""
    from hetsim.run.metrics import MeanCI

    ci = MeanCI(0.6920199999999993, 0.6920199999999993, 0.6920199999999993, 0.95)
    assert ci.contains(0.69202) and ci.contains(0.6920199999999993)
    assert not ci.contains(0.692021) and not MeanCI(1.0, 0.9, 1.1, 0.95).contains(1.1000001)
