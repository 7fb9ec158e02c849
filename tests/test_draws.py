"""The counter-based draws (:mod:`hetsim.model.draws`): a worker's numbers depend on its index and the
step only, every law is inverted exactly, and a persistent factor is stationary from step 0."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hetsim.model.distributions import Empirical, Exponential, Gamma, LogNormal, ShiftedExponential, Uniform
from hetsim.model.draws import SLOTS, TILE_STEPS, StepDraws, Uniforms
from hetsim.model.workers import NOISE_PURPOSE
from hetsim.scenario.config import build_scenario
from tests.helpers import scenario_dict

LAWS = [
    {"dist": "lognormal", "sigma": 0.2},
    {"dist": "gamma", "shape": 4.0, "scale": 0.25},
    {"dist": "uniform", "low": 0.5, "high": 1.5},
    {"dist": "empirical", "samples": [0.8, 1.0, 1.2]},
    {"dist": "constant", "value": 1.0},
]


def cluster(noises: list[dict], seed: int = 3, count: int = 1, **extra: object) -> StepDraws:
    """The draws of workers with these noises (each ``count`` times), in this order."""
    workers = [{"count": count, "per_sample_s": 1e-3, "noise": noise, **extra} for noise in noises]
    s = build_scenario(scenario_dict(workers, global_batch=max(64, count * len(noises))))
    return StepDraws(seed, s.workers)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=8, unique=True), st.integers(0, 50), st.integers(1, 3))
def test_a_slots_uniforms_are_its_stretch_of_the_purposes_sequence(slots, tile, count):
    slots = np.sort(np.array(slots))
    bits = np.random.PCG64(np.random.SeedSequence(5, spawn_key=(NOISE_PURPOSE,)))
    bits.advance(tile * SLOTS * TILE_STEPS)
    tiles = []
    for _ in range(count):  # tile after tile: SLOTS stretches of TILE_STEPS numbers each
        stretch = np.random.Generator(bits).random((int(slots[-1]) + 1) * TILE_STEPS).reshape(-1, TILE_STEPS)
        tiles.append(stretch[slots].T)
        bits.advance((SLOTS - int(slots[-1]) - 1) * TILE_STEPS)
    assert np.array_equal(Uniforms(5, NOISE_PURPOSE).tiles(tile, count, slots), np.concatenate(tiles))


def test_uniforms_are_read_forward_only():
    u = Uniforms(5, NOISE_PURPOSE)
    u.tiles(3, 1, np.array([0, 1]))
    with pytest.raises(ValueError, match="read forward"):
        u.tiles(2, 1, np.array([0]))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(range(len(LAWS))), min_size=1, max_size=5), st.integers(1, 3))
def test_a_workers_draws_do_not_depend_on_the_rest_of_the_cluster(laws, extra):
    # Worker 0 alone, and with others of any laws after it: the same numbers, noise and delay.
    alone = cluster([LAWS[laws[0]]], delay={"dist": "exponential", "mean": 0.01}).take(0, 40)
    crowd = cluster([LAWS[k] for k in laws] + [LAWS[0]] * extra, delay={"dist": "exponential", "mean": 0.01})
    noise, delay = crowd.take(0, 40)
    assert np.array_equal(noise[:, 0], alone[0][:, 0]) and np.array_equal(delay[:, 0], alone[1][:, 0])


@pytest.mark.parametrize(
    "dist",
    [LogNormal(sigma=0.3), Exponential(mean=0.2), ShiftedExponential(shift=0.1, mean=0.2),
     Gamma(shape=2.5, scale=0.4), Uniform(low=0.5, high=2.0)],
)  # fmt: skip
def test_ppf_inverts_the_cdf(dist):
    u = np.linspace(0.001, 0.999, 997)
    assert np.allclose(dist.cdf(dist.ppf(u)), u, rtol=0, atol=1e-9)


def test_empirical_ppf_gives_each_sample_an_equal_share_and_stays_in_range():
    dist = Empirical(samples=(3.0, 1.0, 2.0))
    u = np.array([0.0, 1 / 3 - 1e-12, 1 / 3, 2 / 3 - 1e-12, 2 / 3, np.nextafter(1.0, 0.0)])
    assert dist.ppf(u).tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]


def test_every_law_draws_its_distribution_across_a_large_cluster():
    n = 4000
    draws = cluster([{"dist": "gamma", "shape": 4.0, "scale": 0.25}], count=n).take(0, 3)[0]
    for row in draws:  # one step, 4000 independent workers
        assert stats.kstest(row, stats.gamma(a=4.0, scale=0.25).cdf).pvalue > 1e-3


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_a_persistent_factor_is_stationary_from_step_0_and_correlated_across_tiles():
    sigma, rho, n = 0.3, 0.7, 20_000
    noise = cluster([{"dist": "lognormal", "sigma": sigma, "persistence": rho}], count=n).take(0, 2 * TILE_STEPS)[0]
    log = np.log(noise) + sigma**2 / 2  # Z_t, across workers
    for t in (0, 1, TILE_STEPS - 1, TILE_STEPS, 2 * TILE_STEPS - 1):
        assert log[t].std() == pytest.approx(sigma, rel=0.03)
        assert abs(log[t].mean()) < 5 * sigma / math.sqrt(n)
    for t in (0, TILE_STEPS - 1):  # within a tile, and from one tile to the next
        assert np.corrcoef(log[t], log[t + 1])[0, 1] == pytest.approx(rho, abs=0.02)


def test_shared_group_members_share_each_steps_factor():
    shared = {"group": "h", "dist": "lognormal", "sigma": 0.4}
    draws = cluster([{"dist": "constant", "value": 1.0}], count=3, shared_noise=shared).take(0, 20)[0]
    assert np.array_equal(draws[:, 0], draws[:, 1]) and np.array_equal(draws[:, 0], draws[:, 2])
    assert len(np.unique(draws[:, 0])) == 20
