"""Predicted against measured time to a target accuracy, for a run made with
``--target-accuracy A --noise-scale``.

The calibrated scenario (:func:`validation.compare.calibrate_run`) gets the workload's
statistical efficiency (:mod:`hetsim.efficiency`): the run's measured gradient noise scale (the
median of its policies' estimates), ``base_batch`` the run's global batch, and ``target_steps``
from ``equal``'s measurement: the steps of the epochs ``equal`` needed to reach the accuracy
(its batches are equal, so every step is worth one step at the base batch). Each policy is then
simulated and its time to target read where its progress reaches ``target_steps``, rounded up
to the end of that epoch, as the real run can only see the accuracy between epochs. With the
weighted combine every policy's update is the union's gradient and the prediction is mostly the
step times'; with ``--combine policy`` the plain mean of uneven batches learns less per step,
which the effective batch accounts for.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hetsim.calibrate import Calibration
from hetsim.config import load_scenario
from hetsim.errors import ConfigError
from hetsim.metrics import step_times, summarize
from hetsim.simulate import simulate
from validation.compare import RunData, scenario_for

REFERENCE = "equal"


@dataclass(frozen=True)
class TargetComparison:
    policy: str
    measured_s: float | None
    predicted_s: float | None

    @property
    def error(self) -> float | None:
        if self.measured_s is None or self.predicted_s is None or self.measured_s <= 0:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s


def run_targets(run: RunData, summary: dict[str, Any]) -> tuple[float, float, int]:
    """The run's target accuracy, measured noise scale (from its ``summary``) and ``equal``'s
    epochs to the target."""
    target = run.meta.get("config", {}).get("target_accuracy")
    if target is None:
        raise ConfigError("run_dir", f"{run.path} was run without --target-accuracy")
    scales = [p["noise_scale"] for p in summary["policies"] if p.get("noise_scale") is not None]
    if not scales:
        raise ConfigError("run_dir", f"{run.path} has no noise scale estimate (run it with --noise-scale)")
    epochs = pd.read_csv(run.path / "epochs.csv")
    reached = epochs[(epochs["policy"] == REFERENCE) & (epochs["test_accuracy"] >= target)]
    if reached.empty:
        raise ConfigError("run_dir", f"{REFERENCE} never reached accuracy {target:g}: no target to calibrate on")
    return float(target), float(statistics.median(scales)), int(reached["epoch"].min()) + 1


def predict_time_to_target(run: RunData, calibration: Calibration) -> list[TargetComparison]:
    """Every policy's measured and predicted time to the run's target accuracy."""
    summary = json.loads((run.path / "summary.json").read_text(encoding="utf-8"))
    _, noise_scale, reference_epochs = run_targets(run, summary)
    per_epoch = int(run.meta["steps_per_epoch"])
    measured = {p["policy"]: p.get("time_to_target_s") for p in summary["policies"]}
    efficiency = {
        "noise_scale": noise_scale,
        "base_batch": int(run.meta["global_batch"]),
        "target_steps": float(reference_epochs * per_epoch),
    }
    out = []
    for policy in run.policies:
        scenario: dict[str, Any] = scenario_for(run, calibration, policy, int(run.meta["epochs"]))
        scenario["workload"]["efficiency"] = efficiency
        loaded = load_scenario(scenario)
        trace = simulate(loaded, policy)
        reached = summarize(trace, loaded).time_to_target_s
        predicted = None
        if reached is not None:
            ends = np.cumsum(step_times(trace))
            step = int(np.searchsorted(ends, reached - 1e-12))
            predicted = float(ends[min(len(ends), (step // per_epoch + 1) * per_epoch) - 1])
        out.append(TargetComparison(policy, measured.get(policy), predicted))
    return out
