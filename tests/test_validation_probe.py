"""The calibration probe (validation/probe.py): the small local batches a leave-out decision
turns on, enough rounds before the policies start, costs fitted as compare fits them, and
compare's simulated policies told the costs the real ones were told."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.model.costs import Affine, CostModel, Hinge
from hetsim.model.partition import min_max_split
from hetsim.model.trace import COLUMNS
from hetsim.policies import WorkerHint
from validation.compare import compare_run, told_hints
from validation.probe import (
    PROBE,
    SMALL_SIZES,
    START_ROUNDS,
    first_block_hints,
    fit_probe,
    probe_round,
    probe_schedule,
    probe_sizes,
)
from validation.record import RankTiming, RunWriter, step_rows
from validation.run_folder import load_run

FRACTIONS = (0.0625, 0.125, 0.25, 0.5, 0.75)  # validation run's default --probe-fractions


def split_of(hints: tuple[WorkerHint, ...], batch: int) -> tuple[int, ...]:
    """``optimal``'s split for ``hints`` (min-max over the expected times, no caps)."""
    return min_max_split(hints, batch, [batch] * len(hints))


@settings(max_examples=40)
@given(batch=st.integers(2, 512), world=st.integers(2, 6))
def test_every_rank_is_probed_at_one_and_two_samples_and_every_step_is_one_global_batch(batch, world):
    plan = probe_round(batch, world, FRACTIONS)
    assert all(sum(split) == batch and min(split) >= 0 for split in plan)
    for rank in range(world):
        seen = {split[rank] for split in plan[rank::world]}  # the steps where ``rank`` is the focus
        assert {b for b in SMALL_SIZES if b < batch} <= seen
        assert {min(batch, max(1, round(f * batch))) for f in FRACTIONS} <= seen
    assert len(plan) == world * len(probe_sizes(batch, world, FRACTIONS))


def test_the_probe_sizes_at_the_default_fractions():
    assert probe_sizes(128, 3, FRACTIONS) == [1, 2, 8, 16, 32, 64, 96]
    assert probe_sizes(16, 2, FRACTIONS) == [1, 2, 4, 8, 12]  # the fractions give 1 and 2 already
    assert probe_sizes(8, 1, FRACTIONS) == [8] * len(FRACTIONS)  # one rank takes the whole batch
    assert probe_round(128, 3, FRACTIONS)[:3] == [(1, 64, 63), (64, 1, 63), (64, 63, 1)]


@settings(max_examples=40)
@given(batch=st.integers(2, 256), times=st.integers(2, 8), world=st.integers(2, 5))
def test_with_a_larger_batch_to_choose_each_round_measures_its_fractions_too(batch, times, world):
    largest = batch * times
    base = probe_round(batch, world, FRACTIONS)
    plan = probe_round(batch, world, FRACTIONS, largest)
    assert plan[: len(base)] == base  # the global batch's round first, as without
    extra = plan[len(base) :]
    assert all(sum(split) == largest and min(split) >= 0 for split in extra)
    for rank in range(world):
        assert {split[rank] for split in extra[rank::world]} == {max(1, round(f * largest)) for f in FRACTIONS} | {
            largest
        }
    assert probe_round(batch, world, FRACTIONS, batch) == base  # nothing larger to choose


def test_the_first_rounds_run_before_any_policy_and_the_rest_are_spread():
    assert probe_schedule(10, 12, START_ROUNDS) == [3, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 0]
    assert probe_schedule(2, 5, 3) == [2, 0, 0, 0, 0, 0]  # fewer rounds than asked for at the start
    assert probe_schedule(0, 3, 3) == [0, 0, 0, 0]
    for rounds in range(1, 30):
        for blocks in range(1, 12):
            assert probe_schedule(rounds, blocks, 1) == probe_schedule(rounds, blocks)
            for first in range(1, 6):
                plan = probe_schedule(rounds, blocks, first)
                assert sum(plan) == rounds and plan[0] >= min(first, rounds)
                later = plan[1 : min(rounds - plan[0] + 1, blocks + 1)]
                assert not later or max(later) - min(later) <= 1


def _probe_frame(costs: list[CostModel], rounds: int, sigma: float, seed: int, epoch: int = 0) -> pd.DataFrame:
    """``rounds`` probe rounds at a global batch of 128, each rank's time its cost times mean-1
    lognormal noise of ``sigma``."""
    rng = np.random.default_rng(seed)
    plan = [split for _ in range(rounds) for split in probe_round(128, len(costs), FRACTIONS)]
    rows = []
    for step, split in enumerate(plan):
        noise = np.exp(rng.normal(-sigma * sigma / 2, sigma, len(costs)))
        timings = [RankTiming(float(c.time_s(b)) * z, 1e-3, 1e-3) for c, b, z in zip(costs, split, noise)]
        rows.extend(step_rows(PROBE, epoch, step, 0.0, split, timings))
    return pd.DataFrame(rows, columns=list(COLUMNS))


COSTS: list[CostModel] = [Hinge(0.02, 0.002, 5e-4), Affine(0.004, 3e-4), Hinge(0.06, 0.01, 2e-3)]


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_fit_probe_recovers_hinge_and_affine_costs_at_every_probed_size_and_is_monotone(seed):
    hints = fit_probe(_probe_frame(COSTS, START_ROUNDS, 0.03, seed), len(COSTS))
    assert hints is not None and len(hints) == len(COSTS)
    sizes = np.array(probe_sizes(128, 3, FRACTIONS), dtype=float)
    grid = np.arange(1, 129, dtype=float)
    errors = np.array([np.abs(hint.expected_s(sizes) / cost.time_s(sizes) - 1) for hint, cost in zip(hints, COSTS)])
    # 3 rounds of 3% noise: about 1% on average (at most 1.3% over 31 seeds); one size of one rank
    # up to 6.4% (a hinge chosen for the affine rank bends at the smallest sizes)
    assert errors.mean() < 0.02 and errors.max() < 0.10
    for hint in hints:
        assert np.all(np.diff(np.asarray(hint.expected_s(grid), dtype=float)) >= -1e-12)


def test_fit_probe_knows_the_cost_at_one_sample_that_decides_a_leave_out():
    """A rank at 60 ms whatever its batch (up to 200 samples) beside two that take the whole
    batch in under 60 ms: the fit, which has timed it at 1 sample, puts it at 60 ms there, so
    min-max leaves it out, as it does on the true costs."""
    slow = Hinge(0.06, 0.0, 3e-4)
    costs: list[CostModel] = [Affine(0.002, 1e-4), Affine(0.004, 3e-4), slow]
    hints = fit_probe(_probe_frame(costs, START_ROUNDS, 0.02, 7), 3)
    assert hints is not None
    assert float(hints[2].expected_s(1)) == pytest.approx(0.06, rel=0.05)
    truth = tuple(WorkerHint(cost=c) for c in costs)
    assert split_of(hints, 128)[2] == split_of(truth, 128)[2] == 0


def test_fit_probe_without_probe_rows_is_none():
    assert fit_probe(pd.DataFrame(columns=list(COLUMNS)), 2) is None


def _leave_out_run(folder, rng_seed: int = 3) -> tuple[WorkerHint, ...]:
    """A run folder of two ranks: the probe's first block (epoch 0) shows rank 1 as fast as
    rank 0, its later blocks show rank 1 slow (60 ms a step), and ``optimal`` ran the split the
    first block's costs give. The costs it was told are returned."""
    fast, slow = Affine(0.002, 1e-4), Hinge(0.06, 0.01, 1e-3)
    meta = {"global_batch": 128, "steps_per_epoch": 4, "epochs": 1, "world_size": 2, "gradient_mb": 0.1,
            "policies": ["optimal"]}  # fmt: skip
    writer = RunWriter(folder, meta)
    first = _probe_frame([fast, fast], START_ROUNDS, 0.02, rng_seed, epoch=0)
    later = [_probe_frame([fast, slow], 1, 0.02, rng_seed + k, epoch=k) for k in range(1, 8)]
    frame = pd.concat([first, *later], ignore_index=True)
    frame["step"] = np.repeat(np.arange(len(frame) // 2), 2)
    hints = fit_probe(first, 2)
    assert hints is not None
    split = split_of(hints, 128)
    rng = np.random.default_rng(rng_seed)
    for row in frame.to_dict("records"):
        writer.add_steps([row])
    for step in range(4):
        times = [RankTiming(float(fast.time_s(b)) * float(np.exp(rng.normal(0, 0.02))), 1e-3, 1e-3) for b in split]
        writer.add_steps(step_rows("optimal", 0, step, 0.01 * step, split, times))
    writer.flush()
    return hints


@pytest.mark.slow
def test_compare_tells_the_simulated_optimal_the_costs_the_real_one_was_told(tmp_path):
    told = _leave_out_run(tmp_path)
    run = load_run(tmp_path)
    assert told_hints(run) is not None
    assert [float(h.expected_s(b)) for h in told_hints(run) or () for b in (1, 64)] == pytest.approx(
        [float(h.expected_s(b)) for h in told for b in (1, 64)], rel=1e-9
    )
    (comparison,), calibration = compare_run(run)
    real = split_of(told, 128)
    assert 0 < real[1] < 128  # told rank 1 is fast: it keeps samples
    assert split_of(_scenario_hints(calibration.scenario), 128)[1] == 0  # the calibrated curves would not
    assert tuple(comparison.measured.final_batches) == tuple(comparison.predicted.final_batches) == tuple(real)


def _scenario_hints(scenario: dict) -> tuple[WorkerHint, ...]:
    from hetsim.scenario.config import load_scenario

    return load_scenario(scenario).hints()


@pytest.mark.slow
def test_first_block_hints_fit_only_the_lowest_epoch():
    first = _probe_frame(COSTS, START_ROUNDS, 0.02, 1, epoch=0)
    later = _probe_frame([c for c in COSTS[::-1]], 2, 0.02, 2, epoch=3)
    both = first_block_hints(pd.concat([first, later], ignore_index=True), 3)
    alone = fit_probe(first, 3)
    assert both is not None and alone is not None
    for a, b in zip(both, alone):
        assert float(a.expected_s(17)) == float(b.expected_s(17))


def test_a_run_without_probe_rows_tells_a_simulated_goodput_no_costs_as_the_real_one_was_told():
    from types import SimpleNamespace

    trace = pd.DataFrame({"policy": ["goodput"] * 2, "epoch": [0, 0], "rank": [0, 1]})
    run = SimpleNamespace(policies=["goodput"], trace=trace, meta={"world_size": 2})
    assert told_hints(run) == (WorkerHint(), WorkerHint())  # not the calibrated curves it never had
    assert told_hints(SimpleNamespace(policies=["adaptive"], trace=trace, meta={"world_size": 2})) is None
