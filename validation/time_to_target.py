"""Predicted against measured time to a target accuracy, for a run made with
``--target-accuracy A`` and ``--noise-scale`` (or ``--efficiency FILE``).

The calibrated scenario (:func:`validation.compare.calibrate_run`) gets the workload's
statistical efficiency (:mod:`hetsim.model.efficiency`): the run's measured gradient noise scale (the
median of its per-epoch estimates) with ``base_batch`` the run's global batch, or the table the
run was given, with its own base batch; and ``target_steps`` from ``equal``'s measurement: the
progress of its steps to the first held-out evaluation that reached the accuracy, in steps at the
base batch (:func:`table_target`: each step worth its gain at its effective batch, one at the
base batch). Each policy
is then simulated and its time to target read where its progress reaches ``target_steps``,
rounded up to the next step after which the real run evaluates (the end of an epoch, or with
``--eval-every K`` every K steps of an epoch too), as it sees the accuracy only there. With the
weighted combine every policy's update is the union's gradient and the prediction is mostly the
step times'; with ``--combine policy`` the plain mean of uneven batches learns less per step,
which the effective batch accounts for. ``goodput`` changes its batch, so its epochs hold fewer
steps of more samples, each worth the gain of its batch: the prediction that tests the noise
scale's model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from hetsim.calibrate import Calibration
from hetsim.core.errors import ConfigError
from hetsim.core.params import Param, typename
from hetsim.model.efficiency import Efficiency, effective_batches
from hetsim.model.trace import Trace
from hetsim.policies import policy_class
from hetsim.run.metrics import combines_by_batch, progress_curve, reaching_step, step_times
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario, make_efficiency, read_table
from validation.compare import noise_scale_of, read_csv, read_epochs, scenario_for, told, told_hints
from validation.run_folder import RunData

REFERENCE = "equal"  # the policy whose steps to the target calibrate the progress model, when the run has it


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


def reference_policy(run: RunData) -> str:
    """The policy whose steps to the target calibrate the progress model: ``equal``, else the
    run's first policy at a fixed global batch (under the weighted combine every such policy
    learns alike per step); ConfigError when every policy changes its batch."""
    fixed = [p for p in run.policies if not policy_class(p).varies_batch]
    if not fixed:
        raise ConfigError("run_dir", f"{run.path}: every policy changes its global batch ({', '.join(run.policies)}); "
                          f"run one at a fixed batch beside them ({REFERENCE}) to calibrate the target on")  # fmt: skip
    return REFERENCE if REFERENCE in fixed else fixed[0]


def run_targets(run: RunData) -> tuple[float, float | None, int]:
    """The run's target accuracy, measured noise scale (:func:`~validation.compare.noise_scale_of`;
    None where the run was given an efficiency table instead) and the reference policy's
    (:func:`reference_policy`) steps to its first evaluation that reached the target: from
    ``evals.csv`` (every evaluation), or in a folder written before it, from ``epochs.csv``."""
    target = run.meta["config"]["target_accuracy"]
    if target is None:
        raise ConfigError("run_dir", f"{run.path} has no target accuracy: --time-to-target needs a `validation run` "
                          "with --target-accuracy (and --noise-scale or --efficiency)")  # fmt: skip
    epochs = read_epochs(run)
    noise_scale = noise_scale_of(epochs)
    if epochs is None or (noise_scale is None and not run.meta["config"].get("efficiency")):
        raise ConfigError("run_dir", f"{run.path} has no noise scale estimate (run it with --noise-scale, or "
                          "--efficiency)")  # fmt: skip
    reference = reference_policy(run)
    evals = run.path / "evals.csv"
    if evals.is_file():
        reached = _first_reaching(read_csv(evals), target, f"{evals}:", "step", reference)
    else:
        epoch = _first_reaching(epochs, target, f"{run.path / 'epochs.csv'}:", "epoch", reference)
        reached = None if epoch is None else (epoch + 1) * run.meta["steps_per_epoch"]
    if reached is None:
        raise ConfigError("run_dir", f"{reference} never reached accuracy {target:g}: no target to calibrate on")
    return float(target), noise_scale, reached


def _first_reaching(table: pd.DataFrame, target: float, where: str, column: str, policy: str) -> int | None:
    """``column`` (``epoch`` or ``step``) of ``policy``'s first row whose held-out accuracy reached
    ``target`` (None: never); errors name the column after ``where``."""
    missing = [c for c in ("policy", column, "test_accuracy") if c not in table.columns]
    if missing:
        raise ConfigError(f"{where}{missing[0]}", "missing column")
    ours = table[table["policy"].astype(str) == policy]
    accuracy = pd.to_numeric(ours["test_accuracy"], errors="coerce")  # not a number: not reached
    value = pd.to_numeric(ours[column], errors="coerce")
    bad = value.isna() | (value < 0) | (value % 1 != 0)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        got = ours[column].iloc[row]
        raise ConfigError(f"{where}{column}", f"must be a whole number >= 0, got {got!r} ({policy}'s row {row + 1})")
    reached = value[accuracy >= target]
    return int(reached.min()) if not reached.empty else None


def measured_times(run: RunData) -> dict[str, float | None]:
    """Each policy's measured time to the target (``summary.json``; None: never reached)."""
    path = run.path / "summary.json"
    policies = read_table(path).get("policies")
    where = f"{path}:policies"
    if not isinstance(policies, list):
        raise ConfigError(where, "missing" if policies is None else f"must be a list, got {typename(policies)}")
    out: dict[str, float | None] = {}
    for i, entry in enumerate(policies):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}.{i}", f"must be a table, got {typename(entry)}")
        if "policy" not in entry:
            raise ConfigError(f"{where}.{i}.policy", "missing")
        name = Param(f"{where}.{i}.policy", "string").check(entry["policy"])
        time = Param(f"{where}.{i}.time_to_target_s", default=None, low=0.0).check(entry.get("time_to_target_s"))
        out[name] = None if time is None else float(time)
    return out


def predict_time_to_target(run: RunData, calibration: Calibration) -> list[TargetComparison]:
    """Every policy's measured and predicted time to the run's target accuracy: progress by the
    efficiency table the run was given (its target steps the reference policy's), else by the
    run's measured noise scale; each policy that reads costs told the probe's, as in the run."""
    measured = measured_times(run)
    _, noise_scale, reference_steps = run_targets(run)
    table = run.meta["config"].get("efficiency")
    every_weighted = run.meta["config"]["combine"] == "weighted"
    given = (make_efficiency(table) if table  # what the run's goodput was told, else the run's own noise scale
             else Efficiency(float(noise_scale or 0.0), run.meta["global_batch"]))  # fmt: skip
    efficiency = table_target(given, reference_batches(run, reference_policy(run), every_weighted)[:reference_steps])
    every = int(run.meta["config"].get("eval_every") or 0)  # 0 in runs from before --eval-every
    hints = told_hints(run)
    out = []
    for policy in run.policies:
        loaded = load_scenario(scenario_for(run, calibration, policy, run.meta["epochs"]))
        trace = simulate(loaded, told(loaded.named_policy(policy), hints))
        predicted = _evaluation_reaching(trace, efficiency, every_weighted, every, run.meta["epochs"])
        out.append(TargetComparison(policy, measured.get(policy), predicted))
    return out


def reference_batches(run: RunData, reference: str, every_weighted: bool) -> np.ndarray:
    """The effective batch of each of the ``reference`` policy's steps (:func:`reference_policy`),
    as the run combined its gradients: the whole global batch under the weighted combine, the
    plain mean's less for an uneven split under ``--combine policy``."""
    rows = run.trace[run.trace["policy"] == reference]
    per_step = [rows.pivot(index="step", columns="worker", values=k).to_numpy() for k in ("local_batch", "included")]
    combine = True if every_weighted else combines_by_batch(reference, None)
    return np.asarray(effective_batches(per_step[0], per_step[1], combine), dtype=float)


def table_target(given: Efficiency, batches: np.ndarray) -> Efficiency:
    """``given`` with its ``target_steps`` the progress the reference policy made in the steps it
    took to the target (``batches``: their effective batches), in steps at the efficiency's base
    batch: their count where each was of the base batch (each such step is worth one); where
    the run ran another batch (a table fitted by a sweep at another base, or a plain mean of an
    uneven split), each worth its gain. No steps (the target read before any): 0."""
    done = given.progress(np.asarray(batches, dtype=float))
    return replace(given, target_steps=float(done[-1]) if done.size else 0.0)


def _evaluation_reaching(trace: Trace, efficiency: Efficiency, every_weighted: bool, every: int,
                         epochs: int) -> float | None:  # fmt: skip
    """When the first evaluation at or after the step whose progress reaches the target comes
    (the real run sees the accuracy only there: after an epoch's last step, and after every
    ``every``-th step of an epoch where ``every`` is not 0); progress with the run's combine
    (``every_weighted``: the weighted one for every policy, whatever its trait). None where it
    comes after the run's ``epochs``: the simulation of a policy that raises its batch (goodput)
    runs the steps of the run's epochs at the base batch, which hold more epochs of its own."""
    assert efficiency.target_steps is not None
    step = reaching_step(progress_curve(trace, efficiency, True if every_weighted else None), efficiency.target_steps)
    epoch_of = trace.per_step("epoch")[:, 0]
    if step is None or epoch_of[step] >= epochs:
        return None
    evaluated = evaluated_steps(epoch_of, every)
    last = step + int(np.argmax(evaluated[step:]))
    return float(np.cumsum(step_times(trace))[last])


def evaluated_steps(epochs: np.ndarray, every: int) -> np.ndarray:
    """Per step of a run whose steps lie in ``epochs`` (never going back), whether the held-out
    set is evaluated after it: an epoch's last step, and with ``every`` (``--eval-every``; 0:
    none) every ``every``-th step of an epoch."""
    evaluated = np.append(epochs[1:] != epochs[:-1], True)
    if every:
        in_epoch = np.arange(epochs.size) - np.searchsorted(epochs, epochs, side="left")
        evaluated |= (in_epoch + 1) % every == 0
    return evaluated
