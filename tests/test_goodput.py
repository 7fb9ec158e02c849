"""The goodput policy: the global batch and its split chosen together for the fastest progress."""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.engines import VectorEngine
from hetsim.model.costs import Table
from hetsim.model.efficiency import Efficiency
from hetsim.model.partition import max_time, min_max_split, slowest_expected_s, water_fill
from hetsim.policies import Adaptive, Goodput, RunHint, StepInfo, StepRecord, WorkerHint
from hetsim.policies.goodput import StepCosts
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario
from tests.helpers import scenario_dict

FIXED_S = np.array([0.010, 0.010, 0.030])  # two fast workers and a slow one, affine, deterministic
PER_SAMPLE_S = np.array([0.0005, 0.0005, 0.0020])
OVERHEAD_S = 0.05


def true_goodput(batch: int, efficiency: Efficiency, noise: float) -> float:
    split = water_fill(FIXED_S, PER_SAMPLE_S, batch)
    return efficiency.gain(batch, noise) / (max_time(FIXED_S, PER_SAMPLE_S, split) + OVERHEAD_S)


def run(policy: Goodput, steps: int, time_s, per_epoch: int = 5) -> list[int]:
    """Run ``policy`` for ``steps`` deterministic steps, a worker's time ``time_s(i, b)`` at ``b``
    samples; the global batch of every step."""
    out = []
    for k in range(steps):
        info = StepInfo(k, k // per_epoch, k % per_epoch, per_epoch)
        batches = policy.partition(info)
        out.append(sum(batches))
        times = tuple(float(time_s(i, b)) if b else 0.0 for i, b in enumerate(batches))
        policy.observe(StepRecord(info, tuple(batches), times, (True,) * len(batches)))
    return out


def feed(policy: Goodput, steps: int, per_epoch: int = 5) -> list[int]:
    """Run ``policy`` on the deterministic affine workers."""
    return run(policy, steps, lambda i, b: FIXED_S[i] + PER_SAMPLE_S[i] * b, per_epoch)


@pytest.mark.slow
@pytest.mark.parametrize("noise", [40.0, 400.0, 4000.0])
def test_it_settles_on_the_batch_of_highest_goodput_within_the_candidate_grid(noise):
    efficiency = Efficiency(noise, 64)
    policy = Goodput(min_batch=16, max_batch=2048, batch_hysteresis=0.0)
    policy.reset(3, 128, [WorkerHint()] * 3, RunHint(OVERHEAD_S, efficiency))
    batches = feed(policy, 40)
    # every worker's slope is identified once the batch has moved; the choice is then stable
    assert len(set(batches[-10:])) == 1
    best = max(true_goodput(b, efficiency, noise) for b in range(16, 2049))
    assert true_goodput(batches[-1], efficiency, noise) >= 0.99 * best
    assert policy.progress == pytest.approx(sum(efficiency.gain(b, noise) for b in batches))


def test_a_larger_noise_scale_means_a_larger_batch():
    chosen = []
    for noise in (40.0, 400.0, 4000.0):
        policy = Goodput(min_batch=16, max_batch=2048, batch_hysteresis=0.0)
        policy.reset(3, 128, [WorkerHint()] * 3, RunHint(OVERHEAD_S, Efficiency(noise, 64)))
        chosen.append(feed(policy, 40)[-1])
    assert chosen[0] < chosen[1] < chosen[2]


def test_a_measured_noise_scale_overrides_the_workloads():
    policy = Goodput(min_batch=16, max_batch=2048, batch_hysteresis=0.0)
    policy.reset(3, 128, [WorkerHint()] * 3, RunHint(OVERHEAD_S, Efficiency(40.0, 64)))
    small = feed(policy, 20)[-1]
    policy.observe_noise_scale(4000.0)
    assert feed(policy, 20)[-1] > 4 * small


def test_hysteresis_keeps_the_batch_unless_the_gain_is_large_enough():
    policy = Goodput(min_batch=16, max_batch=2048, batch_hysteresis=0.99)
    policy.reset(3, 128, [WorkerHint()] * 3, RunHint(OVERHEAD_S, Efficiency(400.0, 64)))
    assert set(feed(policy, 30)) == {128}


def test_the_batch_stays_within_the_range_and_the_caps():
    policy = Goodput(min_batch=100, max_batch=150, batch_hysteresis=0.0)
    policy.reset(3, 64, [WorkerHint(max_batch=40)] * 3, RunHint(OVERHEAD_S, Efficiency(4000.0, 64)))
    assert policy.global_batch == 100  # the workload's batch, moved into the range
    assert set(feed(policy, 20)) <= set(range(100, 121))  # the caps hold 120


@pytest.mark.slow
def test_a_schedule_moves_the_batch_up_as_training_progresses_and_both_engines_agree():
    schedule = "workload.efficiency.noise_scale=[[0, 100], [1500, 6000]]"
    scenario = load_scenario(
        "mixed-gpus", [schedule, "workload.efficiency.base_batch=256", "workload.efficiency.target_steps=3000",
                       "workload.epochs=30", "policy.name=goodput", "policy.min_batch=128"]
    )  # fmt: skip
    trace = simulate(scenario, Goodput())
    sums = trace.per_step("local_batch").sum(axis=1)
    assert sums[100] < sums[-1] and (np.diff(sums[97:]) >= 0).mean() > 0.95  # mostly upwards
    vector = simulate(scenario, Goodput(), engine=VectorEngine())
    np.testing.assert_array_equal(vector.local_batch, trace.local_batch)
    np.testing.assert_array_equal(vector.compute_s, trace.compute_s)
    summary = summarize(trace, scenario)
    assert summary.time_to_target_s is not None
    fixed = [summarize(simulate(s, Adaptive()), s).time_to_target_s for s in [scenario]]
    assert fixed[0] is not None and summary.time_to_target_s < fixed[0]  # beats adaptive at the default batch


def test_goodput_without_statistical_efficiency_is_refused_naming_the_field():
    scenario = load_scenario("paper")
    with pytest.raises(ConfigError, match=r"^workload\.efficiency: missing: policy 'goodput'"):
        scenario.make_policy(Goodput())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "goodput"], "hetsim: error: workload.efficiency: missing: policy 'goodput' chooses"),
        (["--policy", "goodput", "--set", "workload.efficiency.noise_scale=0", "--set",
          "workload.efficiency.base_batch=32"], "hetsim: error: workload.efficiency.noise_scale: must be > 0, got 0"),
        (["--policy", "goodput", "--set", "workload.efficiency.noise_scale=100", "--set",
          "workload.efficiency.base_batch=32", "--set", "workload.efficiency.target_steps=-3"],
         "hetsim: error: workload.efficiency.target_steps: must be > 0, got -3"),
        (["--policy", "goodput", "--set", "workload.efficiency.noise_scale=100", "--set",
          "workload.efficiency.base_batch=32", "--set", "policy.name=goodput", "--set", "policy.min_batch=512",
          "--set", "policy.max_batch=256"], "hetsim: error: policy.max_batch: must be >= 512, got 256"),
        (["--policy", "goodput", "--set", "workload.efficiency.noise_scale=[[0, 100], [0, 200]]", "--set",
          "workload.efficiency.base_batch=32"],
         "hetsim: error: workload.efficiency.noise_scale: progress must increase: point 1 (0) is not after 0"),
    ],
)  # fmt: skip
def test_bad_goodput_input_gets_one_line_and_exit_2(args, message, capsys):
    assert main(["simulate", "paper", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_caps_that_hold_no_sample_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match="workers.max_batch"):
        Goodput().reset(
            2, 16, [WorkerHint(max_batch=0, cost=Table(points=CONCAVE))] * 2, RunHint(0.0, Efficiency(30.0, 16))
        )


def test_min_batch_beyond_the_caps_is_refused():
    raw = scenario_dict([{"count": 2, "per_sample_s": 0.001, "max_batch": 64}], global_batch=64)
    raw["workload"]["efficiency"] = {"noise_scale": 100, "base_batch": 64}
    raw["policy"] = {"name": "goodput", "min_batch": 200}
    with pytest.raises(ConfigError, match=r"^policy\.min_batch: 200 is more than the workers' caps hold \(128\)"):
        simulate(build_scenario(raw))  # the scenario's own goodput, min_batch and all


def test_simulate_leaves_goodput_out_with_a_note_without_efficiency_and_runs_it_with(capsys):
    assert main(["simulate", "paper", "--json", "--set", "workload.epochs=1"]) == 0
    out = capsys.readouterr()
    assert "goodput" not in [s["policy"] for s in json.loads(out.out)]
    assert out.err == (
        "note: goodput left out: it needs [workload.efficiency] (the gradient noise scale), which the scenario lacks\n"
    )
    efficient = ["--set", "workload.efficiency.noise_scale=512", "--set", "workload.efficiency.base_batch=128"]
    assert main(["simulate", "paper", "--json", "--set", "workload.epochs=1", *efficient]) == 0
    assert "goodput" in [s["policy"] for s in json.loads(capsys.readouterr().out)]


def test_when_failures_leave_too_little_room_it_shrinks_its_batch_at_the_epoch_end_instead_of_waiting():
    policy = Goodput(min_batch=400, max_batch=1000, batch_hysteresis=0.0)
    policy.reset(3, 900, [WorkerHint(max_batch=300)] * 3, RunHint(OVERHEAD_S, Efficiency(4000.0, 64)))
    assert feed(policy, 10)[-1] > 600  # more than two workers hold
    info = StepInfo(10, 2, 4, 5, (True, True, False))  # an epoch's last step, one worker down
    batches = policy.partition(info)  # the down worker's samples cannot move: the step waits for it
    policy.observe(StepRecord(info, batches, (0.2, 0.2, 0.3), (True, True, True)))
    assert 400 <= sum(policy.partition(info._replace(step=11, step_in_epoch=0))) <= 600  # what the two up hold


def test_without_min_batch_a_max_batch_below_the_workloads_batch_is_the_range():
    policy = Goodput(max_batch=100)
    policy.reset(3, 128, [WorkerHint()] * 3, RunHint(OVERHEAD_S, Efficiency(40.0, 64)))
    assert (policy.lowest_batch, policy.highest_batch, policy.global_batch) == (100, 100, 100)


# A worker whose time grows ever more slowly with the batch (a CPU or GPU used better by larger
# batches) and one that pays 10 ms more every step: the line fitted on small local batches
# over-predicts large ones, so only the measured curve sees that a larger batch pays.
CONCAVE = ((1, 0.0024), (4, 0.0030), (16, 0.0053), (64, 0.0079), (128, 0.0128), (256, 0.0240))
CURVES = (WorkerHint(cost=Table(points=CONCAVE)), WorkerHint(cost=Table(points=CONCAVE), delay_s=0.010))
COMM_S = 0.006


def curve_goodput(batch: int, efficiency: Efficiency, noise: float, curves=CURVES) -> float:
    return efficiency.gain(batch, noise) / (_curve_step_s(int(batch), curves) + COMM_S)


@functools.cache
def _curve_step_s(batch: int, curves: tuple[WorkerHint, ...]) -> float:
    """The exact min-max compute time on ``curves`` (cached: the tests try every batch up to 256)."""
    return slowest_expected_s(curves, min_max_split(curves, batch, [np.inf] * len(curves)))


def feed_curves(policy: Goodput, steps: int, curves=CURVES, per_epoch: int = 5) -> list[int]:
    """Run ``policy`` on workers whose times are ``curves``, deterministic."""
    return run(policy, steps, lambda i, b: curves[i].expected_s(b), per_epoch)


@pytest.mark.slow
@pytest.mark.parametrize("noise", [8.0, 30.0, 200.0])
def test_with_the_workers_curves_it_starts_at_the_best_batch_and_stays(noise):
    efficiency = Efficiency(noise, 16)
    policy = Goodput(max_batch=256)
    policy.reset(2, 16, CURVES, RunHint(COMM_S, efficiency))
    best = max(curve_goodput(b, efficiency, noise) for b in range(16, 257))
    assert curve_goodput(policy.global_batch, efficiency, noise) >= 0.99 * best  # before any step
    assert policy.partition(StepInfo(0, 0, 0, 5)) == min_max_split(CURVES, policy.global_batch, [np.inf] * 2)
    assert set(feed_curves(policy, 30)) == {policy.global_batch}


@pytest.mark.slow
def test_without_the_curves_it_creeps_up_on_lines_fitted_to_small_batches_with_them_it_starts_there():
    efficiency = Efficiency(30.0, 16)
    best = max(curve_goodput(b, efficiency, 30.0) for b in range(16, 257))
    told = Goodput(max_batch=256)
    told.reset(2, 16, CURVES, RunHint(COMM_S, efficiency))
    blind = Goodput(max_batch=256)
    blind.reset(2, 16, [WorkerHint()] * 2, RunHint(COMM_S, efficiency))
    assert min(curve_goodput(b, efficiency, 30.0) for b in feed_curves(told, 30)) >= 0.99 * best
    crept = feed_curves(blind, 30)  # epochs of 5 steps: the first at 16, the next judged by a line fitted to 16 or less
    below = [curve_goodput(b, efficiency, 30.0) < 0.95 * best for b in crept[::5]]
    assert below == [True, True, False, False, False, False]


@pytest.mark.slow
def test_a_slowdown_the_fit_has_seen_scales_the_curve_it_judges_batches_by():
    efficiency = Efficiency(30.0, 16)
    policy = Goodput(max_batch=256, batch_hysteresis=0.0)  # (the default 5% would keep a batch within 5% of the best)
    policy.reset(2, 16, CURVES, RunHint(COMM_S, efficiency))
    slowed = (replace(CURVES[0], noise_mean=3.0), CURVES[1])  # the fast worker, three times slower from now on
    batches = feed_curves(policy, 30, slowed)
    assert min(policy._batches) > 0  # both workers run, so both ratios are measured
    costs = policy.step_costs(*policy._estimates(None))
    assert costs.curves is not None
    sizes = np.arange(1, 257)
    for scaled, truth in zip(costs.curves, slowed):  # the scaled curve is the slowed one at every batch
        np.testing.assert_allclose(scaled.expected_s(sizes), truth.expected_s(sizes), rtol=0.01)
    best = max(curve_goodput(n, efficiency, 30.0, slowed) for n in range(16, 257))
    assert curve_goodput(batches[-1], efficiency, 30.0, slowed) >= 0.99 * best


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    points=st.lists(st.tuples(st.floats(0.1, 5.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0)), min_size=1, max_size=5),
    batch=st.integers(1, 400),
)
@example(points=[(1.0, 1.0, 0.0)], batch=33)
@example(points=[(1.0, 1.0, 0.0), (1.0, 0.5, 0.0), (1.0, 0.03125, 0.0)], batch=15)  # a fraction on each of three
def test_a_batchs_judged_time_on_curves_is_the_exact_min_max_within_a_sample_and_the_grid(points, batch):
    """StepCosts' tabulated balanced time against the exact integer min-max split's time."""
    curves = [
        WorkerHint(cost=Table(points=((1, a), (32, a + b), (128, a + b + c)))) for a, b, c in points
    ]  # non-decreasing tables: concave, convex or straight between their points
    caps = np.full(len(curves), np.inf)
    judged = StepCosts(np.zeros(len(curves)), np.zeros(len(curves)), caps, curves, largest=400).step_s(batch)
    split = min_max_split(curves, batch, caps)
    exact = slowest_expected_s(curves, split)
    one_sample = max(  # a sample more or less on any worker: the continuous split moves a fraction of one on each
        float(max(c.expected_s(b + 1) - c.expected_s(b), c.expected_s(b) - c.expected_s(max(b - 1, 1))))
        for c, b in zip(curves, split)
        if b > 0
    )
    # The grid keeps every table point, so the tabulated curve is the table: the continuous split
    # is no slower than the integer optimum and at most a sample's time faster. (Without the
    # points a chord across one missed it either way: the pinned example, flat after 32, read
    # 1.99 at 33 samples where the table says 2.)
    assert exact - one_sample - 1e-9 <= judged <= exact + 1e-9


@pytest.mark.slow
def test_a_worker_the_curves_leave_out_stays_out_though_it_was_never_measured():
    curves = (*CURVES[:1], CURVES[0], WorkerHint(cost=Table(points=CONCAVE), delay_s=0.05))  # the third far slower
    efficiency = Efficiency(30.0, 16)
    policy = Goodput(max_batch=256)
    policy.reset(3, 16, curves, RunHint(COMM_S, efficiency))
    splits = []
    for k in range(30):
        info = StepInfo(k, k // 5, k % 5, 5)
        b = policy.partition(info)
        splits.append(b)
        times = tuple(float(c.expected_s(n)) if n else 0.0 for c, n in zip(curves, b))
        policy.observe(StepRecord(info, tuple(b), times, (True,) * 3))
    assert splits[0][2] == 0 and all(b[2] == 0 for b in splits)  # (before, adaptive took it for an average worker)


def _expected_time_goodput(batch: int, efficiency: Efficiency, sd: float, draws: np.ndarray, step_s: float) -> float:
    """One over the Monte Carlo mean seconds per step of progress, the noise scale lognormal about
    the estimate with ``sd`` of its log (``draws``: standard normals), steps of ``step_s``."""
    per_progress = float(np.mean(1.0 / efficiency.gain(batch, efficiency.noise_scale * np.exp(sd * draws))))
    return 1.0 / (per_progress * step_s)


@pytest.mark.parametrize("sd", [0.3, 0.8, 1.5])
def test_an_uncertain_noise_scale_is_judged_by_the_expected_time_to_the_target(sd):
    # a fitted table's noise scale known to sd (of its log): each batch by one over its expected
    # seconds per step of progress over the noise scales the fit allows (Monte Carlo, 400k draws)
    efficiency = replace(Efficiency(100.0, 16), noise_scale_sd=sd)
    policy = Goodput(max_batch=256)
    policy.reset(2, 16, CURVES, RunHint(COMM_S, efficiency))
    costs = StepCosts(policy.fixed_s, policy.per_sample_s, policy.cap_array, CURVES, largest=256)
    draws = np.random.default_rng(0).standard_normal(400_000)
    for batch in (16, 64, 128, 256):
        exact = _expected_time_goodput(batch, efficiency, sd, draws, costs.step_s(batch) + COMM_S)
        assert policy.goodput(batch, costs) == pytest.approx(exact, rel=2e-3 * (1 + sd))


def test_without_its_uncertainty_or_with_a_measured_noise_scale_it_is_the_gain_at_the_estimate():
    efficiency = Efficiency(100.0, 16)
    sure, unsure = Goodput(max_batch=256), Goodput(max_batch=256)
    sure.reset(2, 16, CURVES, RunHint(COMM_S, efficiency))
    unsure.reset(2, 16, CURVES, RunHint(COMM_S, replace(efficiency, noise_scale_sd=1.0)))
    costs = StepCosts(sure.fixed_s, sure.per_sample_s, sure.cap_array, CURVES, largest=256)
    for batch in (16, 64, 256):
        assert sure.goodput(batch, costs) == float(efficiency.gain(batch, 100.0)) / (costs.step_s(batch) + COMM_S)
    # the uncertain table's choice is the smaller batch: the large one's gain rests on a large noise scale
    assert unsure.global_batch < sure.global_batch
    unsure.observe_noise_scale(100.0)  # a measured noise scale states no uncertainty: the estimate alone
    assert unsure.goodput(64, costs) == sure.goodput(64, costs)


@st.composite
def _tabulated(draw):
    """Rows of tabulated (local batch, time) points as StepCosts keeps them: times non-decreasing
    along a row (flat stretches and a row that starts where another ends included), some rows
    unable to take a sample (infinite times)."""
    rows, width = draw(st.integers(1, 5)), draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    b = np.sort(rng.uniform(1.0, 100.0, (rows, width)), axis=1)
    t = np.round(np.sort(rng.uniform(0.0, 1.0, (rows, width)), axis=1), draw(st.sampled_from([1, 2, 12])))
    t[rng.random(rows) < 0.2] = np.inf
    return b, np.maximum.accumulate(t, axis=1)


@settings(max_examples=50)
@given(_tabulated(), st.floats(0.5, 600.0))
def test_the_time_for_a_batch_is_the_least_time_the_workers_do_it_by(table, batch):
    from hetsim.policies.goodput import _samples_within, _time_for

    b, t = table
    times = np.unique(t[np.isfinite(t)])
    time_s = _time_for(b, t, times, _samples_within(b, t, times), batch)
    if times.size == 0:  # no worker can take a sample
        assert time_s == 0.0
        return
    done = _samples_within(b, t, np.array([time_s, time_s * (1 - 1e-9) - 1e-12]))
    if done[0] < batch * (1 - 1e-12):  # more than they can do: the last tabulated time
        assert time_s == times[-1] and _samples_within(b, t, times[-1:])[0] == pytest.approx(done[0])
    else:
        assert done[1] < batch  # and not a moment earlier


def test_the_time_for_a_batch_bracketed_by_two_equal_or_adjacent_times_is_the_later():
    """Rows tabulated at the same time (workers at their floors), or at two times a float apart
    (a hinge's floor summed in another order): the count jumps there, and the time is the later
    one (hypothesis found the division by their zero-width middle)."""
    from hetsim.policies.goodput import _time_for

    rows_b, rows_t = np.array([[1.0, 2.0]]), np.array([[0.02, 0.03]])
    for hi in (0.02, float(np.nextafter(0.02, 1.0))):
        assert _time_for(rows_b, rows_t, np.array([0.02, hi]), np.array([3.0, 8.0]), 5.0) == hi
