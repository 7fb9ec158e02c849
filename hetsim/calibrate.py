"""Trace (simulated, measured or imported) -> a scenario that reproduces it.

This module owns fitting the simulator's model to measurements:

* per worker, least squares of ``compute_s ~ overhead_s + per_sample_s * local_batch`` over the
  rows where it got samples, the multiplicative noise as the lognormal sigma of the ratio
  measured / fitted, and the fit quality (R^2, residual CV). A constant injected delay cannot be
  told apart from overhead and ends up in ``overhead_s``;
* the network from ``comm_s``: a constant when the trace has one world size and gradient size,
  else ring alpha-beta (latency and bandwidth, non-negative least squares);
* the workload: ``global_batch`` = the median per-step sum of ``local_batch``, steps per epoch
  and epochs from the trace when it has epochs.

Reading and checking trace tables is :mod:`hetsim.trace`'s job (:func:`~hetsim.trace.read_trace_table`,
:func:`~hetsim.trace.check_trace_table`): problems with the input table raise
:class:`~hetsim.errors.ConfigError` naming the column. Doubts about the fit come back as
warning lines in :attr:`Calibration.warnings` (never printed here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from hetsim.errors import ConfigError
from hetsim.policies import POLICIES
from hetsim.trace import Trace, check_trace_table

# ----------------------------------------------------------------------------- fits


@dataclass(frozen=True)
class WorkerFit:
    worker: int
    overhead_s: float
    per_sample_s: float
    noise_sigma: float
    r2: float
    residual_cv: float
    rows: int
    batch_sizes: int

    def to_scenario(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "count": 1,
            "overhead_s": self.overhead_s,
            "per_sample_s": self.per_sample_s,
            "noise": {"dist": "lognormal", "sigma": self.noise_sigma},
        }


@dataclass(frozen=True)
class NetworkFit:
    kind: str
    time_s: float = 0.0
    latency_s: float = 0.0
    bandwidth_gbps: float = 0.0

    def to_scenario(self) -> dict[str, Any]:
        if self.kind == "constant":
            return {"kind": "constant", "time_s": self.time_s}
        return {"kind": self.kind, "latency_s": self.latency_s, "bandwidth_gbps": self.bandwidth_gbps}


def fit_worker(worker: int, local_batch: np.ndarray, compute_s: np.ndarray) -> tuple[WorkerFit, list[str]]:
    """Least squares of compute ~ overhead + per_sample * b over rows with b > 0."""
    b = np.asarray(local_batch, dtype=float)
    y = np.asarray(compute_s, dtype=float)
    keep = b > 0
    b, y = b[keep], y[keep]
    if b.size == 0:
        raise ConfigError("local_batch", f"worker {worker} never got samples (no row with local_batch > 0)")
    if not (y > 0).all():
        raise ConfigError("compute_s", f"worker {worker} has a zero compute time in a row with local_batch > 0")
    warnings: list[str] = []
    sizes = np.unique(b)
    overhead, per_sample = 0.0, float(y.sum() / b.sum())
    if sizes.size == 1:
        warnings.append(
            f"worker {worker}: seen at one batch size ({int(sizes[0])}) only, so overhead and per-sample cost "
            "cannot be separated; fitted the per-sample cost alone (overhead_s = 0)"
        )
    else:
        fit = stats.linregress(b, y)
        if fit.intercept < 0 or fit.slope <= 0:
            warnings.append(
                f"worker {worker}: the affine fit gave overhead {fit.intercept:.3g} s and per-sample "
                f"{fit.slope:.3g} s; "
                "fitted the per-sample cost alone (overhead_s = 0)"
            )
            per_sample = float(np.linalg.lstsq(b[:, None], y, rcond=None)[0][0])
        else:
            overhead, per_sample = float(fit.intercept), float(fit.slope)
    fitted = overhead + per_sample * b
    resid = y - fitted
    sst = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / sst if sst > 0 and sizes.size > 1 else math.nan
    log_ratio = np.log(y / fitted)
    sigma = float(log_ratio.std(ddof=1)) if y.size > 1 else 0.0
    cv = float(resid.std(ddof=1) / y.mean()) if y.size > 1 else 0.0
    return WorkerFit(worker, overhead, per_sample, sigma, r2, cv, int(y.size), int(sizes.size)), warnings


def fit_network(comm_s: np.ndarray, n_workers: np.ndarray, gradient_mb: np.ndarray) -> tuple[NetworkFit, list[str]]:
    """A constant exchange time when all steps share one (world size, gradient size); else the
    ring model ``2(n-1) latency + 2(n-1)/n * bytes / bandwidth`` by non-negative least squares."""
    comm = np.asarray(comm_s, dtype=float)
    n = np.asarray(n_workers, dtype=float)
    mb = np.asarray(gradient_mb, dtype=float)
    multi = n > 1
    if not multi.any():
        return NetworkFit("constant", time_s=0.0), []
    comm, n, mb = comm[multi], n[multi], mb[multi]
    if np.unique(np.stack([n, mb]), axis=1).shape[1] == 1:
        return NetworkFit("constant", time_s=float(comm.mean())), []
    design = np.stack([2 * (n - 1), 2 * (n - 1) / n * mb * 1e6 * 8 / 1e9], axis=1)  # latency_s, s per Gbit
    (latency, s_per_gbit), _ = optimize.nnls(design, comm)
    if s_per_gbit <= 0:
        warning = "network: comm_s does not grow with the gradient size; fitted a constant exchange time instead"
        return NetworkFit("constant", time_s=float(comm.mean())), [warning]
    return NetworkFit("ring", latency_s=float(latency), bandwidth_gbps=float(1.0 / s_per_gbit)), []


# ----------------------------------------------------------------------------- the whole trace


@dataclass(frozen=True)
class Calibration:
    workers: tuple[WorkerFit, ...]
    network: NetworkFit
    global_batch: int
    steps_per_epoch: int
    epochs: int
    gradient_mb: float
    warnings: tuple[str, ...]
    scenario: dict[str, Any]


def calibrate(trace: Trace | pd.DataFrame, name: str = "calibrated") -> Calibration:
    """Fit a scenario to ``trace``: one ``[[workers]]`` entry per trace worker (``count = 1``,
    in worker order). The result's ``scenario`` loads with :func:`hetsim.config.load_scenario`."""
    frame = check_trace_table(trace.to_frame() if isinstance(trace, Trace) else trace)
    if "step" not in frame.columns:  # rows of a worker in order are its steps
        frame["step"] = frame.groupby("worker").cumcount()
    warnings: list[str] = []
    workers = sorted(int(w) for w in frame["worker"].unique())
    fits = []
    for w in workers:
        rows = frame[frame["worker"] == w]
        fit, notes = fit_worker(w, rows["local_batch"].to_numpy(), rows["compute_s"].to_numpy())
        fits.append(fit)
        warnings.extend(notes)

    per_step = frame.groupby("step")
    global_batch = int(round(float(per_step["local_batch"].sum().median())))
    if global_batch < 1:
        raise ConfigError("local_batch", "the median step processed no samples")
    steps_per_epoch, epochs, note = _epochs(frame)
    warnings.extend(note)

    gradient = per_step["gradient_mb"].first().to_numpy() if "gradient_mb" in frame.columns else None
    gradient_mb = float(np.median(gradient)) if gradient is not None else 0.0
    if "comm_s" in frame.columns:
        network, notes = fit_network(
            per_step["comm_s"].first().to_numpy(),
            per_step["worker"].nunique().to_numpy(),
            gradient if gradient is not None else np.zeros(per_step.ngroups),
        )
        warnings.extend(notes)
    else:
        network = NetworkFit("constant", time_s=0.0)
        warnings.append("network: the trace has no comm_s column; the all-reduce time is set to 0")

    policy = "equal"
    if "policy" in frame.columns and frame["policy"].nunique() == 1 and str(frame["policy"].iloc[0]) in POLICIES:
        policy = str(frame["policy"].iloc[0])
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
        "network": network.to_scenario(),
        "workers": [f.to_scenario(f"w{f.worker}") for f in fits],
        "policy": {"name": policy},
    }
    return Calibration(
        tuple(fits), network, global_batch, steps_per_epoch, epochs, gradient_mb, tuple(warnings), scenario
    )


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


def worker_table(fits: Sequence[WorkerFit]) -> list[dict[str, Any]]:
    """The fits as plain rows (for tables and JSON)."""
    return [
        {
            "worker": f.worker,
            "overhead_s": f.overhead_s,
            "per_sample_s": f.per_sample_s,
            "noise_sigma": f.noise_sigma,
            "r2": f.r2 if math.isfinite(f.r2) else None,
            "residual_cv": f.residual_cv,
            "rows": f.rows,
            "batch_sizes": f.batch_sizes,
        }
        for f in fits
    ]
