"""The fidelity benchmark's results: error statistics, the results folder and the printed table.

Errors are relative, ``(predicted - measured) / measured``, of each policy's mean step time;
the statistics are of their absolute values: mean, median and 90th percentile (numpy's linear
interpolation), over all predictions and per kind (same-run, cross-run). Everything is written
atomically into the matrix's folder: ``results.json`` (provenance, the runs, the statistics, every
prediction, the load samples' summary), ``predictions.csv``, ``load.csv`` and ``matrix.png``
(predicted against measured mean step time, and the machine's load over the matrix: :func:`figure`,
which draws from the two CSVs' columns, so that a results folder's plot can be redrawn).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from hetsim.core.console import text_table
from hetsim.core.files import write_frame, write_json
from hetsim.plots import save
from hetsim.plots.style import legend_outside, set_log_ticks
from hetsim.sweep.results import provenance
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
    """matrix.png: :func:`figure` of the predictions and the load samples."""
    points = pd.DataFrame(
        [p.to_dict() for p in found], columns=["config", "kind", "measured_step_s", "predicted_step_s"]
    )
    return save(figure(points, pd.DataFrame(load.rows())), path)


def figure(points: pd.DataFrame, load: pd.DataFrame, cpus: int | None = None) -> Figure:
    """Predicted against measured mean step time (``points``: the columns of predictions.csv),
    log-log on equal axes (the diagonal at 45 degrees, +-5% around it), and the machine's load
    (``load``: load.csv's) against ``cpus`` (default: this process's), legends right of each."""
    fig = Figure(figsize=(14.5, 5.6), layout="constrained")  # room for the square scatter and both legends
    ax, ax_load = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1]})
    _prediction_panel(ax, points)
    ax_load.set_title("the machine's load during the matrix", fontsize="medium")
    if not load.empty:
        cpus = len(available_cpus()) if cpus is None else cpus
        ax_load.plot(load["t_s"], load["loadavg_1m"], label="load average (1 min)")
        ax_load.plot(load["t_s"], load["cpu_busy"] * cpus, linestyle="--", label="busy CPUs")
        ax_load.axhline(cpus, color="grey", linewidth=0.8, linestyle=":", label=f"CPUs available ({cpus})")
        ax_load.set(xlabel="seconds into the matrix", ylabel="CPUs", ylim=(0, None))
        legend_outside(ax_load)
    return fig


def _prediction_panel(ax: Axes, points: pd.DataFrame) -> None:
    """The scatter of ``points`` (colour: configuration; circle: same-run, triangle: cross-run)."""
    configs = sorted(set(points["config"]))
    palette = colormaps["tab10" if len(configs) <= 10 else "tab20"]
    measured, predicted = (
        1e3 * points["measured_step_s"].to_numpy(float),
        1e3 * points["predicted_step_s"].to_numpy(float),
    )
    for (config, kind), group in points.groupby(["config", "kind"], sort=False):
        ms, ps = 1e3 * group["measured_step_s"], 1e3 * group["predicted_step_s"]
        marker = "o" if kind == "same-run" else "^"
        ax.scatter(ms, ps, color=palette(configs.index(config) % palette.N), marker=marker, s=36, alpha=0.85)
    stats = error_stats((predicted - measured) / measured)
    title = "hetsim's predicted vs measured mean step time"
    if stats["n"]:
        title += f"\n{stats['n']} predictions of {len(configs)} configurations, |error|: "
        title += f"median {stats['median']:.1%}, p90 {stats['p90']:.1%}"
    ax.set_title(title, fontsize="medium")
    ax.set(xlabel="measured mean step time (ms)", ylabel="predicted mean step time (ms)")
    handles: list[Any] = []
    if stats["n"]:
        lo, hi = min(measured.min(), predicted.min()) * 0.85, max(measured.max(), predicted.max()) * 1.15
        line = np.geomspace(lo, hi, 50)
        handles.append(ax.fill_between(line, line * 0.95, line * 1.05, color="grey", alpha=0.2, label="±5%"))
        handles.extend(ax.plot(line, line, color="black", lw=1, label="predicted = measured"))
        set_log_ticks(ax, "x", lo, hi)
        set_log_ticks(ax, "y", lo, hi)
        ax.set_box_aspect(1)  # equal limits on a square box: the diagonal at 45 degrees
    handles += [
        Line2D([], [], color=palette(i % palette.N), marker="s", linestyle="none", label=c)
        for i, c in enumerate(configs)
    ]
    handles += [
        Line2D([], [], color="grey", marker=m, linestyle="none", label=k)
        for m, k in (("o", "same-run"), ("^", "cross-run"))
    ]
    legend_outside(ax, handles=handles)


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
