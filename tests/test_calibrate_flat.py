"""A cost curve that does not grow with the batch (a launch-bound GPU step) keeps its level in the
fixed cost (issue 25, item 2): the affine fit bounds the slope at (nearly) 0 with the overhead
free, where the old fit fell back to a line through the origin whenever the fitted slope was
at most 0 (83 of 200 seeds, predicting 0.09 ms for a 4 ms step)."""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.calibrate import fit_worker
from hetsim.calibrate.curves import Sizes
from hetsim.calibrate.worker_fit import _affine_fit
from hetsim.model.costs import Affine

FLAT_S, SIGMA = 0.004, 0.05  # 4 ms whatever the batch, 5% lognormal noise
# One round of validation's probe on 2 ranks at a global batch of 64 (its default fractions
# 1/16, 1/8, 1/4, 1/2, 3/4, each rank in turn at the fraction, the other at the rest): rank 0's
# local batches; validation runs 10 rounds by default (probe_repeats).
PROBE_ROUND = (4, 60, 8, 56, 16, 48, 32, 32, 48, 16)
ROUNDS = 10


def _flat_rows(seed: int, batches: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return FLAT_S * np.exp(SIGMA * rng.standard_normal(batches.size) - SIGMA**2 / 2)


def test_the_affine_terms_of_a_flat_curve_keep_its_fixed_cost_in_every_seed():
    # the affine terms every fit reports (WorkerFit.overhead_s, per_sample_s; what probe.py's hints
    # use), fast: the overhead's spread here is about 0.7%, so 5% is 7 of its standard errors
    b = np.tile(np.array(PROBE_ROUND, dtype=float), ROUNDS)
    worst = 0.0
    for seed in range(200):
        y = _flat_rows(seed, b)
        found, notes = _affine_fit(0, Sizes.of(b, y), b, y, np.zeros(b.size, dtype=bool))
        overhead, per_sample = found.curve.values
        worst = max(worst, abs(overhead / FLAT_S - 1), abs((overhead + per_sample) / FLAT_S - 1))
        assert not any("overhead at its bound 0" in n for n in notes)
    assert worst <= 0.05


@pytest.mark.slow
@pytest.mark.parametrize(
    "model", [Affine, None], ids=["affine", "auto"]
)  # None: chosen, as probe.py and compare.py fit
def test_a_flat_curve_keeps_its_fixed_cost_in_every_seed(model):
    # the whole fit as probe.py and compare.py call it: a right fit misses in no seed, the old
    # fallback through the origin in 91 of 200 (a 1-sample step predicted near 0)
    b = np.tile(np.array(PROBE_ROUND, dtype=float), ROUNDS)
    for seed in range(200):
        fit, _ = fit_worker(0, b, _flat_rows(seed, b), model=model)
        assert abs(fit.overhead_s / FLAT_S - 1) <= 0.05, (seed, fit.overhead_s)
        one = float(fit.cost_curve().time_s(np.array([1.0]))[0])  # the chosen curve's 1-sample step
        assert abs(one / FLAT_S - 1) <= 0.05, (seed, one)


@pytest.mark.slow
def test_a_flat_curve_cut_at_the_barrier_keeps_its_fixed_cost():
    # the same under the censored likelihood: rows cut at an independent barrier time (backup)
    b = np.tile(np.array(PROBE_ROUND, dtype=float), ROUNDS)
    for seed in range(20):
        rng = np.random.default_rng([seed, 1])
        y = _flat_rows(seed, b)
        barrier = FLAT_S * np.exp(SIGMA * rng.standard_normal(b.size))
        kept = y <= barrier
        fit, _ = fit_worker(0, b, np.where(kept, y, barrier), kept, model=Affine)
        assert fit.cancelled > 20
        assert abs(fit.overhead_s / FLAT_S - 1) <= 0.05, (seed, fit.overhead_s)
        assert fit.per_sample_s * 64 < 0.05 * FLAT_S
