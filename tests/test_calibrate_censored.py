"""Calibration on the traces real runs give: steps cut at the barrier, idle workers, short runs,
and standard errors that match theory (issue 23's reproducers; the spread over seeds is
measured by ``benchmarks/calibration_coverage.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hetsim.calibrate import calibrate, fit_worker
from hetsim.calibrate.censored import fit_mle
from hetsim.calibrate.curves import HingeCurve
from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.model.costs import Affine, Hinge
from hetsim.model.network import ConstantNetwork
from hetsim.policies import Optimal
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict

LOGNORMAL = {"dist": "lognormal", "sigma": 0.2}
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("policy", ["ksync", "backup"])
def test_independent_workers_cut_at_the_barrier_share_no_noise(policy):
    # keeping the fastest of each step ties the complete rows to one cut-off; the old estimator
    # (correlation of complete rows) read 0.139 here
    workers = [{"overhead_s": 0.0, "per_sample_s": c / 32, "noise": LOGNORMAL} for c in (0.1, 0.12, 0.11)]
    raw = scenario_dict(workers, global_batch=96, steps_per_epoch=1000, epochs=1, seed=1)
    raw["policy"] = {"name": policy}
    cal = calibrate(simulate(load_scenario(raw)))
    assert cal.noise.shared is not None and cal.noise.shared < 0.02
    for fit, cost in zip(cal.workers, (0.1, 0.12, 0.11)):
        assert abs(32 * fit.per_sample_s - cost) < 3 * 32 * fit.se["per_sample_s"]


def _random_backup(seed: int, steps: int = 1500) -> pd.DataFrame:
    """The issue's trace: each worker's batch drawn from {50, 100, 150} every step, the slowest
    of three cut at the second finish."""
    rng = np.random.default_rng(seed)
    overhead, per_sample, sigma = np.array([0.005, 0.005, 0.01]), np.array([0.001, 0.001, 0.002]), 0.3
    b = rng.choice([50, 100, 150], size=(steps, 3))
    y = (overhead + per_sample * b) * np.exp(sigma * rng.standard_normal((steps, 3)) - sigma**2 / 2)
    second = np.sort(y, axis=1)[:, 1:2]
    kept = y <= second
    return pd.DataFrame({"step": np.repeat(np.arange(steps), 3), "worker": np.tile(np.arange(3), steps),
                         "local_batch": b.ravel(), "compute_s": np.where(kept, y, second).ravel(),
                         "included": kept.ravel()})  # fmt: skip


def test_cut_rows_with_a_batch_that_varies_are_unbiased():
    # one scale factor per worker (the old correction) gave worker 2 a per-sample cost of
    # 0.00137 (z = -8.9) and an overhead of 0.050 (z = +8.4)
    cal = calibrate(_random_backup(0), model=Affine)
    for fit, truth in zip(cal.workers, [(0.005, 0.001), (0.005, 0.001), (0.01, 0.002)]):
        for key, value in zip(("overhead_s", "per_sample_s"), truth):
            assert abs(getattr(fit, key) - value) < 3 * fit.se[key], (fit.worker, key)
        assert fit.noise_sigma == pytest.approx(0.3, rel=0.1)
    assert cal.workers[2].cancelled > 0.5 * 1500


def test_idle_workers_are_kept_and_the_rest_fitted():
    scenario = load_scenario("mixed-gpus", ["workload.epochs=1"])
    trace = simulate(scenario, Optimal())
    cal = calibrate(trace)
    assert [f.worker for f in cal.workers] == [0, 1, 2, 3]
    assert [i.worker for i in cal.idle] == [4, 5] and all(i.batch is None for i in cal.idle)
    slowest = trace.to_frame().query("local_batch > 0").groupby("step")["compute_s"].max().median()
    assert all(i.time_s == pytest.approx(slowest) for i in cal.idle)
    assert [i["lower_bound"] for i in cal.to_dict()["idle_workers"]] == [True, True]
    assert sum("not fitted" in w for w in cal.warnings) == 2
    rebuilt = load_scenario(cal.scenario)
    assert rebuilt.n_workers == 6
    assert simulate(rebuilt, Optimal()).per_step("local_batch")[:, 4:].sum() == 0  # idle there too


def test_too_few_computes_is_a_worker_left_out_or_one_line(tmp_path, capsys):
    frame = pd.DataFrame({"worker": [0, 0, 0, 1], "local_batch": [4, 8, 12, 8], "compute_s": [0.1, 0.2, 0.3, 0.15]})
    cal = calibrate(frame)
    (idle,) = cal.idle
    assert (idle.worker, idle.batch, idle.time_s) == (1, 8, 0.15) and "a measurement" in idle.basis
    assert cal.to_dict()["idle_workers"][0] | {"basis": ""} == {
        "worker": 1,
        "rows": 1,
        "offered_rows": 1,
        "batch": 8,
        "time_s": 0.15,
        "lower_bound": False,
        "basis": "",
    }
    with pytest.raises(ConfigError) as info:
        calibrate(frame.iloc[3:])
    assert info.value.field == "compute_s" and "no worker has 2 complete computes" in info.value.problem
    path = tmp_path / "one.csv"
    frame.iloc[3:].to_csv(path, index=False)
    out = tmp_path / "cal.toml"
    assert main(["calibrate", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compute_s" in err and not out.exists()


def _sandwich_se(b: np.ndarray, mean: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """Least squares' exact standard errors for independent rows of the given variances."""
    x = np.stack([np.ones_like(b), b], axis=1)
    bread = np.linalg.inv(x.T @ x)
    return np.sqrt(np.diag(bread @ (x.T * variance) @ x @ bread))


def test_standard_errors_of_multiplicative_noise_match_theory():
    # the textbook OLS error assumes one spread for every row; the truth grows with the time
    rng = np.random.default_rng(5)
    sigma, b = 0.3, rng.choice([10, 40, 160], size=4000).astype(float)
    mean = 0.01 + 0.001 * b
    fit, _ = fit_worker(0, b, mean * np.exp(sigma * rng.standard_normal(b.size) - sigma**2 / 2), model=Affine)
    theory = _sandwich_se(b, mean, mean**2 * np.expm1(sigma**2))
    assert fit.se["overhead_s"] == pytest.approx(theory[0], rel=0.1)
    assert fit.se["per_sample_s"] == pytest.approx(theory[1], rel=0.1)
    textbook = _sandwich_se(b, mean, np.full(b.size, (mean**2).mean() * np.expm1(sigma**2)))
    assert theory[1] > 1.3 * textbook[1]  # what the old standard error missed


def test_standard_errors_of_persistent_noise_match_theory():
    # an AR(1) log factor with rho 0.6: the mean of n steps varies (1 + rho) / (1 - rho) times more
    rng = np.random.default_rng(6)
    rho, sigma, n = 0.6, 0.1, 20_000
    z = np.empty(n)
    z[0] = rng.standard_normal()
    for t in range(1, n):
        z[t] = rho * z[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal()
    fit, _ = fit_worker(0, np.full(n, 32), 0.064 * np.exp(sigma * z - sigma**2 / 2), model=Affine)
    theory = 0.064 / 32 * np.sqrt(np.expm1(sigma**2) / n * (1 + rho) / (1 - rho))
    assert fit.se["per_sample_s"] == pytest.approx(theory, rel=0.15)


def test_an_overhead_pushed_to_its_bound_leaves_the_slope_its_full_uncertainty():
    # a narrow range of batches (as adaptive's steady split gives): the intercept is poorly known,
    # and where noise pushes it below 0 the slope must not be reported as if the intercept were known
    rng = np.random.default_rng(11)
    sigma, b = 0.15, rng.choice([26, 27, 28, 29], size=2000).astype(float)
    mean = 0.001 + 0.0014 * b
    for seed in range(40):
        y = mean * np.exp(sigma * np.random.default_rng(seed).standard_normal(b.size) - sigma**2 / 2)
        fit, warnings = fit_worker(0, b, y, model=Affine)
        if fit.overhead_s == 0.0:
            break
    assert fit.overhead_s == 0.0 and any("bound 0" in w for w in warnings)
    theory = _sandwich_se(b, mean, mean**2 * np.expm1(sigma**2))
    assert fit.se["per_sample_s"] == pytest.approx(theory[1], rel=0.15)
    assert fit.se["overhead_s"] == pytest.approx(theory[0], rel=0.15)


def test_a_forced_hinge_on_a_line_leaves_its_floor_unknown():
    rng = np.random.default_rng(12)
    b = rng.choice([34, 35, 36, 37], size=2000).astype(float)  # all above the kink at 26
    y = (0.010 + 0.001 * b) * np.exp(0.15 * rng.standard_normal(b.size) - 0.15**2 / 2)
    fit, warnings = fit_worker(0, b, y, model=Hinge)
    assert fit.model == "hinge" and fit.se["floor_s"] is None
    assert any("show no kink" in w for w in warnings)
    for key, truth in (("overhead_s", 0.010), ("per_sample_s", 0.001)):
        assert abs(fit.cost_curve().params()[key] - truth) < 3 * fit.se[key]


@pytest.mark.slow
def test_standard_errors_of_the_most_cut_worker_match_the_spread_over_seeds():
    # backup on 4 workers with a fixed split per run (calibration_coverage's backup-fixed): the
    # slow worker is cut in about 80% of its steps, at the last of the others' finishes. Its
    # observed-information errors match the spread of its estimates: over 1000 seeds of 2000 rows
    # se / sd was 1.03 (overhead) and 1.01 (per-sample cost); the 1.24-1.28 the coverage benchmark
    # read over its seeds 0-99 was those seeds' spread (0.92-0.99 over seeds 100-399)
    costs = np.array([(0.010, 0.0010), (0.006, 0.0014), (0.020, 0.0008), (0.0169, 0.00169)])
    sigma, seeds = 0.2, 120
    b = np.repeat([16.0, 32.0, 48.0, 64.0], 100)
    est, se = [], []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, 23])
        y = (costs[:, 0] + costs[:, 1] * b[:, None]) * np.exp(sigma * rng.standard_normal((b.size, 4)) - sigma**2 / 2)
        barrier = y[:, :3].max(axis=1)
        kept = y[:, 3] <= barrier
        fit, _ = fit_worker(3, b, np.where(kept, y[:, 3], barrier), kept, model=Affine)
        est.append((fit.overhead_s, fit.per_sample_s))
        se.append((fit.se["overhead_s"], fit.se["per_sample_s"]))
    est_a, se_a = np.array(est), np.array(se)
    ratio = se_a.mean(axis=0) / est_a.std(axis=0, ddof=1)
    z = (est_a - costs[3]) / se_a
    # 120 seeds know a spread to about 6.5%: the 20% is three of those either side of 1
    assert np.all((ratio > 0.8) & (ratio < 1.2)), ratio
    assert np.all(np.abs(z.mean(axis=0)) < 3 / np.sqrt(seeds)), z.mean(axis=0)


def _first_k(costs: np.ndarray, b: np.ndarray, sigma: float, k: int, rng: np.random.Generator):
    """Hinge workers (rows of ``costs``: floor, overhead, per-sample) at batches ``b`` (steps x
    workers); each step keeps the first ``k`` finishers and cuts the rest at the k-th finish."""
    mean = np.maximum(costs[:, 0], costs[:, 1] + costs[:, 2] * b)
    y = mean * np.exp(sigma * rng.standard_normal(b.shape) - sigma**2 / 2)
    kth = np.sort(y, axis=1)[:, k - 1 : k]
    kept = y <= kth
    return np.where(kept, y, kth), kept


@pytest.mark.slow
@pytest.mark.parametrize("design", ["random-batch backup", "ksync"])
def test_standard_errors_of_a_cut_hinge_match_the_spread_over_seeds(design):
    # calibration_coverage's backup-random/hinge (the slowest of 3 cut at the second finish, each
    # step's batches drawn from 50-200; 78% of its steps cut) and ksync/hinge (k = 2 of 4, fixed
    # splits 16-64; the slow worker 97% cut). Over its seeds 0-99 the benchmark read se / sd 1.24
    # (the floor) and 1.22 (per-sample cost); the observed information is right: over 1500-2000
    # seeds of these designs se / sd was 0.96-1.05 for every parameter, and on the benchmark's own
    # later seeds, 100-200 at a time, 0.95-1.11 (the floor, seeds 100-499) and 1.02-1.08 (the
    # per-sample cost, seeds 100-749). fit_mle is what fit_worker(model=Hinge) reports wherever
    # the kink is shown (within 5e-6 of a standard error over 1000 seeds of each design).
    if design == "ksync":
        costs = np.array([(0.036, 0.010, 0.0010), (0.0424, 0.006, 0.0014), (0.0408, 0.020, 0.0008),
                          (0.06084, 0.0169, 0.00169)])  # fmt: skip
        sigma, worker, batches = 0.2, 3, np.repeat([16.0, 32.0, 48.0, 64.0], 500)[:, None] * np.ones(4)
    else:
        costs = np.array([(0.1, 0.02, 0.001), (0.1, 0.02, 0.001), (0.2, 0.04, 0.002)])
        sigma, worker, batches = 0.3, 2, None
    seeds, bounds = 120, [(0.0, np.inf), (0.0, np.inf), (1e-12, np.inf)]
    est, se = [], []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, 23])
        b = rng.choice([50.0, 100.0, 150.0, 200.0], size=(1500, 3)) if batches is None else batches
        y, kept = _first_k(costs, b, sigma, 2, rng)
        fit = fit_mle(HingeCurve(costs[worker].copy()), bounds, b[:, worker], y[:, worker], ~kept[:, worker])
        est.append(fit.curve.values)
        se.append(np.sqrt(np.diag(fit.cov)))
    est_a, se_a = np.array(est), np.array(se)
    assert 0.75 < 1 - np.mean(kept[:, worker]) < 0.99  # the last seed's share of cut steps
    sd = est_a.std(axis=0, ddof=1)
    ratio = se_a.mean(axis=0) / sd
    # 120 seeds know a spread to about 6.5% (these estimates' kurtosis is 0.2-0.5): the issue's
    # 20% is three of those either side of 1. The mean's bound is 4 of its standard errors: six
    # correlated means of an unbiased fit pass 3 only about 98% of the time.
    assert np.all((ratio > 0.8) & (ratio < 1.2)), ratio
    assert np.all(np.abs(est_a.mean(axis=0) - costs[worker]) < 4 * sd / np.sqrt(seeds)), est_a.mean(axis=0)


def test_the_coverage_benchmark_pools_each_parameter_over_its_rounds():
    # the within-round spreads pooled by their degrees of freedom; the errors' mean squares by their seeds
    spec = importlib.util.spec_from_file_location("calibration_coverage", ROOT / "benchmarks/calibration_coverage.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    z = (np.linspace(-1.0, 2.0, 10), np.linspace(0.5, 4.0, 20))  # each round's (estimate - truth) / se
    rounds = [
        {"params": {"w0.x": {"truth": 1.0, "mean": 1.1, "sd": 1.0, "se": 1.5, "seeds": 10,
                             "z_avg": z[0].mean(), "z_sd": z[0].std(ddof=1)}}},
        {"params": {"w0.x": {"truth": 1.0, "mean": 0.8, "sd": 2.0, "se": 3.0, "seeds": 20,
                             "z_avg": z[1].mean(), "z_sd": z[1].std(ddof=1)}}},
    ]  # fmt: skip
    found = module.pooled(rounds)
    assert found["params"]["w0.x"]["z_sd"] == pytest.approx(np.concatenate(z).std(ddof=1))  # as if in one round
    se = np.sqrt((10 * 1.5**2 + 20 * 3.0**2) / 30)
    assert found["params"]["w0.x"]["se_ratio"] == pytest.approx(se / np.sqrt((9 * 1.0 + 19 * 4.0) / 28))
    assert found["params"]["w0.x"]["bias_se"] == pytest.approx(((10 * 1.1 + 20 * 0.8) / 30 - 1.0) / se)
    assert found["params"]["w0.x"]["seeds"] == 30
    assert found["within_20pct"] == 0.0 and set(found["outside"]) == {"w0.x"}
    # the root mean square of errors that differ between seeds, not their mean: 1 and 7 -> 5
    assert module.rms(np.array([1.0, 7.0])) == pytest.approx(5.0)


def test_one_workers_time_outside_compute_is_kept_a_step():
    # a one-rank run's comm_s is its update and the rest outside compute: left out, compare
    # predicted such runs 19% short
    frame = pd.DataFrame({"step": range(6), "worker": 0, "local_batch": [8, 16] * 3,
                          "compute_s": [0.011, 0.019, 0.010, 0.021, 0.012, 0.020], "comm_s": 0.0004})  # fmt: skip
    cal = calibrate(frame)
    assert isinstance(cal.network, ConstantNetwork) and cal.network.time_s == pytest.approx(0.0004)
    assert load_scenario(cal.scenario).allreduce_s() == pytest.approx(0.0004)
