"""Charts: each function draws one kind of chart from plain data onto an Axes (a new one when
``ax`` is None) and returns it, in the shared styles of :mod:`hetsim.plots.style`. Only the
object-oriented matplotlib API is used (``Figure``, no pyplot), so there is no global state and no
display is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from hetsim.model.trace import Trace
from hetsim.plots.style import legend_outside, line_style
from hetsim.run.metrics import BASELINE, step_times


def _axes(ax: Axes | None, size: tuple[float, float] = (6.0, 4.0)) -> Axes:
    return ax if ax is not None else Figure(figsize=size, layout="constrained").add_subplot()


def speedup_lines(
    summary: pd.DataFrame,
    x: str,
    lines: str | None,
    ax: Axes | None = None,
    metric: str = "speedup_vs_equal",
    order: Sequence[Any] | None = None,
) -> Axes:
    """``metric`` against axis ``x``, one line (with its 95% CI as a band and error bars) per
    value of ``lines``; ``order`` fixes each value's style (:func:`line_style`) across panels."""
    ax = _axes(ax)
    groups = list(summary.groupby(lines, sort=False)) if lines else [(None, summary)]
    values = list(order) if order is not None else [label for label, _ in groups]
    for label, group in groups:
        if pd.api.types.is_numeric_dtype(group[x]):  # text (a table's TOML) keeps the sweep file's order
            group = group.sort_values(x)
        mean, half = group[metric].to_numpy(float), np.nan_to_num(group[f"{metric}_ci95"].to_numpy(float))
        style = line_style(values.index(label) if label in values else len(values))
        name = None if label is None else f"{lines}={label}"
        ax.errorbar(group[x], mean, yerr=half, capsize=3, markersize=6, markerfacecolor="none", label=name, **style)
        ax.fill_between(group[x], mean - half, mean + half, color=style["color"], alpha=0.25, linewidth=0)
    ax.set_xlabel(x)
    ax.set_ylabel(metric.replace("_", " "))
    if metric == "speedup_vs_equal":
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    if lines and order is None:
        legend_outside(ax)
    return ax


LOG_SPAN = 20.0  # step times further apart than this (longest / shortest) are drawn on a log axis


def step_cdf(traces: Mapping[str, Trace], ax: Axes | None = None) -> Axes:
    """Empirical CDF of the step time, one curve per policy, each in its own colour, dash and
    marker (policies with equal step times draw over each other); an asynchronous trace's
    "steps" are its updates, and its label says so."""
    ax = _axes(ax)
    times = {policy: np.sort(step_times(trace)) for policy, trace in traces.items()}
    for k, (policy, t) in enumerate(times.items()):
        label = policy if traces[policy].synchronous else f"{policy} (per update)"
        ax.step(t * 1e3, np.arange(1, len(t) + 1) / len(t), where="post", label=label, markevery=0.1,
                markersize=5, **line_style(k))  # fmt: skip
    every = np.concatenate([t for t in times.values() if t.size] or [np.ones(1)])
    low, high = float(every.min()), float(every.max())
    if low > 0 and high / low > LOG_SPAN:  # a few repair or slowdown steps would press the rest to the left
        ax.set_xscale("log")
    ax.set_xlabel("step time (ms)" + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel("fraction of steps at most this long")
    legend_outside(ax)
    return ax


CROWDED_CHARS = 48  # worker names longer than this in all (on the smallest figure) are set at a slant


def utilization_bars(
    utilization: Mapping[str, Sequence[float]], ax: Axes | None = None, workers: Sequence[str] = ()
) -> Axes:
    """Grouped bars: per worker (named by ``workers``, else numbered), the fraction of wall time
    spent computing, one bar per policy; the legend right of the bars."""
    ax = _axes(ax)
    width = 0.8 / max(len(utilization), 1)
    for k, (policy, values) in enumerate(utilization.items()):
        hatch = (None, "//", "..", "xx")[k // 10 % 4]  # colours repeat after 10 policies, hatches tell them apart
        ax.bar(
            np.arange(len(values)) + k * width, values, width, label=policy, color=line_style(k)["color"], hatch=hatch
        )
    n = max((len(v) for v in utilization.values()), default=0)
    labels = worker_labels(workers, n)
    crowded = n * max((len(label) for label in labels), default=0) > CROWDED_CHARS
    ax.set_xticks(
        np.arange(n) + 0.4 - width / 2, labels, rotation=30 if crowded else 0, ha="right" if crowded else "center"
    )
    ax.set_xlabel("worker")
    ax.set_ylabel("utilization (compute time / wall time)")
    ax.set_ylim(0, 1)
    legend_outside(ax)
    return ax


def worker_labels(workers: Sequence[str], n: int) -> list[str]:
    """The names of ``n`` workers: ``workers`` when it names them all, else their indices."""
    return list(workers) if len(workers) == n else [str(i) for i in range(n)]


def split_over_epochs(trace: Trace, ax: Axes | None = None, workers: Sequence[str] = (), legend: bool = True) -> Axes:
    """Each worker's local batch in the first step of every epoch, workers named by ``workers``
    (else numbered), each in its own style; the legend right of the data when ``legend``."""
    ax = _axes(ax)
    epochs = trace.per_step("epoch")[:, 0]
    first = np.flatnonzero(np.r_[True, np.diff(epochs) != 0])
    batches = trace.per_step("local_batch")[first]
    for worker, name in enumerate(worker_labels(workers, trace.n_workers)):
        ax.plot(epochs[first], batches[:, worker], markersize=4, label=name, **line_style(worker))
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    ax.set_ylabel("local batch (samples)")
    ax.set_title(trace.policy)
    if legend and trace.n_workers <= 16:
        legend_outside(ax)
    return ax


GANTT_PARTS = (("tab:blue", "compute"), ("lightgrey", "wait at the barrier"), ("tab:orange", "all-reduce"))


def gantt(
    trace: Trace, steps: Sequence[int], ax: Axes | None = None, workers: Sequence[str] = (), legend: bool = True
) -> Axes:
    """Timeline of a few steps, in seconds since the first of them began (so that charts of
    several policies share a scale): per worker (named by ``workers``, else numbered), compute
    (blue), barrier wait (grey), all-reduce (orange)."""
    ax = _axes(ax)
    start = trace.per_step("start_s")[:, 0]
    compute, wait, comm = trace.per_step("compute_s"), trace.per_step("wait_s"), trace.per_step("comm_s")[:, 0]
    origin = start[steps[0]]
    for worker in range(trace.n_workers):
        for s in steps:
            t0, c, w = start[s] - origin, compute[s, worker], wait[s, worker]
            for (colour, _), (left, width) in zip(GANTT_PARTS, ((t0, c), (t0 + c, w), (t0 + c + w, comm[s]))):
                ax.broken_barh([(left, width)], (worker - 0.4, 0.8), color=colour)
    ax.set_yticks(range(trace.n_workers), worker_labels(workers, trace.n_workers))
    ax.set_xlabel(f"time since step {steps[0]} began (s)")
    ax.set_ylabel("worker")
    ax.set_title(f"{trace.policy}: steps {steps[0]}-{steps[-1]}")
    if legend:
        legend_outside(ax, handles=gantt_handles())
    return ax


def gantt_handles() -> list[Patch]:
    """The legend entries of :func:`gantt`'s three kinds of bar."""
    return [Patch(color=c, label=n) for c, n in GANTT_PARTS]


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
    joined = False  # a group's markers joined by a dotted line (it has no closed form): the legend says so
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
            joined = True
    ax.set_xlabel(x)
    ax.set_ylabel(metric.replace("_", " "))
    handles, _ = ax.get_legend_handles_labels()
    simulated_label = "simulated" + (" (95% CI)" if ci in simulated else "")
    handles += [
        Line2D([], [], color="grey", marker="o", linestyle="none", label=simulated_label),
        Line2D([], [], color="grey", label="analytic"),
    ]
    if joined:
        handles.append(Line2D([], [], color="grey", linewidth=0.8, linestyle=":", label="simulated, no closed form"))
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
    names: dict[tuple[int, int], str] = {}
    for i, yv in enumerate(ys):
        for j, xv in enumerate(xs):
            cell = summary[(summary[x] == xv) & (summary[y] == yv)]
            base = cell.loc[cell["policy"] == baseline, metric]
            if cell.empty or base.empty:
                continue
            best = cell.loc[cell[metric].astype(float).idxmax()]
            gain[i, j] = float(best[metric]) / float(base.iloc[0])
            names[(i, j)] = str(best["policy"])
    vmax = max(1.5, float(np.nanmax(gain, initial=1.0)))
    for (i, j), name in names.items():  # white on viridis' dark lower part, black on its light upper part
        text = f"{name}\n{gain[i, j]:.2f}x" if gain[i, j] > 1 + tie else "-"
        dark = (gain[i, j] - 1.0) / (vmax - 1.0) < 0.6
        ax.text(j, i, text, ha="center", va="center", fontsize="x-small", color="white" if dark else "black")
    image = ax.imshow(gain, origin="lower", aspect="auto", cmap="viridis", vmin=1.0, vmax=vmax)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    words = metric.replace("_", " ")
    label = f"best {words}" if metric.startswith("speedup") else f"best {words} / {baseline}'s"  # a speedup is one
    ax.figure.colorbar(image, ax=ax, label=label)
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
    labels = [str(i) for i in table.index]
    ax.set_xticks(np.arange(len(table)) + 0.4 - width / 2, labels)
    if sum(len(label) for label in labels) > 40:  # long policy names (dynamic-enhanced) would run together
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    return ax
