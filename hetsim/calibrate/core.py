"""A whole trace -> :class:`Calibration`: one policy's rows, every worker, the noise, the network, the workload."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from hetsim.calibrate.caps import shown_caps
from hetsim.calibrate.curves import AUTO, curve_class
from hetsim.calibrate.idle import IdleWorker
from hetsim.calibrate.idle import fit_workers as _fit_workers
from hetsim.calibrate.idle import scenario_workers as _scenario_workers
from hetsim.calibrate.noise import MIN_PAIRS, NoiseStructure, persistence, shared_correlation, shared_sigma
from hetsim.calibrate.worker_fit import WorkerFit, worker_table
from hetsim.core.errors import ConfigError
from hetsim.model.costs import CostModel
from hetsim.model.network import ConstantNetwork, NetworkModel, Ring
from hetsim.model.trace import Trace, check_trace_table
from hetsim.policies import POLICIES


def fit_network(comm_s: np.ndarray, n_workers: np.ndarray, gradient_mb: np.ndarray) -> tuple[NetworkModel, list[str]]:
    """The network a trace's exchanges fit: a :class:`~hetsim.model.network.ConstantNetwork`
    (their mean) when all steps share one (world size, gradient size); else a
    :class:`~hetsim.model.network.Ring`, ``2(n-1) latency + 2(n-1)/n * bytes / bandwidth``, by
    non-negative least squares."""
    comm = np.asarray(comm_s, dtype=float)
    n = np.asarray(n_workers, dtype=float)
    mb = np.asarray(gradient_mb, dtype=float)
    multi = n > 1
    if not multi.any():  # one worker: no exchange, the rest of its step (the update) a constant time
        return ConstantNetwork(time_s=float(comm.mean()) if comm.size else 0.0), []
    comm, n, mb = comm[multi], n[multi], mb[multi]
    if np.unique(np.stack([n, mb]), axis=1).shape[1] == 1:
        return ConstantNetwork(time_s=float(comm.mean())), []
    design = np.stack([2 * (n - 1), 2 * (n - 1) / n * mb * 1e6 * 8 / 1e9], axis=1)  # latency_s, s per Gbit
    (latency, s_per_gbit), _ = optimize.nnls(design, comm)
    if s_per_gbit <= 0:
        warning = "network: comm_s does not grow with the gradient size; fitted a constant exchange time instead"
        return ConstantNetwork(time_s=float(comm.mean())), [warning]
    return Ring(latency_s=float(latency), bandwidth_gbps=float(1.0 / s_per_gbit)), []


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` found in a trace: each worker's fit (``workers``; ``idle`` those with
    too little to fit, kept at what is known of them), the network, the workload's sizes, the
    noise's shared part and persistence, the warnings, and ``scenario``, the scenario-file dict
    that every hetsim command takes."""

    workers: tuple[WorkerFit, ...]
    network: NetworkModel  # the network fitted (constant or ring), a plug-in object as a scenario holds
    global_batch: int
    steps_per_epoch: int
    epochs: int
    gradient_mb: float
    warnings: tuple[str, ...]
    scenario: dict[str, Any]
    noise: NoiseStructure = field(default_factory=lambda: NoiseStructure(None, 0, ()))
    policy: str | None = None  # the policy whose rows were fitted (None: the table has no policy column)
    model: str = AUTO  # the cost model asked for (its name), or auto
    idle: tuple[IdleWorker, ...] = ()  # workers with too few complete computes to fit, kept in the scenario

    def to_dict(self) -> dict[str, Any]:
        """The fit as JSON-ready data (``calibrate --json``)."""
        return {
            "policy": self.policy,
            "model": self.model,
            "workers": worker_table(self.workers),
            "idle_workers": [i.to_dict() for i in self.idle],
            "noise": self.noise.to_dict(),
            "network": self.network.to_dict(),
            "workload": {
                "global_batch": self.global_batch,
                "steps_per_epoch": self.steps_per_epoch,
                "epochs": self.epochs,
                "gradient_mb": self.gradient_mb,
            },
            "warnings": list(self.warnings),
            "scenario": self.scenario,
        }


def trace_policies(frame: pd.DataFrame) -> list[str]:
    """The policies of a trace table, in order of first appearance ([] without a policy column)."""
    return [str(p) for p in dict.fromkeys(frame["policy"].astype(str))] if "policy" in frame.columns else []


def calibrate(trace: Trace | pd.DataFrame, name: str = "calibrated", *, policy: str | None = None,
              model: type[CostModel] | None = None, scheduled_split: bool = False) -> Calibration:  # fmt: skip
    """Fit a scenario to ``trace``: one ``[[workers]]`` entry per trace worker (``count = 1``,
    in worker order), each with the cost model ``model`` (its class: Affine, Hinge or Table; None:
    chosen per worker by held-out error). A
    table of several policies needs ``policy`` (unless their step numbers never meet, as in a
    table pooled on purpose). ``scheduled_split``: the split followed a schedule set before the
    run (a probe's rounds), not the times, so no warning that a split that reacts to persistent
    noise biases the fit. The ``scenario`` loads with :func:`hetsim.scenario.config.load_scenario`."""
    asked = AUTO if model is None else curve_class(model).name
    frame = check_trace_table(trace.to_frame() if isinstance(trace, Trace) else trace)
    frame, chosen, warnings = _policy_rows(frame, policy)
    if "step" not in frame.columns:  # rows of a worker in order are its steps
        frame["step"] = frame.groupby("worker").cumcount()
    _check_steps(frame, chosen)
    every = frame  # the workload and the exchange are the whole cluster's, failed workers included
    frame = _rows_to_fit(frame, warnings).sort_values(["worker", "step"], kind="stable")
    done = _included(frame)
    workers = sorted(int(w) for w in frame["worker"].unique())
    fits, idle = _fit_workers(frame, done, workers, model, warnings)
    cut = sum(f.cancelled for f in fits)
    if cut:
        warnings.append(
            f"trace: {cut} rows cut at the barrier (included = false) were fitted as censored times (the compute took "
            "at least compute_s; lognormal noise assumed)"
        )
    noise = _noise(frame, done, fits, workers)
    warnings.extend([] if scheduled_split else _reacting_split(frame, noise, fits))
    updates = one_worker_per_step(every)  # an asynchronous trace: a row is one update
    workload, network = _workload(every, updates, warnings), _network(every, updates, warnings)
    global_batch, steps_per_epoch, epochs, gradient_mb = workload
    scenario = {
        "name": name,
        "description": f"calibrated from a trace of {len(workers)} workers ({len(frame)} rows)",
        "seed": 0,
        "workload": {
            "global_batch": global_batch,
            "dataset_size": global_batch * steps_per_epoch,
            "epochs": epochs,
            "gradient_mb": gradient_mb,
        },
        "network": network.to_dict(),
        "workers": _scenario_workers(fits, idle, shown_caps(frame, chosen, warnings)),
        "policy": {"name": chosen if chosen in POLICIES else "equal"},
    }
    return Calibration(
        tuple(fits),
        network,
        global_batch,
        steps_per_epoch,
        epochs,
        gradient_mb,
        tuple(warnings),
        scenario,
        noise,
        chosen,
        asked,
        tuple(idle),
    )


def _policy_rows(frame: pd.DataFrame, policy: str | None) -> tuple[pd.DataFrame, str | None, list[str]]:
    """The rows of the policy to fit and its name; several policies only with ``policy``."""
    found = trace_policies(frame)
    if policy is not None and not isinstance(policy, str):  # the rows' label, not what ran them
        raise ConfigError("policy", f"the label of a policy's rows in the trace (such as 'dynamic'), not {policy!r}")
    if policy is not None:
        if not found:
            raise ConfigError("policy", "the trace has no policy column to choose rows by")
        if policy not in found:
            raise ConfigError("policy", f"no rows of {policy!r} in the trace (it has: {', '.join(found)})")
        return frame[frame["policy"].astype(str) == policy].copy(), policy, []
    if len(found) <= 1:
        return frame, (found[0] if found else None), []
    if "step" not in frame.columns or frame.duplicated(["step", "worker"]).any():
        raise ConfigError(
            "policy",
            f"the trace holds {len(found)} policies ({', '.join(found)}); calibrate one at a time, chosen by its label",
        )
    note = f"trace: pooled the rows of {len(found)} policies ({', '.join(found)}), whose steps never meet"
    return frame, None, [note]


def _rows_to_fit(frame: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """The rows the fits take, with ``warnings`` of what they cannot tell: the rows of workers
    that were up (a failed worker's rows, ``up`` false, computed nothing
    and tell nothing of its cost (their zero times would be fitted as cut at zero), or computed
    after waiting out a repair (``equal``, ``async``), which are left out too, losing a few rows
    but biasing nothing: when a worker fails does not depend on its compute times); rows slowed
    by an episode are kept, with a warning (:func:`_slowed_rows`)."""
    up = _flags(frame, "up")
    warnings.extend(_slowed_rows(frame.loc[up]))
    if up.all():
        return frame
    down = ~up
    workers = ", ".join(str(int(w)) for w in sorted(frame.loc[down, "worker"].unique()))
    count = int(down.sum())
    warnings.append(f"trace: {count} rows of failed workers (up = false; worker {workers}) left out of the fits "
                    "(the written scenario has no failures)")  # fmt: skip
    return frame.loc[~down].copy()


def _slowed_rows(frame: pd.DataFrame) -> list[str]:
    """A warning where rows ran slowed by an episode (a simulated trace's ``slowdown`` above 1):
    the fits take their times for the worker's cost and noise (on shared-cluster an equal trace's
    fitted sigma was about three times the workers' own), and the written scenario has no
    episodes."""
    if "slowdown" not in frame.columns:
        return []
    slowed = pd.to_numeric(frame["slowdown"], errors="coerce").to_numpy(dtype=float) > 1
    if not slowed.any():
        return []
    workers = ", ".join(str(int(w)) for w in sorted(frame.loc[slowed, "worker"].unique()))
    return [
        f"trace: {int(slowed.sum())} rows ({slowed.mean():.0%}; worker {workers}) ran slowed by an episode "
        "(slowdown > 1): their times are fitted as the workers' cost and noise, and the written scenario has no "
        "episodes (give its workers a slowdown table, or fit a trace without them)"
    ]


def one_worker_per_step(frame: pd.DataFrame) -> bool:
    """Whether every step is one worker's (an asynchronous trace: a row is one update) among several."""
    return bool(frame["worker"].nunique() > 1 and frame.groupby("step")["worker"].nunique().max() == 1)


def _check_steps(frame: pd.DataFrame, policy: str | None) -> None:
    """Each (step, worker) once: otherwise the table holds several runs that cannot be told apart."""
    dup = frame.duplicated(["step", "worker"])
    if not dup.any():
        return
    row = frame[dup].iloc[0]
    where = f"step {int(row['step'])} of worker {int(row['worker'])} appears twice"
    if "policy" not in frame.columns:
        raise ConfigError("trace", f"{where}: the table holds several runs and no policy column to tell them apart")
    raise ConfigError("step", f"{where} in the rows of {policy!r}: the table holds several runs of it")


def _included(frame: pd.DataFrame) -> np.ndarray:
    """The ``included`` column as booleans (all true without one)."""
    return _flags(frame, "included")


def _flags(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A true/false column (``included``, ``up``) as booleans (all true without it), read strictly
    by :func:`~hetsim.model.trace.check_trace_table`, whose file order its errors count in."""
    if column not in frame.columns:
        return np.ones(len(frame), dtype=bool)
    return frame[column].to_numpy(dtype=bool)


def _noise(frame: pd.DataFrame, done: np.ndarray, fits: list[WorkerFit], workers: list[int]) -> NoiseStructure:
    """The common factor's sigma from every fitted worker's rows around its fitted curve (cut
    rows censored); the persistence from complete log-residuals around each worker's mean log
    time at each batch size (not around the curve, whose misfit would pass for persistent
    noise; sizes seen once tell nothing and are left out)."""
    fitted = {f.worker: i for i, f in enumerate(fits)}
    keep = (frame["local_batch"].to_numpy() > 0) & frame["worker"].isin(list(fitted)).to_numpy()
    rows = frame.loc[keep]
    index = rows["worker"].map(fitted).to_numpy()
    b, y = rows["local_batch"].to_numpy(dtype=float), rows["compute_s"].to_numpy(dtype=float)
    resid = np.log(y)
    for i, fit in enumerate(fits):
        mine = index == i
        resid[mine] -= np.log(fit.cost_curve().time_s(b[mine]))
    sigma = np.array([f.noise_sigma for f in fits])
    shared_steps = int((rows.groupby("step")["worker"].size() >= 2).sum())
    told = sigma.size > 1 and shared_steps >= MIN_PAIRS  # a step of one worker says nothing of what steps share
    tau = shared_sigma(rows["step"].to_numpy(), index, resid, ~done[keep], sigma) if told else None
    complete = keep & done
    logs = frame.loc[complete, ["step", "worker", "local_batch"]].assign(log=np.log(frame.loc[complete, "compute_s"]))
    group = logs.groupby(["worker", "local_batch"])["log"]
    logs = logs.assign(e=logs["log"] - group.transform("mean"), n=group.transform("size"))
    logs = logs[logs["n"] > 1]
    lag1 = persistence(logs["step"].to_numpy(), logs["worker"].to_numpy(), logs["e"].to_numpy(), workers)
    return NoiseStructure(None if tau is None else shared_correlation(tau, sigma), shared_steps, lag1, tau)


def _reacting_split(frame: pd.DataFrame, noise: NoiseStructure, fits: list[WorkerFit]) -> list[str]:
    """A worker whose noise persists while its batch changes from step to step: if the split
    reacts to the times (dynamic with short epochs, adaptive), the batch follows the noise and
    least squares of time on batch is biased."""
    notes = []
    lags = dict(zip(sorted(frame["worker"].unique()), noise.persistence))
    for fit in fits:
        lag = lags.get(fit.worker)
        if lag is None or lag <= max(0.1, 3 / math.sqrt(fit.rows)):
            continue
        batches = frame.loc[frame["worker"] == fit.worker].sort_values("step")["local_batch"].to_numpy()
        if (np.diff(batches) != 0).mean() > 0.1:
            notes.append(
                f"worker {fit.worker}: its noise persists (lag-1 {lag:.2f}) while its batch changes from step to "
                "step; where the split reacts to the times the batch follows the noise and the fitted cost is "
                "biased: calibrate on a fixed split (equal) or on longer epochs"
            )
    return notes


def _workload(frame: pd.DataFrame, updates: bool, warnings: list[str]) -> tuple[int, int, int, float]:
    """Global batch, steps per epoch, epochs and gradient size. In an asynchronous trace a row is
    one worker's update (``updates``): the global batch is the workers' median updates' sum (what a split of it
    hands each), and an epoch's steps its updates over the workers (as the engines count them)."""
    per_step = frame.groupby("step")
    if updates:
        global_batch = int(round(float(frame.groupby("worker")["local_batch"].median().sum())))
    else:
        global_batch = int(round(float(per_step["local_batch"].sum().median())))
    if global_batch < 1:
        raise ConfigError("local_batch", "the median step processed no samples")
    steps_per_epoch, epochs, note = _epochs(frame)
    if updates:
        steps_per_epoch = max(1, int(round(steps_per_epoch / frame["worker"].nunique())))
    warnings.extend(note)
    gradient_mb = float(per_step["gradient_mb"].first().median()) if "gradient_mb" in frame.columns else 0.0
    return global_batch, steps_per_epoch, epochs, gradient_mb


def _network(frame: pd.DataFrame, updates: bool, warnings: list[str]) -> NetworkModel:
    if "comm_s" not in frame.columns:
        warnings.append("network: the trace has no comm_s column; the all-reduce time is set to 0")
        return ConstantNetwork(time_s=0.0)
    per_step = frame.groupby("step")
    if updates:  # each update's own exchange: a constant network's time is one exchange
        return ConstantNetwork(time_s=float(frame["comm_s"].mean()))
    gradient = per_step["gradient_mb"].first().to_numpy() if "gradient_mb" in frame.columns else None
    network, notes = fit_network(
        per_step["comm_s"].first().to_numpy(),
        per_step["worker"].nunique().to_numpy(),
        gradient if gradient is not None else np.zeros(per_step.ngroups),
    )
    warnings.extend(notes)
    return network


def _epochs(frame: pd.DataFrame) -> tuple[int, int, list[str]]:
    """Steps per epoch and epochs. With an epoch column and two or more epochs the steps per
    epoch are the median stride between epochs' first steps, so a trace with one row per
    epoch (an imported log, whose ``step`` counts the run's real steps) keeps its epoch length."""
    steps = np.sort(frame["step"].unique())
    if "epoch" not in frame.columns:
        return int(steps.size), 1, []
    first = frame.groupby("epoch")["step"].min().sort_values().to_numpy()
    rows = frame.groupby("epoch")["step"].nunique()
    epochs = int(first.size)
    if epochs < 2:
        return int(steps.size), 1, []
    steps_per_epoch = int(round(float(np.median(np.diff(first)))))
    notes = []
    if steps_per_epoch > 1 and int(rows.max()) == 1:
        notes.append(
            f"trace: one row per worker per epoch of {steps_per_epoch} steps (epoch means): the fitted noise "
            "describes epoch means, not single steps"
        )
    return max(steps_per_epoch, 1), epochs, notes
