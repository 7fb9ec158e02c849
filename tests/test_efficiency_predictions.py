"""The steps to the target an efficiency fit predicts, with its intervals: the fitted parameters'
(:meth:`hetsim.model.efficiency_fit.Fit.predict`) and a single run's, the runs' scatter added,
as ``hetsim calibrate-efficiency`` prints them above its table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hetsim.cli.main import main
from hetsim.model.efficiency_fit import fit

STEPS = [100.0, 120.0, 140.0, 90.0, 150.0]  # five seeds' steps at the base batch 16


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
    assert (low, high) == pytest.approx((centre * math.exp(-1.96 * se), centre * math.exp(1.96 * se)), rel=1e-5)
    _, run_low, run_high = f.predict(16, one_run=True)
    wide = 1.96 * math.hypot(se, scatter)
    assert (run_low, run_high) == pytest.approx((centre * math.exp(-wide), centre * math.exp(wide)), rel=1e-5)


def test_without_a_residual_degree_of_freedom_neither_interval_is_known() -> None:
    """One run at each of two batches fixes two parameters exactly: no scatter is measured."""
    f = fit([16.0, 32.0], [100.0, 70.0], 16, noise_scale=40.0)
    centre, low, high = f.predict(64, one_run=True)
    assert centre > 0 and math.isnan(low) and math.isnan(high)


def _sweep(folder: Path, steps: dict[int, list[float]]) -> Path:
    points = [{"batch": b, "seed": s, "steps_to_target": v, "noise_scale": 40.0, "noise_first": 30.0,
               "noise_shape": [[0.0, 1.0]]} for b, runs in steps.items() for s, v in enumerate(runs)]  # fmt: skip
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
    fit_band = [centre * math.exp(k * 1.96 * se) for k in (-1, 1)]
    run_band = [centre * math.exp(k * 1.96 * math.hypot(se, scatter)) for k in (-1, 1)]
    assert lines[0] == (f"#   batch 16: {centre:.0f} ({fit_band[0]:.0f}-{fit_band[1]:.0f}; "
                        f"one run {run_band[0]:.0f}-{run_band[1]:.0f})")  # fmt: skip
    assert len(lines) == 2 and lines[1].startswith("#   batch 32: ") and lines[1].endswith("beyond the batches fitted")
    assert main(["calibrate-efficiency", str(_sweep(tmp_path / "two", {16: [100.0], 64: [50.0]}))]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#   batch ")]
    assert lines[:2] == ["#   batch 16: 100", "#   batch 64: 50"]  # no scatter measured: no interval
    assert len(lines) == 3 and lines[2].startswith("#   batch 128: ") and "(" not in lines[2]
