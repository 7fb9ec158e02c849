"""Distributions: exact moments and CDFs, and batched draws equal to scalar draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from hetsim.model.distributions import Constant, Empirical, Exponential, Gamma, LogNormal, ShiftedExponential, Uniform

CASES = [
    Constant(0.3),
    Exponential(0.5),
    ShiftedExponential(0.2, 0.3),
    Gamma(2.0, 0.5),
    LogNormal(0.25),
    Uniform(0.1, 0.7),
    Empirical((0.1, 0.2, 0.2, 0.9)),
]


@pytest.mark.parametrize("dist", CASES, ids=lambda d: d.name)
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_moments_match_a_large_sample(dist):
    x = dist.sample(np.random.default_rng(1), 400_000)
    sd = math.sqrt(dist.var())
    assert abs(x.mean() - dist.mean()) <= 5 * sd / math.sqrt(len(x)) + 1e-12
    if sd > 0:
        assert x.var() == pytest.approx(dist.var(), rel=0.02)


@pytest.mark.parametrize("dist", CASES, ids=lambda d: d.name)
def test_cdf_matches_the_sample(dist):
    x = dist.sample(np.random.default_rng(2), 100_000)
    grid = np.quantile(x, [0.1, 0.3, 0.5, 0.7, 0.9])
    empirical = (x[:, None] <= grid[None, :]).mean(axis=0)
    assert np.allclose(dist.cdf(grid), empirical, atol=0.01)


def test_exact_values():
    assert LogNormal(0.4).mean() == 1.0
    assert LogNormal(0.4).var() == pytest.approx(math.exp(0.16) - 1)
    assert Exponential(2.0).cdf(2.0) == pytest.approx(1 - math.exp(-1))
    assert ShiftedExponential(1.0, 2.0).cdf(0.5) == 0.0
    assert Gamma(3.0, 2.0).cdf(4.0) == pytest.approx(stats.gamma.cdf(4.0, 3.0, scale=2.0))
    assert Uniform(1.0, 3.0).cdf(2.5) == pytest.approx(0.75)
    assert Empirical((1.0, 2.0, 3.0, 4.0)).cdf(2.0) == 0.5
    assert Constant(0.2).sample(np.random.default_rng(0)) == 0.2


@given(st.integers(0, 2**32 - 1), st.integers(1, 50), st.sampled_from(CASES))
def test_a_batch_of_k_draws_equals_k_scalar_draws(seed, k, dist):
    batch = dist.sample(np.random.default_rng(seed), k)
    rng = np.random.default_rng(seed)
    scalars = [dist.sample(rng) for _ in range(k)]
    assert np.array_equal(batch, np.asarray(scalars, dtype=float))
