"""Plots: each function draws one kind of chart from plain data onto an Axes (a new one when
``ax`` is None) and returns it; :func:`render_run` saves a results folder's figures from data its
caller computed and chose (:mod:`hetsim.report`). Only the object-oriented matplotlib API is used
(``Figure``, no pyplot), so there is no global state and no display is needed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from hetsim.files import atomic_write
from hetsim.metrics import BASELINE, step_times
from hetsim.trace import Trace


def _axes(ax: Axes | None, size: tuple[float, float] = (6.0, 4.0)) -> Axes:
    return ax if ax is not None else Figure(figsize=size, layout="constrained").add_subplot()


def speedup_lines(
    summary: pd.DataFrame, x: str, lines: str | None, ax: Axes | None = None, metric: str = "speedup_vs_equal"
) -> Axes:
    """``metric`` against axis ``x``, one line (with its 95% CI band) per value of ``lines``."""
    ax = _axes(ax)
    groups = summary.groupby(lines, sort=False) if lines else [(None, summary)]
    for label, group in groups:
        group = group.sort_values(x)
        mean, half = group[metric].to_numpy(float), np.nan_to_num(group[f"{metric}_ci95"].to_numpy(float))
        (line,) = ax.plot(group[x], mean, marker="o", label=None if label is None else f"{lines}={label}")
        ax.fill_between(group[x], mean - half, mean + half, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(x)
    ax.set_ylabel(metric.replace("_", " "))
    if metric == "speedup_vs_equal":
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    if lines:
        ax.legend(fontsize="small")
    return ax


def step_cdf(traces: Mapping[str, Trace], ax: Axes | None = None) -> Axes:
    """Empirical CDF of the step time, one curve per policy."""
    ax = _axes(ax)
    for policy, trace in traces.items():
        t = np.sort(step_times(trace))
        ax.step(t * 1e3, np.arange(1, len(t) + 1) / len(t), where="post", label=policy)
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("fraction of steps")
    ax.legend(fontsize="small")
    return ax


def utilization_bars(utilization: Mapping[str, Sequence[float]], ax: Axes | None = None) -> Axes:
    """Grouped bars: per worker, the fraction of wall time spent computing, one bar per policy."""
    ax = _axes(ax)
    width = 0.8 / max(len(utilization), 1)
    for k, (policy, values) in enumerate(utilization.items()):
        ax.bar(np.arange(len(values)) + k * width, values, width, label=policy)
    n = max((len(v) for v in utilization.values()), default=0)
    ax.set_xticks(np.arange(n) + 0.4 - width / 2, [str(i) for i in range(n)])
    ax.set_xlabel("worker")
    ax.set_ylabel("utilization")
    ax.set_ylim(0, 1)
    ax.legend(fontsize="small")
    return ax


def split_over_epochs(trace: Trace, ax: Axes | None = None) -> Axes:
    """Each worker's local batch in the first step of every epoch."""
    ax = _axes(ax)
    epochs = trace.per_step("epoch")[:, 0]
    first = np.flatnonzero(np.r_[True, np.diff(epochs) != 0])
    batches = trace.per_step("local_batch")[first]
    for worker in range(trace.n_workers):
        ax.plot(epochs[first], batches[:, worker], marker=".", label=f"worker {worker}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("local batch")
    ax.set_title(trace.policy)
    if trace.n_workers <= 8:
        ax.legend(fontsize="small")
    return ax


def gantt(trace: Trace, steps: Sequence[int], ax: Axes | None = None) -> Axes:
    """Timeline of a few steps: per worker, compute (blue), barrier wait (grey), all-reduce (orange)."""
    ax = _axes(ax)
    start = trace.per_step("start_s")[:, 0]
    compute, wait, comm = trace.per_step("compute_s"), trace.per_step("wait_s"), trace.per_step("comm_s")[:, 0]
    for worker in range(trace.n_workers):
        for s in steps:
            t0, c, w = start[s], compute[s, worker], wait[s, worker]
            ax.broken_barh([(t0, c)], (worker - 0.4, 0.8), color="tab:blue")
            ax.broken_barh([(t0 + c, w)], (worker - 0.4, 0.8), color="lightgrey")
            ax.broken_barh([(t0 + c + w, comm[s])], (worker - 0.4, 0.8), color="tab:orange")
    ax.set_yticks(range(trace.n_workers))
    ax.set_xlabel("time (s)")
    ax.set_ylabel("worker")
    ax.set_title(f"{trace.policy}: steps {steps[0]}-{steps[-1]}")
    parts = (("tab:blue", "compute"), ("lightgrey", "wait"), ("tab:orange", "all-reduce"))
    handles = [Patch(color=c, label=n) for c, n in parts]
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def _epoch_index(trace: Trace) -> np.ndarray:
    """The epoch of every entry of ``step_times(trace)`` (a step, or an update for async)."""
    return trace.per_step("epoch")[:, 0] if trace.synchronous else trace.epoch


def step_time_by_epoch(
    traces: Mapping[str, Trace], ax: Axes | None = None, styles: Mapping[str, Mapping[str, Any]] | None = None
) -> Axes:
    """Mean step time of every epoch, one line per trace; ``styles`` maps a label to line
    keywords (e.g. ``{"color": "C0", "linestyle": "--"}`` for a measured run beside its
    simulation). Works on imported logs with one row per epoch."""
    ax = _axes(ax)
    for label, trace in traces.items():
        epochs, index = np.unique(_epoch_index(trace), return_inverse=True)
        mean = np.bincount(index, weights=step_times(trace)) / np.bincount(index)
        ax.plot(epochs, mean * 1e3, label=label, **dict((styles or {}).get(label, {})))
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean step time (ms)")
    ax.legend(fontsize="small")
    return ax


def share_by_epoch(
    traces: Mapping[str, Trace],
    worker: int = -1,
    ax: Axes | None = None,
    styles: Mapping[str, Mapping[str, Any]] | None = None,
) -> Axes:
    """One worker's share of the step's samples in the first step of every epoch, one line per
    trace (``styles`` as in :func:`step_time_by_epoch`); ``worker`` indexes like a list."""
    ax = _axes(ax)
    for label, trace in traces.items():
        epochs = trace.per_step("epoch")[:, 0]
        first = np.flatnonzero(np.r_[True, np.diff(epochs) != 0])
        batches = trace.per_step("local_batch")[first].astype(float)
        style = dict((styles or {}).get(label, {}))
        ax.plot(epochs[first], batches[:, worker] / batches.sum(axis=1), label=label, **style)
    n = next(iter(traces.values())).n_workers if traces else 0
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"share of worker {worker % n if n else worker}")
    ax.legend(fontsize="small")
    return ax


def prediction_overlay(
    simulated: pd.DataFrame, predicted: pd.DataFrame, x: str, lines: str, metric: str, ax: Axes | None = None
) -> Axes:
    """``metric`` against ``x``, one colour per value of ``lines``: simulated means as markers
    (with 95% CI error bars when ``simulated`` has ``<metric>_ci95``), analytic predictions as
    solid lines. A group only simulated (no closed form) gets its markers joined by a dotted
    line; a group only predicted gets its line alone."""
    ax = _axes(ax)
    ci = f"{metric}_ci95"
    labels = list(dict.fromkeys([*simulated[lines], *predicted[lines]]))
    for k, label in enumerate(labels):
        color = f"C{k % 10}"
        group = simulated[simulated[lines] == label].sort_values(x)
        pred = predicted[predicted[lines] == label].sort_values(x)
        if len(group):
            err = np.nan_to_num(group[ci].to_numpy(float)) if ci in group else None
            ax.errorbar(
                group[x], group[metric], yerr=err, fmt="o", color=color, markersize=4, capsize=2, label=str(label)
            )
        if len(pred):
            ax.plot(pred[x], pred[metric], color=color, linewidth=1.4, label=None if len(group) else str(label))
        else:
            ax.plot(group[x], group[metric], color=color, linewidth=0.8, linestyle=":")
    ax.set_xlabel(x)
    ax.set_ylabel(metric.replace("_", " "))
    handles, _ = ax.get_legend_handles_labels()
    simulated_label = "simulated" + (" (95% CI)" if ci in simulated else "")
    handles += [
        Line2D([], [], color="grey", marker="o", linestyle="none", label=simulated_label),
        Line2D([], [], color="grey", label="analytic"),
    ]
    ax.legend(handles=handles, fontsize="x-small")
    return ax


def best_policy_map(
    summary: pd.DataFrame,
    x: str,
    y: str,
    metric: str = "throughput_sps",
    baseline: str = BASELINE,
    tie: float = 0.02,
    ax: Axes | None = None,
) -> Axes:
    """Per (``x``, ``y``) cell of ``summary`` (one row per cell and policy, higher ``metric``
    is better): the colour is the best policy's ``metric`` over ``baseline``'s, the text names
    that policy, or ``-`` when none beats the baseline by more than ``tie`` (it does not matter)."""
    ax = _axes(ax)
    xs, ys = list(dict.fromkeys(summary[x])), list(dict.fromkeys(summary[y]))
    gain = np.full((len(ys), len(xs)), np.nan)
    for i, yv in enumerate(ys):
        for j, xv in enumerate(xs):
            cell = summary[(summary[x] == xv) & (summary[y] == yv)]
            base = cell.loc[cell["policy"] == baseline, metric]
            if cell.empty or base.empty:
                continue
            best = cell.loc[cell[metric].astype(float).idxmax()]
            gain[i, j] = float(best[metric]) / float(base.iloc[0])
            text = f"{best['policy']}\n{gain[i, j]:.2f}x" if gain[i, j] > 1 + tie else "-"
            ax.text(
                j, i, text, ha="center", va="center", fontsize="x-small", color="white" if gain[i, j] < 1.5 else "black"
            )
    vmax = max(1.5, float(np.nanmax(gain, initial=1.0)))
    image = ax.imshow(gain, origin="lower", aspect="auto", cmap="viridis", vmin=1.0, vmax=vmax)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.figure.colorbar(image, ax=ax, label=f"best {metric.replace('_', ' ')} / {baseline}")
    return ax


def comparison_bars(
    table: pd.DataFrame, ax: Axes | None = None, scale: float = 1e3, ylabel: str = "mean step time (ms)"
) -> Axes:
    """Grouped bars: one group per row of ``table`` (its index, e.g. policies), one bar per
    column (e.g. measured, simulated, analytic), values times ``scale``; NaN bars are left out."""
    ax = _axes(ax)
    width = 0.8 / max(len(table.columns), 1)
    for k, column in enumerate(table.columns):
        values = table[column].to_numpy(float) * scale
        ax.bar(np.arange(len(table)) + k * width, values, width, label=str(column))
    ax.set_xticks(np.arange(len(table)) + 0.4 - width / 2, [str(i) for i in table.index])
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    return ax


def save(fig: Figure, path: Path) -> Path:
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    return path


@dataclass(frozen=True)
class CellPlots:
    """What the trace plots of one grid cell show, chosen by the caller: every trace (one CDF
    curve each), each policy's per-worker utilization, the traces whose split is drawn over the
    epochs and the synchronous traces drawn as a Gantt chart of their last steps."""

    traces: Mapping[str, Trace]
    utilization: Mapping[str, Sequence[float]]
    split: Sequence[Trace]
    gantt: Sequence[Trace]


def render_run(
    directory: Path,
    summary: pd.DataFrame,
    axes: Sequence[str],
    x: str | None,
    lines: str | None,
    cell: CellPlots | None = None,
) -> list[Path]:
    """Every plot of a sweep's results folder into ``directory``: the speedup grid from
    ``summary`` (one row per cell and policy) and, given ``cell``, its trace plots. Returns the
    files written."""
    written = []
    x = x or (axes[0] if axes else None)
    if x is not None:
        lines = lines if lines is not None else next((a for a in axes if a != x), None)
        written.append(save(_speedup_grid(summary, axes, x, lines), directory / "speedup.png"))
    if cell is not None and cell.traces:
        written.extend(_cell_plots(directory, cell))
    return written


def _speedup_grid(summary: pd.DataFrame, axes: Sequence[str], x: str, lines: str | None) -> Figure:
    """One panel per policy (columns) and combination of the other axes (rows)."""
    policies = list(dict.fromkeys(summary["policy"]))
    rest = [a for a in axes if a not in (x, lines)]
    facets = list(itertools.product(*(list(dict.fromkeys(summary[a])) for a in rest))) or [()]
    metric = "speedup_vs_equal" if summary["speedup_vs_equal"].notna().any() else "mean_step_s"
    if metric == "speedup_vs_equal" and len(policies) > 1:
        policies = [p for p in policies if p != BASELINE]  # its speedup is 1 by definition
    fig = Figure(figsize=(3.4 * len(policies), 2.9 * len(facets)), layout="constrained")
    grid = fig.subplots(len(facets), len(policies), squeeze=False, sharey=True)
    for r, facet in enumerate(facets):
        mask = (
            np.logical_and.reduce([summary[a] == v for a, v in zip(rest, facet)])
            if rest
            else np.ones(len(summary), bool)
        )
        for c, policy in enumerate(policies):
            ax = speedup_lines(summary[mask & (summary["policy"] == policy)], x, lines, grid[r, c], metric)
            ax.set_title(", ".join([policy, *(f"{a}={v}" for a, v in zip(rest, facet))]), fontsize="small")
            if c:
                ax.set_ylabel("")
    return fig


def _cell_plots(directory: Path, cell: CellPlots) -> list[Path]:
    """step_cdf.png, utilization.png, and split.png and gantt.png when they have traces."""
    written = []
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    step_cdf(cell.traces, fig.add_subplot())
    written.append(save(fig, directory / "step_cdf.png"))

    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    utilization_bars(cell.utilization, fig.add_subplot())
    written.append(save(fig, directory / "utilization.png"))

    if cell.split:
        fig = Figure(figsize=(5.0 * len(cell.split), 3.8), layout="constrained")
        for ax, trace in zip(fig.subplots(1, len(cell.split), squeeze=False)[0], cell.split):
            split_over_epochs(trace, ax)
        written.append(save(fig, directory / "split.png"))

    if cell.gantt:
        shown = cell.gantt
        fig = Figure(figsize=(9.0, 2.2 + 0.35 * shown[0].n_workers * len(shown)), layout="constrained")
        for ax, trace in zip(fig.subplots(len(shown), 1, squeeze=False, sharex=False)[:, 0], shown):
            gantt(trace, range(max(0, trace.n_steps - 4), trace.n_steps), ax)  # steady state: the last steps
        written.append(save(fig, directory / "gantt.png"))
    return written
