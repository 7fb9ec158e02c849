"""How well the simulator predicts a real run.

Calibrates a scenario (:func:`hetsim.calibrate.calibrate`) on one segment of a run folder's
trace (by default the probe, which steps every rank through several local batch sizes, so
overhead and per-sample cost are identifiable), sets its workload to the run's (global batch,
steps per epoch, the epochs each policy finished), simulates every policy of the run on it with
hetsim, and sets predicted against measured mean step time, total time and final split.
Errors are relative: ``(predicted - measured) / measured``. No torch here.

A prediction reproduces what the real run did, so a simulated policy is told what the real one
was told: a policy that needs or uses costs (``proportional``, ``optimal``, ``goodput``) gets
the costs the real policy got from the probe's first rounds (the same fit,
:func:`~validation.probe.first_block_hints`), not the calibrated scenario's curves (every probe
round: what it never knew); where those are off (a noisy rank at the margin of being left out),
the simulation makes the real split and predicts its step time. The other policies are told no
costs in a real run and use none in hetsim's (``dynamic`` only for the analysis). A cross-run
prediction (:func:`compare_across`) tells them the calibrated (re-injected) curves."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from hetsim.calibrate import Calibration, HingeCurve, TableCurve, WorkerFit, calibrate
from hetsim.core.console import text_table
from hetsim.core.errors import ConfigError
from hetsim.model.costs import CostModel
from hetsim.model.trace import Trace
from hetsim.policies import Policy, WorkerHint, planned_policy, policy_class
from hetsim.policies.base import told
from hetsim.run.metrics import Summary, summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from validation.calibrated_noise import noise_scenario
from validation.probe import PROBE, first_block_hints, told_costs
from validation.reinject import reinjected
from validation.run_folder import RunData
from validation.run_folder import load_run as load_run  # where scripts and notebooks found it before run_folder.py


@dataclass(frozen=True)
class Comparison:
    policy: str
    measured: Summary
    predicted: Summary

    @staticmethod
    def _error(predicted: float, measured: float) -> float:
        return (predicted - measured) / measured if measured > 0 else float("inf")

    @property
    def step_error(self) -> float:
        return self._error(self.predicted.mean_step_s, self.measured.mean_step_s)

    @property
    def total_error(self) -> float:
        return self._error(self.predicted.total_time_s, self.measured.total_time_s)

    def cells(self) -> tuple[str, ...]:
        """The printed columns: step measured, predicted, error; total measured, predicted, error; splits."""
        return (
            f"{1e3 * self.measured.mean_step_s:.2f}ms",
            f"{1e3 * self.predicted.mean_step_s:.2f}ms",
            f"{100 * self.step_error:+.1f}%",
            f"{self.measured.total_time_s:.3f}s",
            f"{self.predicted.total_time_s:.3f}s",
            f"{100 * self.total_error:+.1f}%",
            f"{'/'.join(map(str, self.measured.final_batches))} -> {'/'.join(map(str, self.predicted.final_batches))}",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "measured_step_s": self.measured.mean_step_s,
            "predicted_step_s": self.predicted.mean_step_s,
            "error": self.step_error,
            "measured_total_s": self.measured.total_time_s,
            "predicted_total_s": self.predicted.total_time_s,
            "total_error": self.total_error,
            "measured_final_split": list(self.measured.final_batches),
            "predicted_final_split": list(self.predicted.final_batches),
        }


def calibrate_run(run: RunData, calibrate_on: str = PROBE, model: type[CostModel] | None = None) -> Calibration:
    """The calibration of ``run``'s ``calibrate_on`` rows as ``hetsim calibrate --model MODEL``
    fits it (``model`` None: each rank's cost curve chosen by held-out error), its scenario with the
    noise's shared part and persistence where they are clear
    (:func:`~validation.calibrated_noise.noise_scenario`)."""
    rows = run.trace[run.trace["policy"] == calibrate_on]
    if rows.empty:
        known = ", ".join(dict.fromkeys(run.trace["policy"].astype(str)))
        raise ConfigError("--calibrate-on", f"the run has no rows for {calibrate_on!r} (it has: {known})")
    calibration = calibrate(rows.drop(columns=["policy"]), name=f"{run.path.name}-{calibrate_on}", model=model,
                            scheduled_split=calibrate_on == PROBE)  # fmt: skip
    return replace(calibration, scenario=noise_scenario(calibration))


def scenario_for(run: RunData, calibration: Calibration, policy: str, epochs: int) -> dict[str, Any]:
    """The calibrated scenario with the run's workload and ``policy``; for a policy that varies
    its batch, the run's ``--max-batch`` and, as its workload's efficiency, the table the run was
    given (``--efficiency``), else its measured noise scale (:func:`noise_scale_of`)."""
    scenario = dict(calibration.scenario)
    global_batch = run.meta["global_batch"]
    scenario["workload"] = {
        "global_batch": global_batch,
        "dataset_size": global_batch * run.meta["steps_per_epoch"],
        "epochs": epochs,
        "gradient_mb": run.meta["gradient_mb"],
    }
    scenario["seed"] = run.meta["config"]["seed"]
    scenario["policy"] = {"name": policy}
    if policy_class(policy).needs_efficiency:
        efficiency = run.meta["config"].get("efficiency")
        if efficiency is None:
            noise = noise_scale_of(read_epochs(run))  # the median of its epochs' estimates
            if noise is None:
                raise ConfigError("run_dir", f"{run.path} has no noise scale estimate, which {policy} needs")
            efficiency = {"noise_scale": noise, "base_batch": global_batch}
        scenario["workload"]["efficiency"] = efficiency
    if policy_class(policy).varies_batch and run.meta["config"]["max_batch"] is not None:
        scenario["policy"]["max_batch"] = run.meta["config"]["max_batch"]
    return scenario


def noise_scale_of(epochs: pd.DataFrame | None) -> float | None:
    """The median of the numeric values of ``epochs``'s ``noise_scale`` column (None without)."""
    if epochs is None:
        return None
    scales = pd.to_numeric(epochs.get("noise_scale", pd.Series(dtype=float)), errors="coerce").dropna()
    return float(scales.median()) if not scales.empty else None


def read_epochs(run: RunData) -> pd.DataFrame | None:
    """The run's ``epochs.csv`` (None without one)."""
    return read_csv(run.path / "epochs.csv") if (run.path / "epochs.csv").is_file() else None


def read_csv(path: Path) -> pd.DataFrame:
    """A run folder's CSV table; one that cannot be read is a ConfigError naming it."""
    try:
        return pd.read_csv(path)
    except ValueError as exc:  # pandas' ParserError and EmptyDataError, and UnicodeDecodeError, are ValueErrors
        problem = next(iter(str(exc).splitlines()), "") or type(exc).__name__
        raise ConfigError(str(path), f"not a readable CSV table: {problem}") from None


def first_epochs(trace: Trace, epochs: int) -> Trace:
    """The steps of ``trace``'s first ``epochs`` epochs (a simulated run of a policy that varies
    its batch keeps the workload's step budget, more than the real run's epochs need)."""
    frame = trace.to_frame()
    return Trace.from_frame(frame[frame["epoch"] < epochs])


def compare_run(
    run: RunData, calibrate_on: str = PROBE, model: type[CostModel] | None = None
) -> tuple[list[Comparison], Calibration]:
    """Predicted vs measured for every policy of the run (the probe itself is not compared),
    calibrated with each rank's cost ``model`` (:func:`calibrate_run`); the policies that need or
    use costs told the real ones' (the module's docstring)."""
    calibration = calibrate_run(run, calibrate_on, model)
    return predict_run(run, calibration, hints=told_hints(run)), calibration


def told_hints(run: RunData) -> tuple[WorkerHint, ...] | None:
    """The costs ``run``'s cost-aware policies were told (:func:`~validation.probe.first_block_hints`);
    None without a policy that needs or uses them; without probe rows (then none needs them),
    hints without costs, as the real ones were told."""
    if not told_costs(run.policies):
        return None
    hints = first_block_hints(run.trace, run.meta["world_size"])
    return hints if hints is not None else (WorkerHint(),) * run.meta["world_size"]


def predict_run(
    run: RunData,
    calibration: Calibration,
    workers: Sequence[dict[str, Any]] | None = None,
    hints: Sequence[WorkerHint] | None = None,
) -> list[Comparison]:
    """Every policy of ``run``, measured and simulated on ``calibration``'s scenario with the
    run's workload (and ``workers`` in place of the calibrated ones when given); a policy that
    needs or uses costs is told ``hints`` when given (:func:`told`), else the scenario's."""
    out = []
    for policy in run.policies:
        rows = run.trace[run.trace["policy"] == policy]
        measured = summarize(Trace.from_frame(rows))
        epochs = int(rows["epoch"].max()) + 1
        scenario = scenario_for(run, calibration, policy, epochs)
        if workers is not None:
            scenario["workers"] = list(workers)
        loaded = load_scenario(scenario)
        simulated = simulate(loaded, told(run_policy(run.meta, policy, loaded.named_policy(policy)), hints))
        if policy_class(policy).varies_batch:
            simulated = first_epochs(simulated, epochs)
        out.append(Comparison(policy, measured, summarize(simulated)))
    return out


def run_policy(meta: Mapping[str, Any], name: str, made: Policy) -> Policy:
    """The policy ``name`` as the run applied it: a plan's split where the run kept it (meta.json's
    ``plan``, :meth:`~validation.uneven.PlanChoice.record`; the plan was made from the profile's
    costs, which the simulation is not told), else ``made``."""
    plan = meta.get("plan")
    if plan is not None and plan["fixed"] and plan["policy"] == name:
        return planned_policy(policy_class(name), plan["split"])
    return made


def compare_across(
    source: RunData, target: RunData, calibrate_on: str = PROBE, calibration: Calibration | None = None
) -> list[Comparison]:
    """Cross-run: calibrated on ``source`` (``calibration``, when the caller has it already) and
    predicting ``target``, a run that differs in one controlled way. What differs in the runs'
    injected delays is replayed on the calibrated workers (:func:`reinjected`); a different
    global batch, policy or epoch count needs nothing."""
    calibration = calibration or calibrate_run(source, calibrate_on)
    workers = reinjected(calibration.scenario["workers"], source.meta, target.meta)
    return predict_run(target, calibration, workers)


def median_abs_error(comparisons: Sequence[Comparison]) -> float:
    return float(statistics.median(abs(c.step_error) for c in comparisons)) if comparisons else float("nan")


def _exchange_s(calibration: Calibration) -> float:
    """The calibrated network's all-reduce among the run's ranks, of its gradient."""
    n = len(calibration.workers) + len(calibration.idle)
    return calibration.network.allreduce_s(n, calibration.gradient_mb)


def format_table(comparisons: Sequence[Comparison], calibration: Calibration, calibrate_on: str) -> str:
    lines = [
        f"calibrated on {calibrate_on!r}: "
        + "; ".join(_worker_line(w, entry) for w, entry in zip(calibration.workers, _fitted_entries(calibration)))
        + f"; exchange {1e3 * _exchange_s(calibration):.2f} ms"
    ]
    lines.extend(f"warning: {w}" for w in calibration.warnings)
    header = ("policy", "step meas", "step pred", "error", "total meas", "total pred", "error", "split meas -> pred")
    rows = [(c.policy, *c.cells()) for c in comparisons]
    lines.append(text_table(header, rows, left={0, len(header) - 1}))
    lines.append(
        f"median |error| of the mean step time: {100 * median_abs_error(comparisons):.1f}% "
        f"over {len(comparisons)} policies"
    )
    return "\n".join(lines)


def _fitted_entries(calibration: Calibration) -> list[dict[str, Any]]:
    """The scenario's entries of the fitted workers, in the order of ``calibration.workers``."""
    by_name = {entry.get("name"): entry for entry in calibration.scenario["workers"]}
    return [by_name.get(f"w{w.worker}", {}) for w in calibration.workers]


def _worker_line(fit: WorkerFit, entry: Mapping[str, Any]) -> str:
    """A fitted rank as simulated: its cost curve and its noise (sigma, and the persistence and
    shared factor where written)."""
    noise, shared = entry.get("noise", {}), entry.get("shared_noise")
    parts = [f"noise {noise.get('sigma', fit.noise_sigma):.2f}"]
    if noise.get("persistence"):
        parts.append(f"persistence {noise['persistence']:.2f}")
    if shared:
        parts.append(f"shared {shared['sigma']:.2f}, its persistence {shared.get('persistence', 0.0):.2f}")
    return f"rank {fit.worker} {_curve_text(fit)} ({'; '.join(parts)})"


def _curve_text(fit: WorkerFit) -> str:
    """The chosen cost curve in words: affine and hinge by their terms, a table by its size."""
    line = f"{1e3 * fit.overhead_s:.2f} ms + {1e6 * fit.per_sample_s:.1f} us/sample"
    values = fit.cost_curve().params()
    if isinstance(fit.curve, HingeCurve):
        floor, overhead, per_sample = (values[k] for k in ("floor_s", "overhead_s", "per_sample_s"))
        return f"hinge: at least {1e3 * floor:.2f} ms, {1e3 * overhead:.2f} ms + {1e6 * per_sample:.1f} us/sample"
    if isinstance(fit.curve, TableCurve):
        return f"table of {len(values)} batch sizes (affine fit {line})"
    return line


def worst_error(comparisons: Sequence[Comparison]) -> float:
    return max((max(abs(c.step_error), abs(c.total_error)) for c in comparisons), default=0.0)
