"""Predicted against measured time to a target accuracy, for a run made with
``--target-accuracy A --noise-scale``.

The calibrated scenario (:func:`validation.compare.calibrate_run`) gets the workload's
statistical efficiency (:mod:`hetsim.efficiency`): the run's measured gradient noise scale (the
median of its per-epoch estimates), ``base_batch`` the run's global batch, and ``target_steps``
from ``equal``'s measurement: the steps of the epochs ``equal`` needed to reach the accuracy
(its batches are equal, so every step is worth one step at the base batch). Each policy is then
simulated and its time to target read where its progress reaches ``target_steps``, rounded up
to the end of that epoch, as the real run can only see the accuracy between epochs. With the
weighted combine every policy's update is the union's gradient and the prediction is mostly the
step times'; with ``--combine policy`` the plain mean of uneven batches learns less per step,
which the effective batch accounts for. ``goodput`` changes its batch, so its epochs hold fewer
steps of more samples, each worth the gain of its batch: the prediction that tests the noise
scale's model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hetsim.calibrate import Calibration
from hetsim.config import load_scenario
from hetsim.efficiency import Efficiency
from hetsim.errors import ConfigError
from hetsim.metrics import progress_curve, step_times
from hetsim.simulate import simulate
from hetsim.trace import Trace
from validation.compare import RunData, measured_noise_scale, scenario_for

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


def run_targets(run: RunData) -> tuple[float, float, int]:
    """The run's target accuracy, measured noise scale (:func:`measured_noise_scale`) and
    ``equal``'s epochs to the target."""
    target = run.meta.get("config", {}).get("target_accuracy")
    if target is None:
        raise ConfigError("run_dir", f"{run.path} was run without --target-accuracy")
    noise_scale = measured_noise_scale(run)
    if noise_scale is None:
        raise ConfigError("run_dir", f"{run.path} has no noise scale estimate (run it with --noise-scale)")
    epochs = pd.read_csv(run.path / "epochs.csv")
    reached = epochs[(epochs["policy"] == REFERENCE) & (epochs["test_accuracy"] >= target)]
    if reached.empty:
        raise ConfigError("run_dir", f"{REFERENCE} never reached accuracy {target:g}: no target to calibrate on")
    return float(target), noise_scale, int(reached["epoch"].min()) + 1


def predict_time_to_target(run: RunData, calibration: Calibration) -> list[TargetComparison]:
    """Every policy's measured and predicted time to the run's target accuracy."""
    summary = json.loads((run.path / "summary.json").read_text(encoding="utf-8"))
    _, noise_scale, reference_epochs = run_targets(run)
    measured = {p["policy"]: p.get("time_to_target_s") for p in summary["policies"]}
    efficiency = Efficiency(noise_scale, int(run.meta["global_batch"]),
                            float(reference_epochs * int(run.meta["steps_per_epoch"])))  # fmt: skip
    every_weighted = run.meta.get("config", {}).get("combine", "weighted") == "weighted"
    out = []
    for policy in run.policies:
        trace = simulate(load_scenario(scenario_for(run, calibration, policy, int(run.meta["epochs"]))), policy)
        out.append(
            TargetComparison(policy, measured.get(policy), _epoch_end_reaching(trace, efficiency, every_weighted))
        )
    return out


def _epoch_end_reaching(trace: Trace, efficiency: Efficiency, every_weighted: bool) -> float | None:
    """When the epoch in which the progress reaches the target ends (the real run sees the
    accuracy only between epochs); progress with the run's combine (``every_weighted``: the
    weighted one for every policy, whatever its trait)."""
    assert efficiency.target_steps is not None
    progress = progress_curve(trace, efficiency, True if every_weighted else None)
    if progress[-1] < efficiency.target_steps:
        return None
    step = int(np.searchsorted(progress, efficiency.target_steps))
    epochs = trace.per_step("epoch")[:, 0]
    last = int(np.flatnonzero(epochs == epochs[step])[-1])
    return float(np.cumsum(step_times(trace))[last])
