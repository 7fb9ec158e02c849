"""The steps to the target an efficiency fit predicts, with its intervals: the fitted parameters'
(:meth:`hetsim.model.efficiency_fit.Fit.predict`) and a single run's, the runs' scatter added,
as ``hetsim calibrate-efficiency`` prints them above its table."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hetsim.calibrate.efficiency_runs import fitted_model, load_sweeps
from hetsim.cli.main import main
from hetsim.model.efficiency_fit import fit, steps_interval
from hetsim.scenario.config import make_efficiency
from tests.refusals import check_refused

STEPS = [100.0, 120.0, 140.0, 90.0, 150.0]  # five seeds' steps at the base batch 16


T_4 = 2.7764451051977987  # Student's t, 97.5% quantile, 4 degrees of freedom (five runs, one parameter)
Z = 1.959963984540054  # the normal's: a table without the fit's degrees of freedom


def _one_batch_exact() -> tuple[float, float, float]:
    """At one batch the fit is the mean of ln steps: its centre, the standard error of that mean
    and the sample sd of ln steps (the runs' scatter), in closed form."""
    logs = np.log(STEPS)
    sd = float(np.std(logs, ddof=1))
    return float(np.exp(logs.mean())), sd / math.sqrt(len(STEPS)), sd


@pytest.mark.slow  # the fit's first SciPy import: out of make test-fast
def test_one_batch_intervals_are_the_mean_of_ln_steps_and_one_runs_scatter() -> None:
    centre, se, scatter = _one_batch_exact()
    f = fit([16.0] * len(STEPS), STEPS, 16, noise_scale=40.0)
    got, low, high = f.predict(16)
    assert got == pytest.approx(centre, rel=1e-9)
    assert f.efficiency.run_dof == 4  # the mean's t interval, and one run's (the t prediction interval)
    assert (low, high) == pytest.approx((centre * math.exp(-T_4 * se), centre * math.exp(T_4 * se)), rel=1e-5)
    _, run_low, run_high = f.predict(16, one_run=True)
    wide = T_4 * math.hypot(se, scatter)
    assert (run_low, run_high) == pytest.approx((centre * math.exp(-wide), centre * math.exp(wide)), rel=1e-5)


def test_without_a_residual_degree_of_freedom_neither_interval_is_known() -> None:
    """One run at each of two batches fixes two parameters exactly: no scatter is measured."""
    f = fit([16.0, 32.0], [100.0, 70.0], 16, noise_scale=40.0)
    centre, low, high = f.predict(64, one_run=True)
    assert centre > 0 and math.isnan(low) and math.isnan(high)


def _sweep(folder: Path, steps: dict[int, list[float | None]]) -> Path:
    """A batch-sweep folder of these runs' steps (None: stopped at 60 steps, before the target)."""
    points = [{"batch": b, "seed": s, "steps_to_target": v, "noise_scale": 40.0, "noise_first": 30.0,
               "noise_shape": [[0.0, 1.0]], **({} if v else {"steps_run": 60})}
              for b, runs in steps.items() for s, v in enumerate(runs)]  # fmt: skip
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"workload": "w", "base_batch": 16, "lr_scaling": "sqrt",
                                                     "target_accuracy": 0.9, "points": points}))  # fmt: skip
    return folder


@pytest.mark.slow
def test_calibrate_efficiency_prints_each_fitted_batch_and_twice_the_largest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    centre, se, scatter = _one_batch_exact()
    assert main(["calibrate-efficiency", str(_sweep(tmp_path / "one", {16: STEPS}))]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#   batch ")]
    fit_band = [centre * math.exp(k * T_4 * se) for k in (-1, 1)]
    run_band = [centre * math.exp(k * T_4 * math.hypot(se, scatter)) for k in (-1, 1)]
    assert lines[0] == (f"#   batch 16: {centre:.0f} ({fit_band[0]:.0f}-{fit_band[1]:.0f}; "
                        f"one run {run_band[0]:.0f}-{run_band[1]:.0f})")  # fmt: skip
    assert len(lines) == 2 and lines[1].startswith("#   batch 32: ") and lines[1].endswith("beyond the batches fitted")
    assert main(["calibrate-efficiency", str(_sweep(tmp_path / "two", {16: [100.0], 64: [50.0]}))]) == 0
    out, err = capsys.readouterr()
    assert err == ("warning: 2 parameters fitted to as many runs: no scatter is measured, so neither this table nor "
                   "plan gives the steps an interval; run more seeds\n")  # fmt: skip
    lines = [line for line in out.splitlines() if line.startswith("#   batch ")]
    assert lines[:2] == ["#   batch 16: 100", "#   batch 64: 50"]  # no scatter measured: no interval
    assert len(lines) == 3 and lines[2].startswith("#   batch 128: ") and "(" not in lines[2]
    cut = {16: [100.0, 120.0], 32: [70.0, 80.0], 64: [None, None]}  # every run at 64 stopped: not a batch fitted
    assert main(["calibrate-efficiency", str(_sweep(tmp_path / "cut", cut))]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("#   batch ")]
    assert [line.split(":")[0] for line in lines] == ["#   batch 16", "#   batch 32", "#   batch 64"]
    assert lines[2].endswith(", beyond the batches fitted") and "fit_batches = [\n    16.0,\n    32.0,\n]" in out


@pytest.mark.slow
def test_the_table_written_carries_the_fits_intervals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """calibrate-efficiency's table holds the fit's covariance and the runs' scatter, so a plan
    reading the file predicts the same intervals as the fit, at a batch fitted and beyond."""
    import tomllib

    rng = np.random.default_rng(np.random.SeedSequence(6).spawn(1)[0])
    steps = {b: [400.0 * (1 + 100.0 / b) / 7.25 * float(np.exp(rng.normal(0, 0.15))) for _ in range(4)]
             for b in (16, 32, 64)}  # fmt: skip
    out = tmp_path / "eff.toml"
    assert main(["calibrate-efficiency", str(_sweep(tmp_path / "s", steps)), "--no-exponent", "-o", str(out)]) == 0
    capsys.readouterr()
    table = make_efficiency(tomllib.loads(out.read_text())["workload"]["efficiency"])
    fitted = fitted_model(load_sweeps([tmp_path / "s"]), None, exponent=False)
    assert table.fitted == ("target_steps", "noise_scale") and table.run_sd == pytest.approx(fitted.residual_sd)
    assert table.measured_on == "w"  # the sweep's workload: plan names it beside the times it reads off the table
    for batch in (16, 48, 256):
        for one_run in (False, True):
            assert steps_interval(table, batch, one_run=one_run) == pytest.approx(
                fitted.predict(batch, one_run=one_run), rel=1e-9
            )


@pytest.mark.parametrize(
    ("sets", "line"),
    [
        (["target_steps_sd=0.1", "covariance=[[0.01,0],[0,0.04]]"],
         "covariance: must be 1 x 1, one row per fitted parameter with an *_sd (ln target_steps, ln noise_scale, "
         "batch_exponent), got 2 x 2"),
        (["target_steps_sd=0.1", "noise_scale_sd=0.2", "covariance=[[0.01,0.01],[0.0,0.04]]"],
         "covariance: must be symmetric"),
        (["target_steps_sd=0.1", "covariance=[[0.02]]"],
         "covariance: its diagonal must be the *_sd fields squared (0.01), got (0.02)"),
        (["target_steps_sd=0.1", "noise_scale_sd=0.2", "covariance=[[0.01,0.03],[0.03,0.04]]"],
         "covariance: must be positive semi-definite (a correlation beyond -1 or 1)"),
        (["target_steps_sd=0.1", "covariance=[[0.01,0.0]]"],
         "covariance: must be a square list of rows of numbers, got a list"),
        (["run_sd=-1"], "run_sd: must be in [0, 50], got -1"),
        (["run_dof=0"], "run_dof: must be in [1, 1099511627776], got 0"),
        ([f"run_sd=1{'0' * 400}"], "run_sd: must be finite, got an integer of about 400 digits"),  # was a traceback
        (["target_steps_sd=0.1", f"covariance=[[1{'0' * 400}]]"],
         "covariance: row 0 must be finite numbers, got [an integer of about 400 digits]"),
        (["run_dof=2.5"], "run_dof: must be an integer, got float (2.5)"),
        (["covariance=[[0.01]]"], "covariance: is of the fitted parameters' standard errors, and none is given "
         "(target_steps_sd, noise_scale_sd, batch_exponent_sd)"),
    ],
)  # fmt: skip
def test_a_bad_covariance_is_refused_in_one_line(
    sets: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["show", "paper", *(a for s in ["noise_scale=100", "base_batch=32", "target_steps=200", *sets]
                      for a in ("--set", f"workload.efficiency.{s}"))]  # fmt: skip
    check_refused(main, argv, f"workload.efficiency.{line}", tmp_path, capsys)


@pytest.mark.slow
def test_plan_gives_the_time_to_targets_interval_from_the_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """With only the target steps fitted, ln S moves one for one with ln target_steps at every
    batch: the interval is the time times exp(+-1.96 sd), and one run's adds run_sd in quadrature;
    with the fit's degrees of freedom, t's quantile. A table without the fit's covariance has none."""

    def plan(*sets: str) -> list[str]:
        given = ["noise_scale=300", "base_batch=64", "target_steps=500", "target_steps_sd=0.1", *sets]
        return ["plan", "paper", "--policy", "equal,optimal", "--objective", "time_to_target",
                *(a for s in given for a in ("--set", f"workload.efficiency.{s}"))]  # fmt: skip

    assert main([*plan("covariance=[[0.01]]", "run_sd=0.2"), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["recommended"]
    t, got = rec["time_to_target_s"], rec["time_to_target_interval_s"]
    wide = Z * math.hypot(0.1, 0.2)
    assert got == pytest.approx({"low": t * math.exp(-0.1 * Z), "high": t * math.exp(0.1 * Z),
                                 "one_run_low": t * math.exp(-wide), "one_run_high": t * math.exp(wide)},
                                rel=1e-6)  # fmt: skip
    assert main([*plan("covariance=[[0.01]]", "run_dof=4"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["recommended"]["time_to_target_interval_s"]
    assert got == pytest.approx({"low": t * math.exp(-0.1 * T_4), "high": t * math.exp(0.1 * T_4)}, rel=1e-6)
    assert main(plan("covariance=[[0.01]]", "run_dof=4", 'measured_on="digits-cnn"')) == 0
    out = capsys.readouterr().out  # the table's intervals are said to be the predictions', not the fit's
    assert out.endswith("\nnote: the time to target is that of an efficiency measured on digits-cnn\n")
    assert "\n(95% CI: of each prediction, exact for a closed form; the efficiency fit's own uncertainty" in out
    assert f"(95% from the efficiency's fit: {got['low']:.2f}-{got['high']:.2f} s)" in out
    assert main([*plan(), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recommended"]["time_to_target_interval_s"] is None


@pytest.mark.slow
def test_a_policy_that_drops_samples_takes_the_interval_at_the_samples_it_applies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """backup keeps fewer samples a step than the global batch: its interval is the steps' at the
    samples it applies, where the noise scale's share of the uncertainty differs; async has none."""
    sets = ["noise_scale=100", "base_batch=32", "target_steps=200", "target_steps_sd=0.1", "noise_scale_sd=0.3",
            "covariance=[[0.01,0],[0,0.09]]"]  # fmt: skip
    argv = ["plan", "paper", "--objective", "time_to_target", "--json",
            *(a for s in sets for a in ("--set", f"workload.efficiency.{s}"))]  # fmt: skip
    for policy in ("backup", "async"):
        assert main([*argv, "--policy", policy]) == 0
        rec = json.loads(capsys.readouterr().out)["recommended"]
        if policy == "async":
            assert rec["time_to_target_interval_s"] is None
            continue
        applied = rec["throughput_sps"] * rec["predicted_step_s"]
        table = make_efficiency({k: json.loads(v) for k, v in (s.split("=", 1) for s in sets)})
        centre, low, high = steps_interval(table, applied)
        t = rec["time_to_target_s"]
        assert applied < rec["global_batch"] and steps_interval(table, rec["global_batch"])[1] != pytest.approx(low)
        assert rec["time_to_target_interval_s"] == pytest.approx({"low": t * low / centre, "high": t * high / centre})


@pytest.mark.slow
def test_a_plain_mean_of_an_uneven_split_takes_the_interval_at_its_effective_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """equal averages its workers' gradients plainly: with one worker capped at 64 of 256 the
    split is 192/64 and a step is worth n^2 / sum(1/b) = 192 samples, the batch its time to target
    is computed at, and so the interval's (not the 256 samples it applies)."""
    sets = ["noise_scale=100", "base_batch=32", "target_steps=200", "target_steps_sd=0.1", "noise_scale_sd=0.3",
            "covariance=[[0.01,0],[0,0.09]]", "run_sd=0.2"]  # fmt: skip
    argv = ["plan", "paper", "--policy", "equal", "--objective", "time_to_target", "--json", "--set",
            "workload.global_batch=256", "--set", "workers.1.max_batch=64",
            *(a for s in sets for a in ("--set", f"workload.efficiency.{s}"))]  # fmt: skip
    assert main(argv) == 0
    rec = json.loads(capsys.readouterr().out)["recommended"]
    assert rec["split"] == [192, 64]
    table = make_efficiency({k: json.loads(v) for k, v in (s.split("=", 1) for s in sets)})
    t = rec["time_to_target_s"]
    assert math.ceil(table.steps_to_target(2 * 2 / (1 / 192 + 1 / 64))) * rec["predicted_step_s"] == pytest.approx(t)
    interval = {}
    for one_run, keys in ((False, ("low", "high")), (True, ("one_run_low", "one_run_high"))):
        centre, low, high = steps_interval(table, 192.0, one_run=one_run)
        interval.update({keys[0]: t * low / centre, keys[1]: t * high / centre})
    assert rec["time_to_target_interval_s"] == pytest.approx(interval, rel=1e-9)


def test_a_fit_with_a_parameter_it_cannot_move_still_has_an_interval() -> None:
    """Steps that halve with the batch leave the noise scale at its bound, its variance 0: the
    interval is the other parameters', not none (before, a zero variance dropped it)."""
    rng = np.random.default_rng(2)
    batches = [16.0, 32.0, 64.0, 128.0] * 3
    f = fit(batches, [6400.0 / b * float(np.exp(rng.normal(0.0, 0.1))) for b in batches], 16)
    assert (
        np.diag(f.covariance)[1:].tolist() == [0.0, 0.0]
        and f.efficiency.covariance is not None
        and f.efficiency.run_sd == pytest.approx(f.residual_sd)
    )
    centre, low, high = f.predict(16)
    assert low < centre < high and math.isfinite(high)
    assert make_efficiency(f.efficiency.to_dict()).covariance == f.efficiency.covariance  # the reader accepts it


@pytest.mark.slow
def test_the_interval_holds_95_percent_of_draws_of_well_measured_parameters() -> None:
    """The delta method on ln S: where the parameters are known to a few tenths (here sds 0.05,
    0.2 and 0.15, correlated), the steps of parameters drawn from the covariance fall inside the
    95% interval 95% of the time (8000 draws: within 0.012 is 5 of their standard errors), at
    the base batch, 2x the batch the noise scale was measured at and 8x."""
    cov = np.array([[0.05**2, -0.004, 0.0], [-0.004, 0.2**2, -0.01], [0.0, -0.01, 0.15**2]])
    table = make_efficiency({"noise_scale": 200.0, "base_batch": 32, "target_steps": 400.0, "measured_batch": 64,
                             "target_steps_sd": 0.05, "noise_scale_sd": 0.2, "batch_exponent_sd": 0.15,
                             "covariance": cov.tolist()})  # fmt: skip
    draws = np.random.default_rng(np.random.SeedSequence(11).spawn(1)[0]).multivariate_normal(
        [math.log(400.0), math.log(200.0), 0.0], cov, size=8000
    )
    for batch in (32, 128, 512):
        _, low, high = steps_interval(table, batch)
        steps = [replace(table, target_steps=math.exp(a), noise_scale=math.exp(b), batch_exponent=c,
                         covariance=None).steps_to_target(batch) for a, b, c in draws]  # fmt: skip
        assert np.mean((low <= np.array(steps)) & (np.array(steps) <= high)) == pytest.approx(0.95, abs=0.012)


@pytest.mark.slow
def test_plan_says_why_a_global_batch_it_tried_has_no_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """At a noise scale of 32 a step of 384 or more samples learns little more than one of 64, so
    400 steps' progress does not fit in 2 epochs there: those batches are marked and the reason
    said (they were listed bare)."""
    sets = ["workload.efficiency.noise_scale=32", "workload.efficiency.base_batch=64",
            "workload.efficiency.target_steps=400", "workload.epochs=2"]  # fmt: skip
    argv = ["plan", "paper", "--policy", "equal,optimal", "--objective", "time_to_target", "--batch-range", "64,1024"]
    assert main([*argv, *(a for s in sets for a in ("--set", s))]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("global batches tried"))
    assert line.endswith("256 (optimal), 384 (-), 512 (-), 768 (-), 1024 (-); -: no policy with a closed form has a "
                         "value there (the search weighs closed forms only; for time_to_target, one that does not "
                         "reach the target in 2 epochs has none (raise workload.epochs))")  # fmt: skip
    assert main(["plan", "paper", "--batch-range", "64,96", "--policy", "backup"]) == 0  # no closed form, no target
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("global batches tried"))
    assert line.endswith("64 (-), 96 (-); -: no policy with a closed form has a value there (the search weighs "
                         "closed forms only)")  # fmt: skip
