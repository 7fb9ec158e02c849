"""Calibration: recovering a known scenario from its simulated trace, fit warnings, input checks."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from hetsim.calibrate import calibrate, fit_network, fit_worker
from hetsim.cli.calibrate import fit_table
from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.model.network import ConstantNetwork, Ring
from hetsim.model.trace import check_trace_table, read_trace_table
from hetsim.policies import Dynamic, Equal
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict

KNOWN = [
    {"name": "a", "overhead_s": 0.010, "per_sample_s": 0.0010, "noise": {"dist": "lognormal", "sigma": 0.1}},
    {"name": "b", "overhead_s": 0.004, "per_sample_s": 0.0025, "noise": {"dist": "lognormal", "sigma": 0.1}},
    {"name": "c", "overhead_s": 0.020, "per_sample_s": 0.0005, "noise": {"dist": "lognormal", "sigma": 0.1}},
]


@pytest.fixture(scope="module")
def known_run():
    # dynamic with one-step epochs: the split follows every step's noisy times, so each worker
    # is seen at a few dozen batch sizes and overhead and per-sample cost are identifiable
    raw = scenario_dict(
        KNOWN, global_batch=120, steps_per_epoch=1, epochs=20_000, seed=3, network={"kind": "constant", "time_s": 0.002}
    )
    raw["policy"] = {"name": "dynamic"}
    scenario = load_scenario(raw)
    return scenario, simulate(scenario)


def test_calibration_recovers_every_worker_and_the_mean_step_time(known_run):
    scenario, trace = known_run
    cal = calibrate(trace)
    assert cal.warnings == ()
    assert [f.worker for f in cal.workers] == [0, 1, 2]
    for fit, truth in zip(cal.workers, KNOWN):
        assert fit.batch_sizes >= 10
        for term in ("overhead_s", "per_sample_s"):  # within 3 of the fit's own standard errors, which are small
            se = fit.se[term]
            assert se is not None and se < 0.1 * truth[term]
            assert abs(getattr(fit, term) - truth[term]) < 3 * se, term
        assert fit.noise_sigma == pytest.approx(0.1, rel=0.05)
        assert fit.residual_cv == pytest.approx(0.1, rel=0.1)
        assert 0.0 < fit.r2 < 1.0
    assert isinstance(cal.network, ConstantNetwork) and cal.network.time_s == pytest.approx(0.002)
    assert (cal.global_batch, cal.steps_per_epoch, cal.epochs) == (120, 1, 20_000)

    rebuilt = load_scenario(cal.scenario)
    assert [g.count for g in rebuilt.groups] == [1, 1, 1]
    assert rebuilt.workload.total_steps == scenario.workload.total_steps
    assert rebuilt.policy.name == "dynamic"
    original = summarize(trace).mean_step_s
    again = summarize(simulate(rebuilt, seed=99)).mean_step_s
    assert again == pytest.approx(original, rel=0.02)


def test_workload_from_a_trace_with_epochs():
    raw = scenario_dict(KNOWN[:2], global_batch=64, steps_per_epoch=7, epochs=3)
    cal = calibrate(simulate(load_scenario(raw), Dynamic()))
    assert (cal.global_batch, cal.steps_per_epoch, cal.epochs) == (64, 7, 3)
    assert cal.scenario["workload"]["dataset_size"] == 64 * 7
    assert load_scenario(cal.scenario).workload.steps_per_epoch == 7


def test_one_batch_size_gives_one_warning_and_a_per_sample_fit():
    raw = scenario_dict(KNOWN[:2], global_batch=64, steps_per_epoch=50, epochs=2)
    trace = simulate(load_scenario(raw), Equal())
    cal = calibrate(trace)
    assert len(cal.warnings) == 2  # one line per worker
    assert all("\n" not in w and "one batch size (32)" in w for w in cal.warnings)
    compute = trace.per_step("compute_s")
    for fit, column in zip(cal.workers, compute.T):
        assert fit.overhead_s == 0.0
        assert fit.per_sample_s == pytest.approx(column.mean() / 32)  # least squares: the mean time
        assert fit.noise_sigma == pytest.approx(np.log(column / column.mean()).std(ddof=1))
        assert np.isnan(fit.r2)
    assert load_scenario(cal.scenario).n_workers == 2


def test_fit_worker_exact_line_and_workers_that_sat_out():
    b = np.array([0, 10, 20, 30, 40])
    y = np.where(b > 0, 0.01 + 0.002 * b, 0.0)
    fit, warnings = fit_worker(0, b, y)
    assert warnings == []
    assert fit.overhead_s == pytest.approx(0.01) and fit.per_sample_s == pytest.approx(0.002)
    assert fit.r2 == pytest.approx(1.0) and fit.noise_sigma == pytest.approx(0.0, abs=1e-12)
    assert fit.rows == 4
    with pytest.raises(ConfigError, match="never got samples"):
        fit_worker(3, np.zeros(4), np.zeros(4))


def test_negative_intercept_falls_back_to_per_sample_with_a_warning():
    b = np.array([10, 20, 30])
    fit, warnings = fit_worker(1, b, 0.003 * b - 0.005)
    assert len(warnings) == 1 and "per-sample cost alone" in warnings[0]
    assert fit.overhead_s == 0.0 and fit.per_sample_s > 0


def test_network_constant_and_ring_alpha_beta():
    fit, notes = fit_network(np.full(5, 0.01), np.full(5, 4), np.full(5, 25.0))
    assert isinstance(fit, ConstantNetwork) and fit.time_s == pytest.approx(0.01) and notes == []
    ring = Ring(latency_s=3e-5, bandwidth_gbps=40.0)
    n = np.array([2, 4, 8, 2, 4, 8])
    mb = np.array([10.0, 10.0, 10.0, 100.0, 100.0, 100.0])
    comm = np.array([ring.allreduce_s(int(k), float(m)) for k, m in zip(n, mb)])
    fit, notes = fit_network(comm, n, mb)
    assert isinstance(fit, Ring) and notes == [] and fit.latency_s == pytest.approx(3e-5, rel=1e-6)
    assert fit.to_dict() == {"kind": "ring", "latency_s": fit.latency_s, "bandwidth_gbps": pytest.approx(40.0, 1e-6)}
    assert fit_network(np.zeros(3), np.ones(3), np.zeros(3))[0].to_dict() == {"kind": "constant", "time_s": 0.0}


def test_ring_network_from_a_table_with_gradient_sizes():
    rows = []
    ring = Ring(latency_s=1e-5, bandwidth_gbps=10.0)
    for step, mb in enumerate([5.0, 50.0, 5.0, 50.0]):
        for w in range(3):
            rows.append(
                {
                    "step": step,
                    "worker": w,
                    "local_batch": 10 + step + w,
                    "compute_s": 0.01 + 0.001 * (10 + step + w),
                    "comm_s": ring.allreduce_s(3, mb),
                    "gradient_mb": mb,
                }
            )
    cal = calibrate(pd.DataFrame(rows))
    assert isinstance(cal.network, Ring) and cal.network.bandwidth_gbps == pytest.approx(10.0, rel=1e-6)
    assert load_scenario(cal.scenario).network.allreduce_s(3, 50.0) == pytest.approx(ring.allreduce_s(3, 50.0))
    assert "\nnetwork: ring, latency 0.01 ms, bandwidth 10 Gbit/s (an" in fit_table(cal)  # its parameters, units


def test_minimal_table_without_step_epoch_or_comm():
    frame = pd.DataFrame(
        {
            "worker": [0, 1, 0, 1, 0, 1],
            "local_batch": [10, 6, 12, 4, 8, 8],
            "compute_s": [0.02, 0.012, 0.022, 0.008, 0.018, 0.016],
        }
    )
    cal = calibrate(frame)
    assert cal.global_batch == 16 and cal.steps_per_epoch == 3 and cal.epochs == 1
    assert any("no comm_s" in w for w in cal.warnings)
    assert cal.workers[0].per_sample_s == pytest.approx(0.001)
    assert cal.workers[0].overhead_s == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("frame", "column", "problem"),
    [
        ({"worker": [0], "compute_s": [0.1]}, "local_batch", "missing column"),
        ({"worker": [0, 1], "local_batch": [4, "x"], "compute_s": [0.1, 0.1]}, "local_batch", "non-numeric"),
        ({"worker": [0], "local_batch": [4], "compute_s": ["fast"]}, "compute_s", "non-numeric"),
        ({"worker": [0], "local_batch": [4.5], "compute_s": [0.1]}, "local_batch", "non-integer"),
        ({"worker": [0], "local_batch": [4], "compute_s": [-0.1]}, "compute_s", "negative"),
        ({"worker": [0], "local_batch": [4], "compute_s": [0.1], "comm_s": [None]}, "comm_s", "non-numeric"),
    ],
)
def test_bad_tables_name_the_column(frame, column, problem):
    with pytest.raises(ConfigError) as info:
        check_trace_table(pd.DataFrame(frame))
    assert info.value.field == column and problem in info.value.problem


def test_read_trace_table_csv_parquet_and_missing(tmp_path):
    frame = pd.DataFrame({"worker": [0, 0], "local_batch": [4, 8], "compute_s": [0.1, 0.2]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    for name in ("t.csv", "t.parquet"):
        assert read_trace_table(tmp_path / name)["local_batch"].tolist() == [4, 8]
    with pytest.raises(ConfigError, match="no such file"):
        read_trace_table(tmp_path / "nope.csv")


# ----------------------------------------------------------------------------- standard errors


def test_affine_costs_recovered_within_three_standard_errors(known_run):
    _, trace = known_run
    cal = calibrate(trace)
    for fit, truth in zip(cal.workers, KNOWN):
        assert fit.model == "affine"
        for key in ("overhead_s", "per_sample_s"):
            se = fit.se[key]
            assert se is not None and 0 < se < 0.1 * truth[key]
            assert abs(getattr(fit, key) - truth[key]) <= 3 * se, (fit.worker, key)


def test_affine_winner_writes_the_plain_keys_of_the_maximum_likelihood_line(known_run):
    """Where affine wins, the scenario entry is the maximum-likelihood line in the
    overhead_s/per_sample_s keys; least squares over the same rows (unbiased too, but blind to
    the spread growing with the batch) lands within two of its standard errors."""
    _, trace = known_run
    cal = calibrate(trace)
    frame = trace.to_frame()
    for entry, fit in zip(cal.scenario["workers"], cal.workers):
        rows = frame[(frame["worker"] == fit.worker) & (frame["local_batch"] > 0)]
        line = stats.linregress(rows["local_batch"], rows["compute_s"])
        assert set(entry) == {"name", "count", "overhead_s", "per_sample_s", "noise"}
        assert (entry["overhead_s"], entry["per_sample_s"]) == (fit.overhead_s, fit.per_sample_s)
        assert abs(line.intercept - fit.overhead_s) < 2 * fit.se["overhead_s"]
        assert abs(line.slope - fit.per_sample_s) < 2 * fit.se["per_sample_s"]


# ----------------------------------------------------------------------------- one policy at a time


def _two_policies():
    raw = scenario_dict(KNOWN[:2], global_batch=240, steps_per_epoch=10, epochs=4)
    scenario = load_scenario(raw)
    return pd.concat([simulate(scenario, p).to_frame() for p in (Equal(), Dynamic())], ignore_index=True)


def test_a_trace_of_two_policies_is_fitted_one_policy_at_a_time():
    frame = _two_policies()
    with pytest.raises(ConfigError) as info:
        calibrate(frame)
    assert info.value.field == "policy" and "equal, dynamic" in info.value.problem
    for policy in ("equal", "dynamic"):
        cal = calibrate(frame, policy=policy)
        assert (cal.global_batch, cal.steps_per_epoch, cal.epochs) == (240, 10, 4)
        assert cal.policy == policy and cal.scenario["policy"] == {"name": policy}
        assert [f.rows for f in cal.workers] == [40, 40]
    with pytest.raises(ConfigError, match="no rows of 'ksync'"):
        calibrate(frame, policy="ksync")


def test_runs_that_cannot_be_told_apart_are_refused():
    frame = _two_policies()
    with pytest.raises(ConfigError) as info:
        calibrate(frame.drop(columns=["policy"]))
    assert info.value.field == "trace" and "step 0 of worker 0 appears twice" in info.value.problem
    frame["policy"] = "equal"
    with pytest.raises(ConfigError) as info:
        calibrate(frame)
    assert info.value.field == "step"
    with pytest.raises(ConfigError, match="no policy column"):
        calibrate(frame.drop(columns=["policy"]).drop_duplicates(["step", "worker"]), policy="equal")


def test_policies_pooled_on_purpose_keep_their_steps_apart():
    frame = _two_policies()
    frame.loc[frame["policy"] == "dynamic", "step"] += 1000
    cal = calibrate(frame)
    assert cal.policy is None and cal.global_batch == 240
    assert any("pooled the rows of 2 policies" in w for w in cal.warnings)


# ----------------------------------------------------------------------------- cut at the barrier

SLOW = 1.3  # the last of four workers: cut at the barrier in nine steps of ten
FAILED_ROWS = (
    "trace: 100 rows of failed workers (up = false; worker 1) left out of the fits (the written scenario "
    "has no failures)"
)


def _backup_trace(slow: float, seed: int = 0):
    workers = [{"overhead_s": 0.01, "per_sample_s": 0.001, "noise": {"dist": "lognormal", "sigma": 0.1}}] * 3
    workers = [*workers, {"overhead_s": 0.01 * slow, "per_sample_s": 0.001 * slow, "noise": workers[0]["noise"]}]
    raw = scenario_dict(workers, global_batch=128, steps_per_epoch=100, epochs=20, seed=seed)
    raw["policy"] = {"name": "backup"}
    return simulate(load_scenario(raw)).to_frame()


def test_a_backup_trace_recovers_the_slow_workers_cost_within_its_standard_error():
    frame = _backup_trace(SLOW)
    cal = calibrate(frame)
    slow = cal.workers[3]
    truth = (0.01 + 0.001 * 32) * SLOW / 32  # one batch size: the per-sample cost alone
    rows = frame[frame["worker"] == 3]
    assert slow.cancelled == int((~rows["included"]).sum()) > 0.8 * len(rows)
    assert slow.rows == int(rows["included"].sum())
    assert abs(slow.per_sample_s - truth) <= 3 * slow.se["per_sample_s"]
    # sigma's standard error from the complete rows alone is 0.1 / sqrt(2 rows); the cut ones add to that
    assert abs(slow.noise_sigma - 0.1) < 3 * 0.1 / np.sqrt(2 * slow.rows)
    assert any("cut at the barrier" in w and "censored" in w for w in cal.warnings)
    # what the cut rows would have given as complete ones, or the complete rows alone: far off
    as_complete = rows["compute_s"].mean() / 32
    lucky_only = rows.loc[rows["included"], "compute_s"].mean() / 32
    for wrong in (as_complete, lucky_only):
        assert truth - wrong > 10 * slow.se["per_sample_s"]


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_a_worker_whose_every_compute_was_cut_is_kept_at_a_lower_bound():
    frame = _backup_trace(2.0)
    cal = calibrate(frame)
    assert [f.worker for f in cal.workers] == [0, 1, 2]
    (idle,) = cal.idle
    cut = frame.loc[frame["worker"] == 3, "compute_s"]
    assert (idle.worker, idle.batch, idle.offered_rows) == (3, 32, len(cut))
    assert idle.time_s == pytest.approx(cut.median())
    assert idle.time_s < (0.01 + 0.001 * 32) * 2.0  # a lower bound indeed: the truth is above it
    assert any("worker 3: not fitted" in w and "lower bound" in w for w in cal.warnings)
    entry = load_scenario(cal.scenario).workers[3]
    assert entry.cost.time_s(32) == pytest.approx(idle.time_s, rel=1e-6)


def test_included_read_from_text_and_numbers():
    frame = pd.DataFrame({"worker": [0, 0, 0, 0], "local_batch": [4, 8, 12, 8], "compute_s": [0.1, 0.2, 0.3, 0.15]})
    plain = calibrate(frame.iloc[:3])
    for column in (["true", "True", "1", "false"], [1, 1, 1, 0]):
        assert calibrate(frame.assign(included=column)).workers[0].rows == 3
    assert plain.workers[0].per_sample_s == pytest.approx(0.025)
    with pytest.raises(ConfigError) as info:
        calibrate(frame.assign(included=["yes", "no", "yes", "no"]))
    assert info.value.field == "included" and "'yes'" in info.value.problem


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_rows_of_a_failed_worker_are_left_out_of_its_fit():
    """A worker that is down (``up`` false) computes nothing: its zero-time rows, cut at the
    barrier, tell nothing of its cost. They are left out, said so, and the fit is that of the
    trace without them (before, they entered the censored likelihood as log 0)."""
    frame = _backup_trace(SLOW)
    down = (frame["worker"] == 1) & frame["step"].between(500, 599)
    failed = frame.assign(up=~down, compute_s=frame["compute_s"].where(~down, 0.0),
                          included=frame["included"] & ~down)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no log-of-zero RuntimeWarning
        cal = calibrate(failed)
    alone = calibrate(frame.loc[~down])
    assert cal.workers[1].per_sample_s == alone.workers[1].per_sample_s
    assert cal.workers[1].se["per_sample_s"] == pytest.approx(alone.workers[1].se["per_sample_s"])
    assert cal.global_batch == 128 and cal.steps_per_epoch == 100
    assert FAILED_ROWS in cal.warnings


def test_an_asynchronous_trace_gives_the_scenario_that_reproduces_it():
    """Under async a row is one worker's update: the global batch is the workers' local batches
    summed, an epoch's steps its updates over the workers, and the network one update's exchange
    (before: the global batch was one worker's, and no exchange was fitted)."""
    workers = [{"overhead_s": 0.004, "per_sample_s": 0.0002 * k, "noise": {"dist": "lognormal", "sigma": 0.1}}
               for k in (1, 2, 3)]  # fmt: skip
    raw = scenario_dict(workers, global_batch=96, steps_per_epoch=50, epochs=4, seed=2,
                        network={"kind": "constant", "time_s": 0.003})  # fmt: skip
    raw["policy"] = {"name": "async"}
    scenario = load_scenario(raw)
    trace = simulate(scenario)
    cal = calibrate(trace)
    assert (cal.global_batch, cal.steps_per_epoch, cal.epochs) == (96, 50, 4)
    assert isinstance(cal.network, ConstantNetwork) and cal.network.time_s == pytest.approx(0.003)
    assert (cal.noise.shared, cal.noise.shared_sigma, cal.noise.shared_steps) == (None, None, 0)  # not 0.5 from none
    again = simulate(load_scenario(cal.scenario))
    assert len(again.step) == len(trace.step)
    assert again.to_frame()["start_s"].max() == pytest.approx(trace.to_frame()["start_s"].max(), rel=0.03)


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_an_up_column_of_text_is_read_strictly():
    """``up`` as text (a CSV): false rows are a failed worker's, and a value that is neither is
    refused in one line (before, any non-empty text was up)."""
    frame = _backup_trace(SLOW)
    down = (frame["worker"] == 1) & frame["step"].between(500, 599)
    text = frame.assign(up=np.where(down, "False", "true"), compute_s=frame["compute_s"].where(~down, 0.0),
                        included=frame["included"] & ~down)  # fmt: skip
    assert FAILED_ROWS in calibrate(text).warnings
    with pytest.raises(ConfigError, match=r"^up: not true or false: 'no' in data row 1$"):
        calibrate(text.assign(up="no"))


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_a_split_that_changes_under_persistent_noise_is_warned_of_unless_it_was_scheduled(tmp_path, capsys):
    """Persistent noise (AR(1), phi 0.9) while the batch changes every step: a split that reacts
    to the times would make the batch follow the noise, so calibrate warns; a probe's rounds
    follow a schedule set before the run (``scheduled_split``), so validation's compare and the
    trainer's probe fit say nothing of it (a review read the advice on a probe's calibration)."""
    rng = np.random.default_rng(7)
    steps, batches = 600, np.array([16, 48, 80])
    rows = []
    for w in range(2):
        e = 0.0
        for k in range(steps):
            e = 0.9 * e + rng.normal(0, 0.05)
            b = int(batches[(k + w) % 3])
            rows.append({"step": k, "worker": w, "local_batch": b, "compute_s": (0.002 + 0.0001 * b) * np.exp(e)})
    frame = pd.DataFrame(rows)
    reacting = [w for w in calibrate(frame).warnings if "its noise persists" in w]
    assert len(reacting) == 2 and reacting[0].startswith("worker 0: its noise persists (lag-1 0.")
    assert not [w for w in calibrate(frame, scheduled_split=True).warnings if "its noise persists" in w]
    path = tmp_path / "probe.csv"
    frame.to_csv(path, index=False)
    for flag, said in (([], 2), (["--scheduled-split"], 0)):  # the command line's switch
        assert main(["calibrate", str(path), *flag]) == 0
        assert capsys.readouterr().err.count("its noise persists") == said
