"""validation's calibrated scenario: the noise's shared part and persistence written where the
calibration shows them clearly (validation/calibrated_noise.py), and curves other than affine
moved to another run's injected delays (validation/reinject.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hetsim.calibrate import calibrate
from hetsim.core.registry import COSTS
from hetsim.model.costs import Hinge, Table
from hetsim.scenario.config import load_scenario
from hetsim.scenario.raw_tables import make_plugin
from validation.calibrated_noise import (
    MAX_PERSISTENCE,
    SHARED_GROUP,
    clear_persistence,
    noise_scenario,
    shared_persistence,
    shared_threshold,
)
from validation.reinject import reinjected

SIZES = np.array([8, 16, 32, 64, 96, 112, 120])  # the probe's local batches at a global batch of 128
AFFINE = ((0.002, 1e-4), (0.004, 3e-4))  # overhead, per sample


def _ar1(rng: np.random.Generator, n: int, rho: float, sigma: float) -> np.ndarray:
    """A stationary AR(1) path of ``n`` steps, marginal sigma ``sigma``, lag-1 ``rho``."""
    x = np.empty(n)
    x[0] = rng.normal(0.0, sigma)
    shocks = rng.normal(0.0, sigma * math.sqrt(1.0 - rho * rho), n)
    for t in range(1, n):
        x[t] = rho * x[t - 1] + shocks[t]
    return x


def _trace(seed: int, own: tuple[float, float], shared: tuple[float, float], n: int = 400) -> pd.DataFrame:
    """Two workers with affine costs, each step's log noise its own AR(1) (sigma, rho) plus a
    shared AR(1) one; a third worker that never gets samples."""
    rng = np.random.default_rng(seed)
    common = _ar1(rng, n, shared[1], shared[0])
    steps = np.arange(n)
    rows = []
    for w, (overhead, per_sample) in enumerate(AFFINE):
        b = SIZES[steps % SIZES.size] if w == 0 else 128 - SIZES[steps % SIZES.size]
        log_noise = _ar1(rng, n, own[1], own[0]) + common - (own[0] ** 2 + shared[0] ** 2) / 2
        y = (overhead + per_sample * b) * np.exp(log_noise)
        rows.append(pd.DataFrame({"step": steps, "worker": w, "local_batch": b, "compute_s": y, "comm_s": 1e-3}))
    rows.append(pd.DataFrame({"step": steps, "worker": 2, "local_batch": 0, "compute_s": 0.0, "comm_s": 1e-3}))
    return pd.concat(rows, ignore_index=True)


def test_a_clear_shared_factor_and_persistence_are_written_and_keep_each_workers_total_noise():
    calibration = calibrate(_trace(1, own=(0.08, 0.6), shared=(0.06, 0.6)))
    scenario = noise_scenario(calibration)
    load_scenario(scenario)  # the shared group is declared alike by its members
    tau = calibration.noise.shared_sigma
    assert tau is not None and calibration.noise.shared is not None
    assert calibration.noise.shared > shared_threshold(calibration.noise)
    entries = scenario["workers"]
    assert entries[0]["shared_noise"] == entries[1]["shared_noise"]
    shared = entries[0]["shared_noise"]
    assert shared["group"] == SHARED_GROUP and shared["dist"] == "lognormal" and shared["sigma"] == tau
    lag1 = calibration.noise.persistence
    assert 0 < shared["persistence"] < 1
    for fit, entry, rho in zip(calibration.workers, entries, lag1):
        own = entry["noise"]
        assert own["sigma"] ** 2 + tau**2 == pytest.approx(fit.noise_sigma**2)
        total_lag1 = (own["persistence"] * own["sigma"] ** 2 + shared["persistence"] * tau**2) / fit.noise_sigma**2
        assert total_lag1 == pytest.approx(rho)
    assert entries[2] == calibration.scenario["workers"][2]  # the idle worker as calibrated
    assert "shared_noise" not in calibration.scenario["workers"][0]  # the calibration's own scenario untouched


def test_independent_fresh_noise_writes_nothing():
    calibration = calibrate(_trace(1, own=(0.08, 0.0), shared=(0.0, 0.0)))
    assert noise_scenario(calibration) == calibration.scenario


def test_persistence_alone_is_written_without_a_shared_factor():
    calibration = calibrate(_trace(1, own=(0.08, 0.6), shared=(0.0, 0.0)))
    scenario = noise_scenario(calibration)
    load_scenario(scenario)
    for fit, entry, rho in zip(calibration.workers, scenario["workers"], calibration.noise.persistence):
        assert "shared_noise" not in entry
        assert entry["noise"] == {"dist": "lognormal", "sigma": fit.noise_sigma, "persistence": rho}


def test_thresholds_are_three_standard_errors():
    assert clear_persistence(0.29, 100) == 0.0 and clear_persistence(0.31, 100) == 0.31
    assert clear_persistence(None, 100) == 0.0 and clear_persistence(0.999, 10_000) == 0.99
    calibration = calibrate(_trace(1, own=(0.08, 0.0), shared=(0.0, 0.0)))
    assert shared_threshold(calibration.noise) == pytest.approx(3 / math.sqrt(400))


def test_the_shared_factor_persists_as_its_members_mean_within_what_keeps_their_own_persistence_valid():
    def own(q: float, rho: list[float], variance: list[float], t: float) -> list[float]:
        return [(r * v - q * t) / (v - t) for r, v in zip(rho, variance)]

    assert shared_persistence([0.4, 0.6], [0.04, 0.04], 0.01) == pytest.approx(0.5)  # the mean fits both
    rho, variance, t = [0.2, 0.9], [0.1, 0.02], 0.015  # at the mean, 0.55, worker 1's own part would need 1.95
    q = shared_persistence(rho, variance, t)
    assert q > 0.55 and all(0 <= p <= MAX_PERSISTENCE + 1e-12 for p in own(q, rho, variance, t))
    assert shared_persistence([0.0, 0.6], [0.04, 0.04], 0.01) == 0.0  # a member without persistence


@pytest.mark.parametrize(
    "cost",
    [
        {"model": "table", "points": [[8, 0.004], [32, 0.009], [128, 0.030]]},
        {"model": "hinge", "floor_s": 0.010, "overhead_s": 0.002, "per_sample_s": 3e-4},
    ],
)
def test_a_curve_moves_to_the_other_runs_injection_exactly_at_every_batch(cost):
    workers = [{"name": "w0", "cost": cost, "noise": {"dist": "lognormal", "sigma": 0.1}}]
    source = {"injection": {"delay": {"0": "0.002"}, "per_sample_delay": {"0": 1e-5}, "slowdown": {"0": 2.0}}}
    target = {"global_batch": 256, "config": {"max_batch": None},
              "injection": {"delay": {"0": "0.004"}, "per_sample_delay": {"0": 2e-5}, "slowdown": {}}}  # fmt: skip
    (moved,) = reinjected(workers, source, target)
    assert moved["noise"] == workers[0]["noise"]
    curve = Table(points=cost["points"]) if cost["model"] == "table" else Hinge(0.010, 0.002, 3e-4)
    b = np.arange(1, 257, dtype=float)
    expected = (curve.time_s(b) - 0.002 - 1e-5 * b) / 2.0 + 0.004 + 2e-5 * b
    got = make_plugin(COSTS, moved["cost"], "cost", "model").time_s(b)
    np.testing.assert_allclose(got, np.maximum.accumulate(expected), rtol=1e-12)
