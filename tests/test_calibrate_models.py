"""Calibration that chooses: the affine, hinge and table fits, their held-out errors and the
choice among them, standard errors, the noise's structure, the shipped device profiles, and the
``calibrate`` command's new options (--model, --policy, --json)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hetsim.calibrate import calibrate, fit_worker
from hetsim.calibrate.censored import fit_mle
from hetsim.calibrate.curves import FITTED, AffineCurve, HingeCurve, Sizes, TableCurve, model_named
from hetsim.calibrate.models import choose, folds, held_out_errors, noise_floor
from hetsim.calibrate.noise import persistence, shared_correlation
from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.core.registry import COSTS
from hetsim.model.costs import Affine, Hinge, Profile, Table
from hetsim.policies import Equal
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario

ROOT = Path(__file__).resolve().parent.parent
HINGE = {"model": "hinge", "floor_s": 0.05, "overhead_s": 0.01, "per_sample_s": 0.001}  # bends at 40 samples
CONVEX = {"model": "table", "points": [[8, 0.02], [32, 0.03], [64, 0.07], [128, 0.2]]}
AFFINE = {"model": "affine", "overhead_s": 0.01, "per_sample_s": 0.001}
SIZES = [8, 16, 24, 32, 48, 64, 96, 128]


def pooled_runs(cost: dict, sizes: list[int], steps: int = 100, sigma: float = 0.05, seed: int = 0) -> pd.DataFrame:
    """One worker run at each batch size in turn, as one trace (steps kept apart)."""
    frames = []
    for k, batch in enumerate(sizes):
        raw = {
            "name": "one",
            "seed": seed * 1000 + k,
            "workload": {"global_batch": batch, "dataset_size": batch * steps, "epochs": 1},
            "workers": [{"cost": cost, "noise": {"dist": "lognormal", "sigma": sigma}}],
        }
        frame = simulate(build_scenario(raw), Equal()).to_frame()
        frames.append(frame.assign(step=frame["step"] + k * steps, epoch=k))
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------- the fits


def _exact(model) -> Sizes:
    b = np.repeat(np.array(SIZES, dtype=float), 3)
    return Sizes.of(b, model.time_s(b))


def test_noise_free_curves_are_fitted_exactly():
    hinge = HingeCurve.fit(_exact(Hinge(**{k: v for k, v in HINGE.items() if k != "model"})))
    assert hinge is not None and hinge.values == pytest.approx([0.05, 0.01, 0.001], rel=1e-6)
    table = TableCurve.fit(_exact(Table(points=CONVEX["points"])))
    truth = Table(points=CONVEX["points"]).time_s(np.array(SIZES, dtype=float))
    assert table is not None and table.values == pytest.approx(truth)
    assert HingeCurve.fit(_exact(Table(points=CONVEX["points"]))) is not None
    flat_then_line = Hinge(0.04, 0.0, 0.001)  # bends at 40 on the line through the origin
    fit = HingeCurve.fit(_exact(flat_then_line))
    assert fit is not None and fit.values == pytest.approx([0.04, 0.0, 0.001], rel=1e-6)


def test_a_table_is_made_non_decreasing_and_needs_two_sizes():
    sizes = Sizes.of(np.array([8.0, 8.0, 16.0, 32.0]), np.array([0.05, 0.07, 0.05, 0.09]))
    fit = TableCurve.fit(sizes)
    assert fit is not None and fit.values.tolist() == pytest.approx([0.0566667, 0.0566667, 0.09], rel=1e-5)
    one = Sizes.of(np.array([8.0, 8.0]), np.array([0.1, 0.2]))
    assert [form.fit(one) for form in FITTED] == [None, None, None]


def test_held_out_folds_and_which_models_can_be_scored():
    assert [f.tolist() for f in folds(3)] == [[0], [1], [2]]
    assert [f.tolist() for f in folds(23)][:2] == [[0, 10, 20], [1, 11, 21]] and len(folds(23)) == 10
    b = np.array([8.0, 16.0, 32.0])
    three = held_out_errors(Sizes.of(b, 0.01 + 0.001 * b))
    assert three["affine"] == pytest.approx(0.0, abs=1e-12) and three["hinge"] is None and three["table"] > 0
    assert held_out_errors(Sizes.of(b[:2], b[:2])) == {"affine": None, "hinge": None, "table": None}


def test_choose_keeps_the_simplest_model_within_the_noise_floor():
    errors = {"affine": 0.030, "hinge": 0.028, "table": 0.010}
    assert choose(errors, 0.0) is TableCurve
    assert choose(errors, 0.005) is TableCurve
    assert choose(errors, 0.021) is AffineCurve
    assert choose({"affine": 0.05, "hinge": 0.02, "table": None}, 0.001) is HingeCurve
    assert choose({"affine": None, "hinge": None, "table": None}, 0.0) is AffineCurve


def test_rows_of_sizes_each_seen_once_keep_the_simplest_model_and_a_table_through_them_is_said():
    """Nothing tells the noise where no size repeats: auto chose a table through every row, its
    noise 0 (a user walk: 4 rows at 4 sizes, truth affine with sigma 0.1)."""
    b = np.array([32.0, 48.0, 40.0, 56.0])
    y = np.array([0.041, 0.052, 0.050, 0.061])
    assert noise_floor(b, y, Sizes.of(b, y)) == math.inf
    fit, _ = fit_worker(0, b, y)
    assert fit.model == "affine" and fit.noise_sigma > 0
    table, warnings = fit_worker(0, b, y, model=Table)  # asked for (a probe's epoch means): said, not refused
    assert table.noise_sigma == 0 and any("nothing tells its noise: written as sigma 0" in w for w in warnings)


@pytest.mark.parametrize(("cost", "model"), [(AFFINE, "affine"), (HINGE, "hinge"), (CONVEX, "table")])
def test_auto_chooses_the_model_that_made_the_trace(cost, model):
    cal = calibrate(pooled_runs(cost, SIZES))
    fit = cal.workers[0]
    assert fit.model == model
    assert min((v, k) for k, v in fit.held_out.items() if v is not None)[1] == model
    entry = cal.scenario["workers"][0]
    assert ("cost" in entry) == (model != "affine")
    if model != "affine":
        assert entry["cost"]["model"] == model
    rebuilt = load_scenario(cal.scenario).workers[0].cost
    truth = COSTS[cost["model"]](**{k: v for k, v in cost.items() if k != "model"})
    grid = np.arange(4, 160, 4.0)
    assert rebuilt.time_s(grid) == pytest.approx(truth.time_s(grid), rel=0.03)


def test_hinge_parameters_within_three_bootstrap_standard_errors():
    fit = calibrate(pooled_runs(HINGE, SIZES, seed=1), model=Hinge).workers[0]
    params = fit.cost_curve().params()
    for key in ("floor_s", "overhead_s", "per_sample_s"):
        se = fit.se[key]
        assert se is not None and 0 < se < 0.1 * HINGE[key]
        assert abs(params[key] - HINGE[key]) <= 3 * se, key
    assert fit.overhead_s > 0 and fit.per_sample_s > 0  # the affine terms are always there too


def test_table_points_have_standard_errors():
    fit = calibrate(pooled_runs(CONVEX, SIZES), model=Table).workers[0]
    params = fit.cost_curve().params()
    assert list(params) == [f"t@{b}" for b in SIZES]
    assert all(fit.se[k] is not None and 0 < fit.se[k] < 0.02 * params[k] for k in params)


def test_a_forced_model_needs_enough_sizes():
    frame = pooled_runs(AFFINE, [16, 32], steps=20)
    assert calibrate(frame, model=Table).workers[0].model == "table"
    with pytest.raises(ConfigError) as info:
        calibrate(frame, model=Hinge)
    assert info.value.field == "model" and "2 batch size(s); hinge needs 3" in info.value.problem
    with pytest.raises(ConfigError) as info:
        model_named("spline")
    assert info.value.field == "--model" and "auto, affine, hinge, table" in info.value.problem
    with pytest.raises(ConfigError) as info:  # a cost model calibration has no fit for
        calibrate(frame, model=Profile)
    assert info.value.field == "model" and "Affine, Hinge, Table, not 'Profile'" in info.value.problem
    with pytest.raises(ConfigError) as info:  # a name is the command line's
        calibrate(frame, model="hinge")  # type: ignore[arg-type]
    assert info.value.field == "model" and "class (Affine, Hinge, Table, hetsim.model.costs), not the name 'hinge'" in (
        info.value.problem
    )


def test_an_affine_curve_is_written_as_a_workers_own_keys():
    fit = calibrate(pooled_runs(AFFINE, SIZES)).workers[0]
    assert "cost" not in fit.to_scenario("w") and fit.to_scenario("w")["overhead_s"] == fit.overhead_s
    given = replace(fit, curve=AffineCurve(np.array([0.5, 0.02])))  # its own terms, not the affine fit's
    assert {k: v for k, v in given.to_scenario("w").items() if k.endswith("_s")} == {
        "overhead_s": 0.5,
        "per_sample_s": 0.02,
    }


# ----------------------------------------------------------------------------- the device profiles


def _benchmark():
    spec = importlib.util.spec_from_file_location("calibration_profiles", ROOT / "benchmarks/calibration_profiles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_every_device_profile_is_predicted_at_the_sizes_left_out():
    result = _benchmark().run(3, 100, 0.05, 0)
    assert len(result["curves"]) == 15
    assert result["auto"]["n"] == result["affine"]["n"] == 12 * 10 * 2 + 3 * 4 * 1  # 5-size and 4-size curves
    auto, affine = result["auto"], result["affine"]
    assert auto["median"] <= affine["median"] and auto["worst"] <= affine["worst"]
    assert auto["interpolation"]["median"] < 0.06 and auto["median"] < 0.1
    assert set(result["chosen"]) <= {"affine", "hinge", "table"} and sum(result["chosen"].values()) == 132


# ----------------------------------------------------------------------------- the noise


def _correlated(shared: float, persist: float, steps: int = 4000, workers: int = 3, seed: int = 0) -> pd.DataFrame:
    """Log-noise with the given share common to all workers of a step and lag-1 persistence."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(steps)
    own = np.empty((steps, workers))
    own[0] = rng.standard_normal(workers)
    for t in range(1, steps):
        own[t] = persist * own[t - 1] + np.sqrt(1 - persist**2) * rng.standard_normal(workers)
    z = np.sqrt(shared) * common[:, None] + np.sqrt(1 - shared) * own
    batch = rng.choice([16, 32, 48], size=(steps, workers))
    y = (0.01 + 0.001 * batch) * np.exp(0.1 * z)
    step = np.repeat(np.arange(steps), workers)
    return pd.DataFrame({"step": step, "worker": np.tile(np.arange(workers), steps),
                         "local_batch": batch.ravel(), "compute_s": y.ravel()})  # fmt: skip


@pytest.mark.parametrize(("shared", "persist"), [(0.0, 0.0), (0.5, 0.0), (0.0, 0.6)])
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_shared_and_persistent_noise_are_measured(shared, persist):
    cal = calibrate(_correlated(shared, persist))
    assert cal.noise.shared == pytest.approx(shared, abs=0.05)
    assert cal.noise.shared_steps == 4000
    assert all(p == pytest.approx(persist * (1 - shared), abs=0.05) for p in cal.noise.persistence)
    assert all(f.noise_sigma == pytest.approx(0.1, rel=0.05) for f in cal.workers)


def test_noise_structure_without_enough_data_is_none():
    assert persistence(np.arange(5), np.zeros(5, dtype=int), np.zeros(5), [0]) == (None,)
    assert shared_correlation(0.05, np.array([0.1])) is None
    assert shared_correlation(0.05, np.array([0.1, 0.1, 0.1])) == pytest.approx(0.25)


def test_censored_lognormal_recovers_the_level():
    rng = np.random.default_rng(4)
    sigma, k = 0.2, 1.3
    y = k * np.exp(-(sigma**2) / 2 + sigma * rng.standard_normal(20_000))
    cut_at = k * np.exp(0.1 * rng.standard_normal(y.size))
    cut = y > cut_at
    b = np.full(y.size, 10.0)
    start = AffineCurve(np.array([0.0, 0.1]))
    bounds = [(0.0, np.inf), (1e-9, np.inf)]
    found = fit_mle(start, bounds, b, np.minimum(y, cut_at), cut, fixed=np.array([True, False]))
    level, se = 10 * found.curve.values[1], 10 * found.se()[1]
    assert cut.mean() > 0.3
    assert abs(level - k) < 3 * se and se < 0.01
    assert found.sigma == pytest.approx(sigma, rel=0.03)


# ----------------------------------------------------------------------------- the command


def _one_line_error(capsys, *needles: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hetsim: error: "), err
    for needle in needles:
        assert needle in err, err


@pytest.fixture(scope="module")
def two_policy_csv(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    args = ["simulate", "paper", "--policy", "equal,dynamic", "--set", "workload.epochs=3", "--out", str(out)]
    assert main(args) == 0
    return out / "trace.csv"


def test_cli_two_policies_need_policy_and_give_the_right_global_batch(two_policy_csv, tmp_path, capsys):
    capsys.readouterr()
    target = tmp_path / "cal.toml"
    assert main(["calibrate", str(two_policy_csv), "-o", str(target)]) == 2
    _one_line_error(capsys, "--policy", "equal, dynamic")
    assert not target.exists()
    assert main(["calibrate", str(two_policy_csv), "--policy", "dynamic", "-o", str(target)]) == 0
    out = capsys.readouterr().out
    assert "held-out" in out and "±" in out and "(policy dynamic)" in out and "share common" in out
    written = tomllib.loads(target.read_text())
    assert written["workload"]["global_batch"] == 256 and written["policy"]["name"] == "dynamic"
    assert load_scenario(target).workload.steps_per_epoch == 195


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--policy", "nope"], ("--policy", "no rows of 'nope'")),
        (["--policy", "equal", "--model", "spline"], ("--model", "unknown model 'spline'")),
        (["--policy", "equal", "--model", "hinge"], ("--model", "hinge needs 3")),
    ],
)
def test_cli_bad_choices_are_one_line_and_write_nothing(two_policy_csv, tmp_path, capsys, extra, needles):
    capsys.readouterr()
    target = tmp_path / "cal.json"
    assert main(["calibrate", str(two_policy_csv), "-o", str(target), *extra]) == 2
    _one_line_error(capsys, *needles)
    assert not target.exists()


def test_cli_runs_that_cannot_be_told_apart(two_policy_csv, tmp_path, capsys):
    trace = tmp_path / "mixed.csv"
    pd.read_csv(two_policy_csv).drop(columns=["policy"]).to_csv(trace, index=False)
    capsys.readouterr()
    assert main(["calibrate", str(trace), "-o", str(tmp_path / "cal.toml")]) == 2
    _one_line_error(capsys, "trace: step 0 of worker 0 appears twice")
    assert not (tmp_path / "cal.toml").exists()


def test_cli_pools_policies_whose_steps_never_meet_as_the_library_does(two_policy_csv, tmp_path, capsys):
    frame = pd.read_csv(two_policy_csv)
    frame.loc[frame["policy"] == "dynamic", "step"] += 10_000
    trace = tmp_path / "pooled.csv"
    frame.to_csv(trace, index=False)
    capsys.readouterr()
    assert main(["calibrate", str(trace), "-o", str(tmp_path / "cal.toml")]) == 0
    assert "warning: trace: pooled the rows of 2 policies (equal, dynamic)" in capsys.readouterr().err
    assert tomllib.loads((tmp_path / "cal.toml").read_text())["workload"]["global_batch"] == 256


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_cli_json_report(tmp_path, capsys):
    trace = tmp_path / "hinge.csv"
    pooled_runs(HINGE, SIZES, steps=40).to_csv(trace, index=False)
    assert main(["calibrate", str(trace), "--json", "-o", str(tmp_path / "cal.toml")]) == 0
    report = json.loads(capsys.readouterr().out)
    worker = report["workers"][0]
    assert report["policy"] == "equal" and report["model"] == "auto" and worker["model"] == "hinge"
    assert set(worker["se"]) == set(worker["params"]) == {"floor_s", "overhead_s", "per_sample_s"}
    assert worker["held_out_error"]["hinge"] < worker["held_out_error"]["affine"]
    assert set(report["noise"]) == {"shared", "shared_sigma", "shared_steps", "persistence", "mean_persistence"}
    assert report["scenario"]["workers"][0]["cost"]["model"] == "hinge"
    assert tomllib.loads((tmp_path / "cal.toml").read_text()) == report["scenario"]
    assert main(["calibrate", str(trace), "--model", "table"]) == 0
    assert "w0 table (ms): t@8 " in capsys.readouterr().out


def test_a_table_flat_at_the_top_is_a_warning():
    b = np.repeat([8, 16, 32], 20)  # the largest batch measured a little faster than the one before
    y = np.select([b == 8, b == 16], [0.02, 0.041], 0.039) * np.exp(
        0.001 * np.random.default_rng(0).standard_normal(60)
    )
    cal = calibrate(pd.DataFrame({"worker": 0, "local_batch": b, "compute_s": y}), model=Table)
    assert any("flat from batch 16 on" in w for w in cal.warnings)


def test_forced_affine_from_one_batch_size_is_the_per_sample_fit():
    frame = pooled_runs(AFFINE, [32], steps=20)
    fit = calibrate(frame, model=Affine).workers[0]
    assert fit.model == "affine" and fit.overhead_s == 0.0
    assert fit.per_sample_s == pytest.approx(frame["compute_s"].mean() / 32)


def _shared_persistent(policy: str) -> dict:
    """Three workers whose log-noise (sigma 0.1) is 40% a host's shared factor, the rest their
    own with lag-1 persistence 0.6; one-step epochs."""
    noise = {"dist": "lognormal", "sigma": 0.1 * np.sqrt(0.6), "persistence": 0.6}
    shared = {"group": "host", "dist": "lognormal", "sigma": 0.1 * np.sqrt(0.4)}
    worker = {"overhead_s": 0.01, "per_sample_s": 0.001, "noise": noise, "shared_noise": shared}
    raw = {
        "name": "noisy",
        "workload": {"global_batch": 96, "dataset_size": 96, "epochs": 4000},
        "workers": [worker] * 3,
        "policy": {"name": policy},
    }
    return raw


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_simulated_shared_and_persistent_noise_is_measured():
    cal = calibrate(simulate(load_scenario(_shared_persistent("equal"))))
    assert cal.noise.shared == pytest.approx(0.4, abs=0.05)
    assert all(p == pytest.approx(0.6 * 0.6, abs=0.05) for p in cal.noise.persistence)
    assert all(f.noise_sigma == pytest.approx(0.1, rel=0.05) for f in cal.workers)
    assert not any("persists" in w for w in cal.warnings)


def test_a_split_that_follows_persistent_noise_is_a_warning():
    cal = calibrate(simulate(load_scenario(_shared_persistent("dynamic"))))
    notes = [w for w in cal.warnings if "persists" in w]
    assert len(notes) == 3 and all("fitted cost is biased" in w for w in notes)


def test_cli_scenario_file_keeps_the_fits_warnings_and_names_unfitted_workers(tmp_path, capsys):
    # worker 1 never got samples: kept at a flat cost, which the written file must say, not only stderr
    trace = tmp_path / "idle.csv"
    rows = pooled_runs(AFFINE, SIZES, steps=10).assign(worker=0)
    idle = rows.assign(worker=1, local_batch=0, compute_s=0.0)
    pd.concat([rows, idle]).to_csv(trace, index=False)
    target = tmp_path / "cal.toml"
    assert main(["calibrate", str(trace), "-o", str(target)]) == 0
    text = target.read_text()
    assert "hetsim: warning: worker 1: not fitted" in capsys.readouterr().err
    assert "# warning: worker 1: not fitted" in text
    description = tomllib.loads(text)["description"]
    assert "not fitted" not in description and f"; the trace: {trace} (hetsim " in description  # said once, by its key
    assert tomllib.loads(text)["workers"][1]["unfitted"].startswith("not fitted (never given samples")
    assert main(["costs", str(target), "--batch", "8"]) == 0  # every command that loads it says so again
    said = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(said) == 1 and said[0].startswith("hetsim: warning: workers.1 (w1): not fitted (never given samples")
