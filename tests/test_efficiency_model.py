"""The batch- and progress-dependent noise scale (:mod:`hetsim.model.efficiency`), its fit
(:mod:`hetsim.model.efficiency_fit`), ``hetsim calibrate-efficiency`` and the refusals of a bad table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.calibrate.efficiency_runs import Sweep, _point, fitted_model, load_sweeps
from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.model.efficiency import Efficiency
from hetsim.model.efficiency_fit import Shape, fit, noise_shape
from hetsim.scenario.config import make_efficiency
from tests.refusals import case, check_refused

LADDER = [16, 32, 64, 128, 256]


@settings(max_examples=200, deadline=None)
@given(noise=st.floats(0.5, 1e5), m0=st.integers(1, 4096), batch=st.floats(0.0, 1e5),
       measured=st.integers(1, 4096), rule=st.sampled_from(["sqrt", "linear", "none"]))  # fmt: skip
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_no_batch_dependence_is_exactly_todays_gain(
    noise: float, m0: int, batch: float, measured: int, rule: str
) -> None:
    plain = Efficiency(noise, m0, 100.0)
    extended = Efficiency(noise, m0, 100.0, batch_exponent=0.0, measured_batch=measured, lr_scaling=rule,
                          fit_batches=(1.0, 2.0), noise_scale_sd=0.1)  # fmt: skip
    assert extended.gain(batch) == plain.gain(batch)
    assert extended.steps_to_target(max(batch, 1.0)) == 100.0 / plain.gain(max(batch, 1.0))


@settings(max_examples=100, deadline=None)
@given(noise=st.floats(1.0, 1e4), m0=st.integers(1, 512), alpha=st.floats(-2.0, 2.0), ratio=st.floats(0.01, 100.0))
def test_batch_dependence_is_the_noise_scale_at_the_batch(noise: float, m0: int, alpha: float, ratio: float) -> None:
    """gain(B) with exponent alpha is today's gain at B_noise * (B / M0) ** alpha; 1 at M0; 0 at 0."""
    eff = Efficiency(noise, m0, batch_exponent=alpha)
    batch = ratio * m0
    assert eff.gain(batch) == pytest.approx(Efficiency(noise * ratio**alpha, m0).gain(batch), rel=1e-12)
    assert eff.gain(m0) == pytest.approx(1.0, rel=1e-12)
    assert eff.gain(0.0) == 0.0


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_steps_to_target_under_a_schedule_is_the_step_by_step_recurrence() -> None:
    eff = Efficiency(20.0, 16, 2000.0, schedule=((0.0, 20.0), (1000.0, 200.0), (2000.0, 400.0)))
    for batch in (16, 64, 256):
        progress = eff.progress(np.full(20000, float(batch)))
        steps = int(np.searchsorted(progress, 2000.0)) + 1
        assert eff.steps_to_target(batch) == pytest.approx(steps, rel=0.01)


def test_the_fit_recovers_a_known_dependence_exactly_without_noise() -> None:
    true = Efficiency(200.0, 16, 1000.0, batch_exponent=0.5)
    f = fit(LADDER, [true.steps_to_target(b) for b in LADDER], 16, noise_scale=50.0)
    assert f.free == ("target_steps", "noise_scale", "batch_exponent")
    assert f.efficiency.noise_scale == pytest.approx(200.0, rel=1e-5)
    assert f.efficiency.batch_exponent == pytest.approx(0.5, abs=1e-6)
    assert f.efficiency.target_steps == pytest.approx(1000.0, rel=1e-6)
    assert f.efficiency.fit_batches == (16.0, 256.0)


def test_the_fit_recovers_a_schedules_scale_and_no_batch_dependence() -> None:
    shape = ((0.0, 1.0), (0.5, 4.0), (1.0, 10.0))
    true = Efficiency(30.0, 16, 800.0, schedule=tuple((p * 800.0, 30.0 * r) for p, r in shape))
    f = fit(LADDER, [true.steps_to_target(b) for b in LADDER], 16, noise_scale=10.0, shape=shape)
    assert f.efficiency.noise_scale == pytest.approx(30.0, rel=1e-4)
    assert f.efficiency.batch_exponent == pytest.approx(0.0, abs=1e-5)
    assert f.efficiency.schedule[-1] == pytest.approx((800.0, 300.0), rel=1e-4)


def test_the_fit_with_noisy_seeds_covers_the_truth_and_its_interval_the_held_out_batch() -> None:
    """Three seeds a batch, 8% lognormal scatter: the truth within 3 standard errors, and the
    95% interval at an unmeasured batch holds the true steps."""
    rng = np.random.default_rng(np.random.SeedSequence(28).spawn(1)[0])
    true = Efficiency(120.0, 16, 600.0, batch_exponent=0.3)
    batches = LADDER[:4] * 3
    steps = [true.steps_to_target(b) * float(np.exp(rng.normal(0.0, 0.08))) for b in batches]
    f = fit(batches, steps, 16, noise_scale=60.0)
    e = f.efficiency
    assert e.noise_scale_sd is not None and e.batch_exponent_sd is not None and e.target_steps_sd is not None
    assert abs(np.log(e.noise_scale / 120.0)) <= 3 * e.noise_scale_sd
    assert abs(e.batch_exponent - 0.3) <= 3 * e.batch_exponent_sd
    assert abs(np.log(e.target_steps / 600.0)) <= 3 * e.target_steps_sd  # type: ignore[operator]
    centre, low, high = f.predict(256)
    assert low < true.steps_to_target(256) < high and low < centre < high


def test_two_batches_fit_no_exponent_and_one_batch_keeps_the_measured_noise() -> None:
    true = Efficiency(64.0, 16, 500.0)
    two = fit([16, 32], [true.steps_to_target(16), true.steps_to_target(32)], 16, noise_scale=10.0)
    assert two.free == ("target_steps", "noise_scale")
    assert two.efficiency.noise_scale == pytest.approx(64.0, rel=1e-5)
    one = fit([16, 16], [400.0, 900.0], 16, noise_scale=10.0)
    assert one.free == ("target_steps",) and one.efficiency.noise_scale == 10.0
    assert one.efficiency.target_steps == pytest.approx(600.0)  # the geometric mean


def test_noise_shape_is_the_ratio_of_sums_per_span_of_progress() -> None:
    steps = [10, 20, 30, 40, 50, 60, 70, 80]
    grad_sq = [1.0] * 8
    trace = [10.0, 10.0, 20.0, 20.0, 40.0, 40.0, 80.0, 80.0]
    first, shape = noise_shape(steps, grad_sq, trace, target_step=80)
    assert first == 10.0
    assert shape == ((0.0, 1.0), (0.375, 2.0), (0.625, 4.0), (0.875, 8.0))
    # the first span's sums empty: the shape starts at the first span that has them, at its place
    first, shape = noise_shape(steps, [0.0, 0.0, *grad_sq[2:]], trace, target_step=80)
    assert first == 20.0 and shape == ((0.375, 1.0), (0.625, 2.0), (0.875, 4.0))


def test_the_schedule_is_the_median_over_base_runs_on_their_common_grid_of_progress() -> None:
    """Base runs whose shapes sit at different progress points are not mixed point by point: the
    median is taken over the runs on the most common grid."""
    common = ((0.0, 1.0), (0.375, 2.0), (0.625, 4.0))
    shapes = [common, ((0.0, 1.0), (0.375, 4.0), (0.625, 8.0)), ((0.375, 1.0), (0.625, 9.0), (0.875, 9.0))]
    points = [{"batch": b, "seed": s, "steps_to_target": 100.0 * (b / 16) ** -0.5, "noise_scale": 40.0,
               "noise_first": 30.0, "noise_shape": [list(k) for k in shapes[s]] if b == 16 else None}
              for b in (16, 32) for s in range(3)]  # fmt: skip
    sweep = Sweep("w", 16, "sqrt", 0.9, tuple(_point(p, f"points.{i}") for i, p in enumerate(points)))
    schedule = fitted_model(sweep, schedule=True).efficiency.schedule  # (steps at the base batch, B_noise)
    assert len(schedule) == 3 and schedule[0][0] == 0.0  # the third run's later grid left out
    assert [b / schedule[0][1] for _, b in schedule] == pytest.approx([1.0, 3.0, 6.0])  # medians of 2, 4 and 4, 8


def test_a_shape_that_starts_at_a_later_span_is_never_the_schedule_nor_its_first_noise_scale() -> None:
    """A run whose first span of progress had no estimate measured its "first" noise scale later
    in training: even where most base runs are so, the schedule and its starting noise scale are
    those of the runs that measured the first span (they used to win the grid and be refused as a
    shape that does not start at 0); with none such, ``--schedule`` is refused in one line."""
    late = ((0.375, 1.0), (0.625, 2.0), (0.875, 4.0))
    shapes = [late, late, ((0.0, 1.0), (0.375, 3.0), (0.625, 5.0), (0.875, 7.0))]

    def sweep_of(shapes: list[Shape]) -> Sweep:
        # one batch only, so that the fit keeps the noise scale it starts from
        points = [{"batch": 16, "seed": s, "steps_to_target": 100.0, "noise_scale": 40.0, "noise_first": 10.0 * (s + 1),
                   "noise_shape": [list(k) for k in shape]} for s, shape in enumerate(shapes)]  # fmt: skip
        return Sweep("w", 16, "sqrt", 0.9, tuple(_point(p, f"points.{i}") for i, p in enumerate(points)))

    schedule = fitted_model(sweep_of(shapes), schedule=True).efficiency.schedule
    assert schedule[0] == (0.0, pytest.approx(30.0))  # the third run's first noise scale, not the median 20
    assert [b / schedule[0][1] for _, b in schedule] == pytest.approx([1.0, 3.0, 5.0, 7.0])
    with pytest.raises(ConfigError, match="--schedule: no run at the base batch 16 that reached the target measured"):
        fitted_model(sweep_of([late, late]), schedule=True)


def test_the_table_round_trips_through_the_scenario_reader() -> None:
    eff = Efficiency(50.0, 16, 300.0, batch_exponent=0.4, lr_scaling="sqrt", fit_batches=(16.0, 128.0),
                     noise_scale_sd=0.2, batch_exponent_sd=0.1, target_steps_sd=0.05)  # fmt: skip
    assert make_efficiency(eff.to_dict()) == eff
    assert eff.extrapolates(256) and eff.extrapolates(8) and not eff.extrapolates(64)
    assert Efficiency(50.0, 16).to_dict() == {"noise_scale": 50.0, "base_batch": 16}


BASE = ["simulate", "--policy", "goodput", "--set", "workload.efficiency.noise_scale=100",
        "--set", "workload.efficiency.base_batch=32"]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "line", "files"),
    [
        case("negative-noise", [*BASE, "--set", "workload.efficiency.noise_scale=-5"],
             "workload.efficiency.noise_scale: must be > 0, got -5"),
        case("schedule-goes-back", [*BASE, "--set", "workload.efficiency.noise_scale=[[0,10],[5,20],[3,30]]"],
             "workload.efficiency.noise_scale: progress must increase: point 2 (3) is not after 5"),
        case("unknown-lr-rule", [*BASE, "--set", 'workload.efficiency.lr_scaling="cubic"'],
             "workload.efficiency.lr_scaling: must be one of 'sqrt', 'linear', 'none', got 'cubic'"),
        case("fit-range-reversed", [*BASE, "--set", "workload.efficiency.fit_batches=[64,16]"],
             "workload.efficiency.fit_batches: must be [smallest, largest] with 0 < smallest <= largest, "
             "got [64.0, 16.0]"),
        case("calibrate-missing-run", ["calibrate-efficiency", "{tmp}/nowhere"],
             "RUN: cannot read {tmp}/nowhere: No such file or directory"),
        case("calibrate-bad-batches", ["calibrate-efficiency", "x", "--batches", "16,a"],
             "--batches: expected whole numbers separated by commas, got '16,a'"),
    ],
)  # fmt: skip
def test_a_bad_efficiency_table_is_refused_in_one_line(
    argv: list[str], line: str, files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_refused(main, argv, line, tmp_path, capsys)


def test_a_malformed_sweep_and_batches_it_does_not_hold_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A results file whose noise shape is not [progress, ratio] pairs; ``--batches`` given as
    batch-sweep's multiples (1,2) where the sweep's runs are at global batches 16 and 32."""
    points = [{"batch": b, "seed": 0, "steps_to_target": 100.0, "noise_scale": 40.0} for b in (16, 32)]
    common = {"workload": "w", "base_batch": 16, "lr_scaling": "sqrt", "target_accuracy": 0.9}
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text(json.dumps({**common, "points": [{**points[0], "noise_shape": 5}]}))
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "results.json").write_text(json.dumps({**common, "points": points}))
    check_refused(main, ["calibrate-efficiency", "{tmp}/bad"],
                  "{tmp}/bad/results.json:points.0.noise_shape: must be a list of [x, y] pairs, got int (5)",
                  tmp_path, capsys)  # fmt: skip
    check_refused(main, ["calibrate-efficiency", "{tmp}/good", "--batches", "1,2"],
                  "--batches: no run reached the target at the global batches asked for (1, 2); the sweep holds 16, 32",
                  tmp_path, capsys)  # fmt: skip
    check_refused(main, ["calibrate-efficiency", "{tmp}/good", "--batches", "16,48"],  # it fitted on 16 alone
                  "--batches: 48 is not a global batch of the sweep (it has 16, 32)", tmp_path, capsys)  # fmt: skip
    impossible = [({"noise_scale": -1.0}, "points.0.noise_scale: must be > 0, got -1"),
                  ({"steps_to_target": 0.5}, f"points.0.steps_to_target: must be in [1, {2**40}], got 0.5"),
                  ({"steps_run": 50.0}, "points.0.steps_run: 50 is fewer than its steps_to_target 100"),
                  ({"batch": 2**50}, f"points.0.batch: must be in [1, {2**40}], got {2**50}")]  # fmt: skip
    for k, (edit, problem) in enumerate(impossible):  # values no sweep writes: refused, not fitted
        (tmp_path / f"odd{k}").mkdir()
        (tmp_path / f"odd{k}" / "results.json").write_text(json.dumps({**common, "points": [{**points[0], **edit}]}))
        check_refused(main, ["calibrate-efficiency", f"{{tmp}}/odd{k}"], f"{{tmp}}/odd{k}/results.json:{problem}",
                      tmp_path, capsys)  # fmt: skip
    (tmp_path / "empty").mkdir()  # the line was cut short after "the sweep holds"
    (tmp_path / "empty" / "results.json").write_text(json.dumps({**common, "points": []}))
    check_refused(
        main,
        ["calibrate-efficiency", "{tmp}/empty"],
        "RUN: the sweep holds no runs (its results.json lists no points)",
        tmp_path,
        capsys,
    )


def test_calibrate_efficiency_writes_the_table_it_fitted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    true = Efficiency(100.0, 16, 400.0, batch_exponent=0.25)
    points = [{"batch": b, "seed": s, "steps_to_target": true.steps_to_target(b), "noise_scale": 40.0,
               "noise_first": 30.0, "noise_shape": [[0.0, 1.0]]} for b in LADDER for s in range(2)]  # fmt: skip
    run = tmp_path / "sweep"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"workload": "w", "base_batch": 16, "lr_scaling": "sqrt",
                                                  "target_accuracy": 0.9, "points": points}))  # fmt: skip
    assert main(["calibrate-efficiency", str(run), "-o", str(tmp_path / "eff.toml")]) == 0
    import tomllib

    text = (tmp_path / "eff.toml").read_text()
    assert [line.split(":")[0] for line in text.splitlines()[:4]] == ["# command", "# hetsim_version", "# git_commit",
                                                                     "# date"]  # fmt: skip
    table = tomllib.loads(text)["workload"]["efficiency"]
    eff = make_efficiency(table)
    assert eff.noise_scale == pytest.approx(100.0, rel=1e-4) and eff.batch_exponent == pytest.approx(0.25, abs=1e-4)
    assert eff.lr_scaling == "sqrt" and eff.fit_batches == (16.0, 256.0)
    assert "[workload.efficiency]" in capsys.readouterr().out


def test_sweeps_of_two_optimizers_are_not_fitted_together(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    points = [{"batch": 16, "seed": 0, "steps_to_target": 100.0, "noise_scale": 40.0}]
    common = {"workload": "w", "base_batch": 16, "lr_scaling": "sqrt", "target_accuracy": 0.9, "points": points}
    for name, extra in (("old", {}), ("adam", {"optimizer": "adam"})):  # "old": written before the key: SGD's
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({**common, **extra}))
    assert load_sweeps([tmp_path / "old"]).optimizer == "sgd"
    line = f"RUN: {tmp_path / 'adam'}: optimizer 'adam' differs from the first's ('sgd')"
    check_refused(main, ["calibrate-efficiency", str(tmp_path / "old"), str(tmp_path / "adam")], line, tmp_path, capsys)


def test_sweeps_at_two_learning_rates_are_not_fitted_together(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The rate at the base batch is compared where both sweeps recorded it (one that did not is not)."""
    common = {"workload": "w", "base_batch": 16, "lr_scaling": "sqrt", "target_accuracy": 0.9}
    for seed, (name, extra) in enumerate((("a", {"lr": 0.05}), ("b", {"lr": 0.1}), ("old", {}))):
        points = [{"batch": 16, "seed": seed, "steps_to_target": 100.0, "noise_scale": 40.0}]
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({**common, **extra, "points": points}))
    assert load_sweeps([tmp_path / "a", tmp_path / "old"]).lr == 0.05
    line = f"RUN: {tmp_path / 'b'}: lr 0.1 differs from the first's (0.05)"
    check_refused(main, ["calibrate-efficiency", str(tmp_path / "a"), str(tmp_path / "b")], line, tmp_path, capsys)


def test_a_run_counted_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder given twice, or a copy of one, would count its runs twice: every standard error
    would shrink as if there were twice the runs."""
    points = [
        {"batch": b, "seed": s, "steps_to_target": 100.0 / b, "noise_scale": 40.0} for b in (16, 32) for s in (0, 1)
    ]
    data = {"workload": "w", "base_batch": 16, "lr_scaling": "sqrt", "target_accuracy": 0.9, "points": points}
    for name in ("a", "copy"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(data))
    a, copy = str(tmp_path / "a"), str(tmp_path / "copy")
    check_refused(main, ["calibrate-efficiency", a, a], f"RUN: {a} is given twice", tmp_path, capsys)
    check_refused(main, ["calibrate-efficiency", a, copy],
                  f"RUN: {copy}: the run at batch 16, seed 0 is also in {a}", tmp_path, capsys)  # fmt: skip


def _sweep_with_a_cut_run(folder: Path, steps_run: bool) -> None:
    """Three seeds at 16, 32 and 64, the last at 64 stopped at 60 steps before the target."""
    true = Efficiency(100.0, 16, 400.0)
    points: list[dict[str, float | None]] = [
        {"batch": b, "seed": s, "steps_to_target": true.steps_to_target(b) * (0.9, 1.0, 1.1)[s], "noise_scale": 100.0}
        for b in (16, 32, 64) for s in range(3)
    ]  # fmt: skip
    points[-1]["steps_to_target"] = None  # the last seed at 64 hit the step cap
    if steps_run:
        points[-1]["steps_run"] = 60
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"workload": "w", "base_batch": 16,
        "lr_scaling": "sqrt", "target_accuracy": 0.9, "points": points}))  # fmt: skip


def test_runs_that_missed_the_target_are_fitted_as_censored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run stopped before the target, its steps run recorded, enters the fit as censored, and
    that is said (on stderr and in the table's comment), per batch."""
    _sweep_with_a_cut_run(tmp_path / "sweep", steps_run=True)
    assert main(["calibrate-efficiency", str(tmp_path / "sweep")]) == 0
    out, err = capsys.readouterr()
    note = "note: runs 1 of 3 at 64 did not reach the target: fitted as censored (more steps than they ran)"
    assert err.strip() == note
    assert out.splitlines()[4].endswith("; runs 1 of 3 at 64 censored, not reached")  # after the provenance
    assert fitted_model(load_sweeps([tmp_path / "sweep"])).censored == 1


def test_runs_that_missed_the_target_without_their_steps_are_named_as_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Results that do not record the steps a run ran (older sweeps): it is left out, and said so,
    since the fit at that batch is then the fast seeds'."""
    _sweep_with_a_cut_run(tmp_path / "sweep", steps_run=False)
    assert main(["calibrate-efficiency", str(tmp_path / "sweep")]) == 0
    out, err = capsys.readouterr()
    assert err.strip().startswith("warning: runs 1 of 3 at 64 left out (they did not reach the target")
    assert out.splitlines()[4].endswith("; runs 1 of 3 at 64 left out, not reached")


def test_a_censored_run_far_below_its_steps_changes_nothing() -> None:
    """A run stopped long before the model's steps carries no information: the censored fit is the
    least-squares fit of the others (the normal likelihood's maximum in the model's parameters
    does not depend on sigma), to the optimiser's tolerance, and so are its standard errors."""
    true = Efficiency(80.0, 16, 500.0)
    batches = [16, 16, 32, 32, 64, 64]
    steps = [true.steps_to_target(b) * f for b, f in zip(batches, (0.9, 1.1, 1.05, 0.95, 0.92, 1.08))]
    plain = fit(batches, steps, 16, noise_scale=40.0, exponent=False)
    cut = fit(batches, steps, 16, noise_scale=40.0, exponent=False, censored=[(64.0, 5.0)])
    assert cut.censored == 1 and plain.censored == 0
    assert cut.efficiency.noise_scale == pytest.approx(plain.efficiency.noise_scale, rel=1e-4)
    assert cut.efficiency.target_steps == pytest.approx(plain.efficiency.target_steps, rel=1e-4)
    # and its standard errors and scatter are least squares' (the likelihood's sigma, divided by the
    # runs, is widened to the runs less the parameters)
    assert cut.residual_sd == pytest.approx(plain.residual_sd, rel=1e-3)
    assert cut.efficiency.noise_scale_sd == pytest.approx(plain.efficiency.noise_scale_sd, rel=1e-2)
    assert cut.efficiency.target_steps_sd == pytest.approx(plain.efficiency.target_steps_sd, rel=1e-2)


@pytest.mark.slow  # about a second or more: out of make test-fast
def test_the_censored_fit_removes_the_bias_of_leaving_cut_runs_out() -> None:
    """Runs capped at 160 steps, a quarter of them at the base batch cut: over 30 seeds the
    censored fit's target steps and noise scale lie within 3% and 10% of the truth's (geometric
    means), where the fit of the runs that reached the target alone falls short (here by 5% and 14%)."""
    true = Efficiency(40.0, 16, 150.0)
    batches = np.repeat([16.0, 32.0, 64.0, 128.0], 5)
    log_steps = np.log([true.steps_to_target(b) for b in batches])
    cap = 160.0
    kept: list[tuple[float, float]] = []
    dropped: list[tuple[float, float]] = []
    for seq in np.random.SeedSequence(2810).spawn(30):
        steps = np.exp(log_steps + 0.2 * np.random.default_rng(seq).standard_normal(batches.size))
        ok = steps <= cap
        cut = [(b, cap) for b in batches[~ok]]
        for out, censored in ((kept, cut), (dropped, [])):
            e = fit(batches[ok].tolist(), steps[ok].tolist(), 16, 30.0, exponent=False, censored=censored).efficiency
            out.append((float(np.log(e.target_steps or 1.0)), float(np.log(e.noise_scale))))
    target, noise = np.exp(np.mean(kept, axis=0))
    assert target == pytest.approx(150.0, rel=0.03) and noise == pytest.approx(40.0, rel=0.10)
    short_target, short_noise = np.exp(np.mean(dropped, axis=0))
    assert short_target < 0.97 * target and short_noise < 0.9 * noise  # the same seeds' fits, paired


def test_a_fitted_exponent_at_its_bound_or_that_turns_the_steps_up_is_warned_of() -> None:
    """calibrate-efficiency wrote batch_exponent = -4.0, the fit's bound, with a standard error
    from the bound's curvature, and -1.58 where the model then predicts more steps at 128 than at
    64, both without a word; goodput and plan use that gain."""
    from hetsim.cli.efficiency import exponent_warnings
    from hetsim.model.efficiency import Efficiency

    def fitted(alpha: float | None) -> Efficiency:
        return Efficiency(100.0, 16, 400.0, batch_exponent=alpha, measured_batch=16, fit_batches=(16.0, 64.0))

    assert exponent_warnings(fitted(None)) == [] and exponent_warnings(fitted(0.5)) == []
    assert fitted(-1.58).steps_to_target(128) > fitted(-1.58).steps_to_target(64)
    (turn,) = exponent_warnings(fitted(-1.58))
    assert turn.startswith("with a batch exponent of -1.58 the model predicts more steps past a batch of about")
    bound, _ = exponent_warnings(fitted(-4.0))
    assert bound.startswith("the batch exponent sits at its bound (-4)")
    assert [w.split(" ")[1] for w in exponent_warnings(fitted(4.0))] == ["batch"]  # at the bound, steps falling
