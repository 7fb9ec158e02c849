"""The fidelity benchmark's results: error statistics, the results folder and the printed table.

Errors are relative, ``(predicted - measured) / measured``, of each policy's mean step time;
the statistics are of their absolute values: mean, median and 90th percentile (numpy's linear
interpolation), over all predictions and per kind (same-run, cross-run). Everything is written
atomically into the matrix's folder: ``results.json`` (provenance, the runs, the statistics, every
prediction, the load samples' summary), ``predictions.csv``, ``load.csv`` and ``matrix.png``
(predicted against measured mean step time, and the machine's load over the matrix).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from hetsim.files import write_frame, write_json
from hetsim.plots import save
from hetsim.report import text_table
from hetsim.results import provenance
from validation.machine_load import LoadSampler
from validation.matrix import MatrixRun, Prediction
from validation.placement import available_cpus


def error_stats(errors: Sequence[float]) -> dict[str, float | int]:
    """``n`` and the mean, median and 90th percentile of ``|errors|`` (NaN when there are none)."""
    values = np.abs(np.asarray(errors, dtype=float))
    if values.size == 0:
        return {"n": 0, "mean": float("nan"), "median": float("nan"), "p90": float("nan")}
    return {
        "n": int(values.size),
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "p90": float(np.percentile(values, 90)),
    }


def statistics_by_kind(found: Sequence[Prediction]) -> dict[str, dict[str, float | int]]:
    """The error statistics of all predictions and of each kind."""
    out = {"all": error_stats([p.comparison.step_error for p in found])}
    for kind in ("same-run", "cross-run"):
        out[kind] = error_stats([p.comparison.step_error for p in found if p.kind == kind])
    return out


def load_summary(load: LoadSampler) -> dict[str, float]:
    """Mean and maximum of the load average and of the busy CPU fraction during the matrix."""
    frame = pd.DataFrame(load.rows())
    if frame.empty:
        return {}
    return {
        "loadavg_mean": float(frame["loadavg_1m"].mean()),
        "loadavg_max": float(frame["loadavg_1m"].max()),
        "cpu_busy_mean": float(frame["cpu_busy"].mean()),
    }


def results(
    runs: Sequence[MatrixRun], found: Sequence[Prediction], failed: Sequence[str], load: LoadSampler, busy: int
) -> dict[str, Any]:
    """``results.json``'s content."""
    return {
        **provenance(),
        "runs": [{"name": r.name, "argv": list(r.argv), "what": r.what} for r in runs],
        "failed": list(failed),
        "background_busy_processes": busy,
        "load": load_summary(load),
        "statistics": statistics_by_kind(found),
        "predictions": [p.to_dict() for p in found],
    }


def plot(found: Sequence[Prediction], load: LoadSampler, path: Path) -> Path:
    """Predicted against measured mean step time (log-log, the diagonal and +-5%), and the load."""
    fig = Figure(figsize=(12, 5))
    ax, ax_load = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1]})
    configs = sorted({p.config for p in found})
    colours = {c: colormaps["tab10"](i % 10) for i, c in enumerate(configs)}
    for p in found:
        m, q = 1e3 * p.comparison.measured.mean_step_s, 1e3 * p.comparison.predicted.mean_step_s
        ax.scatter(m, q, color=colours[p.config], marker="o" if p.kind == "same-run" else "^", s=36)
    if found:
        values = [
            1e3 * v for p in found for v in (p.comparison.measured.mean_step_s, p.comparison.predicted.mean_step_s)
        ]
        line = np.geomspace(min(values) * 0.8, max(values) * 1.25, 50)
        ax.plot(line, line, color="black", lw=1)
        ax.fill_between(line, line * 0.95, line * 1.05, color="grey", alpha=0.2, label="+-5%")
    for c in configs:
        ax.scatter([], [], color=colours[c], label=c)
    ax.scatter([], [], color="grey", marker="^", label="cross-run")
    ax.set(xlabel="measured mean step (ms)", ylabel="predicted mean step (ms)")
    if found:
        ax.set(xscale="log", yscale="log")
    ax.set_title("hetsim's prediction of real runs (circle: same-run)")
    ax.legend(fontsize=7, loc="upper left")
    frame = pd.DataFrame(load.rows())
    if not frame.empty:
        ax_load.plot(frame["t_s"], frame["loadavg_1m"], label="load average (1 min)")
        ax_load.plot(frame["t_s"], frame["cpu_busy"] * len(available_cpus()), label="busy CPUs")
        ax_load.set(xlabel="seconds into the matrix", ylabel="CPUs")
        ax_load.legend(fontsize=8)
    ax_load.set_title("the machine's load during the matrix")
    fig.tight_layout()
    return save(fig, path)


def write(out: Path, data: dict[str, Any], found: Sequence[Prediction], load: LoadSampler) -> None:
    """The results folder's files (each replaced atomically)."""
    write_frame(out / "predictions.csv", pd.DataFrame([p.to_dict() for p in found]))
    write_frame(out / "load.csv", pd.DataFrame(load.rows(), columns=["t_s", "loadavg_1m", "cpu_busy", "running"]))
    plot(found, load, out / "matrix.png")
    write_json(out / "results.json", data)


def table(found: Sequence[Prediction], stats: dict[str, dict[str, float | int]]) -> str:
    """Per prediction one line, then the statistics."""
    rows = []
    for p in found:
        step_meas, step_pred, step_err, _, _, total_err, splits = p.comparison.cells()
        origin = p.kind if p.kind == "same-run" else f"from {p.calibrated_on}"
        rows.append((p.config, origin, p.comparison.policy, step_meas, step_pred, step_err, total_err, splits))
    header = ("config", "prediction", "policy", "step meas", "step pred", "error", "total err", "split meas -> pred")
    lines = [text_table(header, rows, left={0, 1, 2, 7})]
    for kind, s in stats.items():
        lines.append(
            f"{kind}: |error| of the mean step time over {s['n']} predictions: mean {100 * s['mean']:.1f}%, "
            f"median {100 * s['median']:.1f}%, p90 {100 * s['p90']:.1f}%"
        )
    return "\n".join(lines)
