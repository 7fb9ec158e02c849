"""Statistical efficiency: the gain formula, the effective batch of each kind of step, and the
progress, goodput and time to target that summaries report."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsim.core.errors import ConfigError
from hetsim.model.efficiency import Efficiency, effective_batch, effective_batches
from hetsim.model.trace import Trace
from hetsim.policies import Async, Equal
from hetsim.run.metrics import step_times, summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario, make_efficiency


def test_the_pollux_and_mccandlish_forms_agree_on_exact_values():
    # grad_sqr 2, grad_var 6 at M0 = 32: B_noise = 32 * 6 / 2 = 96
    eff = make_efficiency({"grad_sqr": 2.0, "grad_var": 6.0, "base_batch": 32})
    assert eff.noise_scale == pytest.approx(96.0)
    assert eff.gain(64) == pytest.approx((6 + 2) / (6 / 2 + 2))  # Pollux: 1.6
    assert eff.gain(64) == pytest.approx(2 * (96 + 32) / (96 + 64))  # McCandlish's form
    assert eff.gain(32) == pytest.approx(1.0)
    assert eff.gain(0) == 0.0
    np.testing.assert_allclose(eff.gain(np.array([16.0, 128.0])), [16 / 32 * 128 / 112, 4 * 128 / 224])


@given(
    noise=st.floats(1.0, 1e5),
    m0=st.integers(1, 4096),
    b=st.floats(1.0, 1e6),
    more=st.floats(1.0, 10.0),
)
def test_gain_grows_with_the_batch_but_never_faster_than_linearly_and_saturates(noise, m0, b, more):
    eff = Efficiency(noise, m0)
    small, large = eff.gain(b), eff.gain(b * more)
    assert large >= small * (1 - 1e-12)
    assert large <= small * more * (1 + 1e-9)  # per sample, a larger batch is never worth more
    assert large <= 1 + noise / m0 + 1e-9


def test_effective_batch_of_backup_ksync_and_the_plain_mean():
    assert effective_batch((16, 16, 16, 16), (True, True, True, False), weighted=True) == 48  # K-sync, K = 3
    assert effective_batch((40, 24), (True, False), weighted=True) == 40  # backup: the cut worker's samples are gone
    assert effective_batch((10, 30), (True, True), weighted=True) == 40
    assert effective_batch((10, 30), (True, True), weighted=False) == pytest.approx(4 / (1 / 10 + 1 / 30))  # 30
    assert effective_batch((20, 20), (True, True), weighted=False) == pytest.approx(40)  # equal batches: no loss
    assert effective_batch((0, 32), (True, True), weighted=False) == 32  # a worker without samples is not averaged
    assert effective_batch((5, 7), (False, False), weighted=True) == 0.0
    per_step = effective_batches(np.array([[10, 30], [0, 32], [5, 7]]), np.array([[1, 1], [1, 1], [0, 0]]), False)
    np.testing.assert_allclose(per_step, [30.0, 32.0, 0.0])


EFFICIENT = ["workload.efficiency.noise_scale=512", "workload.efficiency.base_batch=128"]


@pytest.mark.parametrize(("policy", "weighted"), [("dynamic", False), ("dynamic-enhanced", True), ("backup", True)])
def test_progress_is_the_sum_of_the_steps_gains_and_the_target_is_met_where_it_sums_up(policy, weighted):
    scenario = load_scenario("paper", [*EFFICIENT, "workload.efficiency.target_steps=300", "workload.epochs=2"])
    trace = simulate(scenario, scenario.named_policy(policy))
    summary = summarize(trace, scenario)
    eff = scenario.workload.efficiency
    assert eff is not None
    gains = [
        eff.gain(effective_batch(b, inc, weighted))
        for b, inc in zip(trace.per_step("local_batch"), trace.per_step("included"))
    ]
    assert summary.progress == pytest.approx(sum(gains))
    samples = float((trace.local_batch * trace.included).sum())
    assert summary.statistical_efficiency == pytest.approx(sum(gains) * 128 / samples)
    assert summary.goodput_sps == pytest.approx(sum(gains) * 128 / summary.total_time_s)
    first = int(np.argmax(np.cumsum(gains) >= 300))
    assert summary.time_to_target_s == pytest.approx(float(np.cumsum(step_times(trace))[first]))


def test_plain_mean_of_uneven_batches_learns_less_than_the_weighted_combine():
    scenario = load_scenario("paper", [*EFFICIENT, "workload.epochs=3"])  # uneven splits from epoch 1
    dp, edp = (
        summarize(simulate(scenario, scenario.named_policy(p)), scenario) for p in ("dynamic", "dynamic-enhanced")
    )
    assert dp.total_time_s == pytest.approx(edp.total_time_s)  # the same splits and timing
    assert dp.progress is not None and edp.progress is not None and dp.progress < edp.progress


def test_no_efficiency_no_target_and_async_report_none():
    plain = load_scenario("paper", ["workload.epochs=1"])
    summary = summarize(simulate(plain, Equal()), plain)
    assert (summary.progress, summary.goodput_sps, summary.time_to_target_s) == (None, None, None)
    no_target = load_scenario("paper", [*EFFICIENT, "workload.epochs=1"])
    summary = summarize(simulate(no_target, Equal()), no_target)
    assert summary.progress is not None and summary.time_to_target_s is None
    far = load_scenario("paper", [*EFFICIENT, "workload.efficiency.target_steps=1e9", "workload.epochs=1"])
    assert summarize(simulate(far, Equal()), far).time_to_target_s is None  # not reached in the run


def test_efficiency_round_trips_through_the_scenario_file_form():
    scenario = load_scenario("paper", [*EFFICIENT, "workload.efficiency.target_steps=300"])
    assert load_scenario(scenario.to_dict()) == scenario


NOISE = "workload.efficiency.noise_scale"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"noise_scale": 0, "base_batch": 32}, "workload.efficiency.noise_scale: must be > 0, got 0"),
        ({"noise_scale": -5, "base_batch": 32}, "workload.efficiency.noise_scale: must be > 0, got -5"),
        ({"noise_scale": 50, "base_batch": 32, "target_steps": -1}, "workload.efficiency.target_steps: must be > 0"),
        ({"noise_scale": 50}, "workload.efficiency.base_batch: missing (required)"),
        ({"base_batch": 32}, "workload.efficiency.noise_scale: missing (required, or grad_sqr and grad_var)"),
        (
            {"noise_scale": 5, "grad_sqr": 1, "grad_var": 1, "base_batch": 32},
            "workload.efficiency.noise_scale: give noise_scale or",
        ),
        ({"grad_sqr": 1, "base_batch": 32}, "workload.efficiency.grad_var: missing"),
        ({"grad_sqr": 1, "grad_var": 0, "base_batch": 32}, "workload.efficiency.grad_var: must be > 0"),
        ({"noise_scale": 5, "base_batch": 32, "speed": 1}, "workload.efficiency.speed"),
        ({"noise_scale": [], "base_batch": 32}, f"{NOISE}: a schedule needs at least one"),
        ({"noise_scale": [[1, 50]], "base_batch": 32}, f"{NOISE}: a schedule starts at progress 0"),
        ({"noise_scale": [[0, 50], [0, 60]], "base_batch": 32}, f"{NOISE}: progress must increase"),
        ({"noise_scale": [[0, 50], [9, 0]], "base_batch": 32}, f"{NOISE}: point 1: the noise scale must be > 0, got 0"),
        ({"noise_scale": [[0, 50], [9]], "base_batch": 32}, f"{NOISE}: must be a list of [x, y]"),
        ({"noise_scale": [[0, -5]], "base_batch": 32}, f"{NOISE}: point 0 must be two non-neg"),
        ({"noise_scale": [[0, 5]], "grad_sqr": 1, "grad_var": 1, "base_batch": 32}, f"{NOISE}: give noise_scale or"),
    ],
)
def test_bad_efficiency_tables_name_the_field(table, message):
    with pytest.raises(ConfigError) as err:
        make_efficiency(table)
    assert str(err.value).startswith(message)


SCHEDULE = "workload.efficiency.noise_scale=[[0, 64], [1000, 256], [2500, 1024]]"


def test_a_schedule_interpolates_over_progress_and_holds_beyond_its_last_point():
    eff = make_efficiency({"noise_scale": [[0, 64], [100, 256], [300, 1024]], "base_batch": 32})
    assert eff.noise_scale == 64
    assert [eff.noise_at(p) for p in (0, 50, 100, 200, 300, 5000)] == [64, 160, 256, 640, 1024, 1024]
    assert eff.gain(128, eff.noise_at(200)) == pytest.approx(4 * (640 + 32) / (640 + 128))
    assert make_efficiency(eff.to_dict()) == eff


@given(batches=st.lists(st.floats(0.0, 4096.0), min_size=1, max_size=60), stale=st.booleans())
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_progress_under_a_schedule_is_the_recurrence_at_the_noise_of_the_progress_before(batches, stale):
    eff = Efficiency(64.0, 32, None, ((0.0, 64.0), (20.0, 512.0), (50.0, 2048.0)))
    discount = np.linspace(1.0, 0.2, len(batches)) if stale else None
    done, expected = 0.0, []
    for k, b in enumerate(batches):
        done += (1.0 if discount is None else discount[k]) * eff.gain(b, eff.noise_at(done))
        expected.append(done)
    np.testing.assert_allclose(eff.progress(np.array(batches), discount), expected, rtol=1e-12)


@pytest.mark.parametrize(
    ("policy", "noise"), [("equal", []), ("optimal", []), ("proportional", []), ("equal", [SCHEDULE])]
)
def test_analyze_predicts_time_to_target_within_three_ci_half_widths_of_simulation(policy, noise):
    from hetsim.analysis.analytic import predict
    from hetsim.run.metrics import mean_ci

    scenario = load_scenario("paper", [*EFFICIENT, "workload.efficiency.target_steps=3000", *noise])
    predicted = predict(scenario, scenario.named_policy(policy))
    runs = [summarize(simulate(scenario, scenario.named_policy(policy), seed=seed), scenario) for seed in range(10)]
    measured = [r.time_to_target_s for r in runs]
    assert None not in measured and predicted.time_to_target_s is not None
    ci = mean_ci([float(t) for t in measured if t is not None])
    assert abs(predicted.time_to_target_s - ci.mean) <= 3 * ci.half_width + 1e-9
    assert predicted.progress == pytest.approx(runs[0].progress, rel=1e-3)


@pytest.mark.parametrize("policy", ["dynamic", "dynamic-enhanced"])
def test_analyze_time_to_target_of_resplitting_policies_is_close(policy):
    """Their simulated splits follow noisy epoch means, the analysis's the expected ones: a
    sample moved now and then, a few tenths of a second in 20 minutes."""
    from hetsim.analysis.analytic import predict

    scenario = load_scenario("paper", [*EFFICIENT, "workload.efficiency.target_steps=3000"])
    predicted = predict(scenario, scenario.named_policy(policy)).time_to_target_s
    measured = [
        summarize(simulate(scenario, scenario.named_policy(policy), seed=seed), scenario).time_to_target_s
        for seed in range(5)
    ]
    assert predicted is not None and None not in measured
    assert predicted == pytest.approx(float(np.mean([float(m) for m in measured if m is not None])), rel=1e-3)


@pytest.mark.slow
def test_sweep_ranks_by_time_to_target_when_asked(tmp_path, capsys):
    import pandas as pd
    import tomli_w

    from hetsim.cli.main import main
    from tests.test_sweep import only_run, sweep_dict

    raw = sweep_dict(replications=2)
    raw["base"]["workload"]["efficiency"] = {"noise_scale": 256, "base_batch": 64, "target_steps": 40}
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(raw))
    runs = tmp_path / "runs"
    assert main(["sweep", str(path), "--jobs", "1", "--runs", str(runs), "--metric", "time_to_target"]) == 0
    assert "time to target of equal / time to target of the policy" in capsys.readouterr().out
    folder = only_run(runs)
    results = pd.read_parquet(folder / "results.parquet")
    summary = pd.read_csv(folder / "summary.csv")
    row = summary[summary["policy"] == "dynamic"].iloc[-1]
    cell = results[results["cell"] == row["cell"]]
    same_point = (results["workers.1.per_sample_s"] == row["workers.1.per_sample_s"]) & (results["size"] == row["size"])
    equal = results[(results["policy"] == "equal") & same_point]
    expected = (equal.sort_values("replication")["time_to_target_s"].to_numpy()
                / cell.sort_values("replication")["time_to_target_s"].to_numpy()).mean()  # fmt: skip
    assert row["speedup_vs_equal"] == pytest.approx(expected)
    assert set(summary["speedup_by"]) == set(results["speedup_by"]) == {"time_to_target"}  # the files say which
    assert main(["report", str(folder)]) == 0  # re-rendered by throughput
    assert "throughput of the policy / throughput of equal" in capsys.readouterr().out
    assert set(pd.read_csv(folder / "summary.csv")["speedup_by"]) == {"throughput"}


def test_time_to_target_metric_without_a_target_is_refused_before_running(tmp_path, capsys):
    import tomli_w

    from hetsim.cli.main import main
    from tests.test_sweep import sweep_dict

    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(sweep_dict()))
    assert (
        main(["sweep", str(path), "--jobs", "1", "--runs", str(tmp_path / "runs"), "--metric", "time_to_target"]) == 2
    )
    err = capsys.readouterr().err
    assert err.strip() == (
        "hetsim: error: --metric: time_to_target needs [workload.efficiency] with target_steps in the sweep's scenario"
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_async_updates_are_discounted_by_their_staleness():
    from hetsim.run.metrics import staleness

    scenario = load_scenario("paper", [*EFFICIENT, "workload.epochs=1"])
    trace: Trace = simulate(scenario, Async())
    summary = summarize(trace, scenario)
    eff = scenario.workload.efficiency
    assert eff is not None
    tau = staleness(trace)
    expected = sum(eff.gain(float(b)) / max(1, t) for b, t in zip(trace.local_batch * trace.included, tau))
    assert summary.progress == pytest.approx(expected)
    assert tau.max() >= 2  # four workers: most updates are stale, and count for less
    assert summary.progress < sum(eff.gain(float(b)) for b in trace.local_batch)
