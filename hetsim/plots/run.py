"""A results folder's figures: the speedup grid (:func:`speedup_figure`) and the plotted cell's
trace plots (:func:`cell_figures`), from data the caller computed and chose
(:mod:`hetsim.report.build`), each titled with what it shows, by which metric and for which grid cell,
so that a reader needs no README; :func:`render_run` saves them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from hetsim.model.trace import Trace
from hetsim.plots.charts import gantt, gantt_handles, speedup_lines, split_over_epochs, step_cdf, utilization_bars
from hetsim.plots.style import TICKS_WIDTH, TITLE_WIDTH, figure_legend, figure_title, save, wrap, wrapped
from hetsim.run.metrics import BASELINE

METRIC_TEXT = {  # --metric: its name, and the speedup's ratio
    "throughput": ("throughput", f"the policy's throughput / {BASELINE}'s"),
    "time_to_target": ("time to target", f"{BASELINE}'s time to the target / the policy's"),
}
MISSING_TEXT = {
    "throughput": "no value in any cell",
    "time_to_target": "no cell reaches the target before the run ends",
}
MAX_COLUMNS = 4  # panels per row of the speedup grid


@dataclass(frozen=True)
class CellPlots:
    """What the trace plots of one grid cell show, chosen by the caller: every trace (one CDF
    curve each), each policy's per-worker utilization, the traces whose split is drawn over the
    epochs and the synchronous traces drawn as a Gantt chart of their last steps; ``where``
    names the cell (axis -> value, for the titles) and ``workers`` its workers, in order."""

    traces: Mapping[str, Trace]
    utilization: Mapping[str, Sequence[float]]
    split: Sequence[Trace]
    gantt: Sequence[Trace]
    where: Mapping[str, object] = field(default_factory=dict)
    workers: Sequence[str] = ()

    def title(self, what: str) -> str:
        cell = ", ".join(f"{k}={v}" for k, v in self.where.items())
        return f"{what}\ncell {cell} (replication 0)" if cell else f"{what} (replication 0)"


def render_run(
    directory: Path,
    summary: pd.DataFrame,
    axes: Sequence[str],
    x: str | None,
    lines: str | None,
    cell: CellPlots | None = None,
    metric: str = "throughput",
) -> list[Path]:
    """Every plot of a sweep's results folder into ``directory``: the speedup grid from
    ``summary`` (one row per cell and policy, its speedup by ``metric``) and, given ``cell``,
    its trace plots. Returns the files written."""
    written = []
    x = x or (axes[0] if axes else None)
    if x is not None:
        lines = lines if lines is not None else next((a for a in axes if a != x), None)
        written.append(save(speedup_figure(summary, axes, x, lines, metric), directory / "speedup.png"))
    if cell is not None and cell.traces:
        written.extend(save(fig, directory / name) for name, fig in cell_figures(cell).items())
    return written


def speedup_figure(
    summary: pd.DataFrame, axes: Sequence[str], x: str, lines: str | None, metric: str = "throughput"
) -> Figure:
    """The speedup vs equal by ``metric`` against ``x``, one panel per policy and combination
    of the other axes (rows of at most :data:`MAX_COLUMNS` panels, each combination starting a
    row), one line per value of ``lines`` in the same style in every panel, one legend right of
    the panels. A policy with no value anywhere gets no panel but a line in the title."""
    policies = list(dict.fromkeys(summary["policy"]))
    rest = [a for a in axes if a not in (x, lines)]
    facets = list(itertools.product(*(list(dict.fromkeys(summary[a])) for a in rest))) or [()]
    column = "speedup_vs_equal" if BASELINE in policies else "mean_step_s"
    if column == "speedup_vs_equal" and len(policies) > 1:
        policies = [p for p in policies if p != BASELINE]  # its speedup is 1 by definition
    empty = [p for p in policies if summary.loc[summary["policy"] == p, column].isna().all()]
    shown = [p for p in policies if p not in empty]
    if not shown:
        return _nothing_to_draw(summary, column, metric, empty)
    columns = balanced_columns(len(shown), MAX_COLUMNS)
    per_facet = math.ceil(len(shown) / columns)
    rows = per_facet * len(facets)
    fig = Figure(figsize=(3.2 * columns + 1.8, 2.5 * rows + 0.9), layout="constrained")
    grid = fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=True)
    order = list(dict.fromkeys(summary[lines])) if lines else None
    used = np.zeros(grid.shape, bool)
    for f, facet in enumerate(facets):
        mask = np.logical_and.reduce([summary[a] == v for a, v in zip(rest, facet)] + [np.ones(len(summary), bool)])
        for i, policy in enumerate(shown):
            r, c = f * per_facet + i // columns, i % columns
            used[r, c] = True
            panel = summary[mask & (summary["policy"] == policy)]
            ax = speedup_lines(panel, x, lines, grid[r, c], column, order)
            title = ", ".join([policy, *(f"{a}={v}" for a, v in zip(rest, facet))])
            missing = [str(v) for v, g in panel.groupby(x, sort=False)[column] if g.isna().all()]
            title += f"\n(no value at {x}={', '.join(missing)})" if missing else ""
            ax.set_title(wrap(title, TITLE_WIDTH), fontsize="small")
            if panel[column].isna().all():  # this combination only: said in the panel, not left blank
                ax.text(0.5, 0.5, "no value", transform=ax.transAxes, ha="center", va="center", color="dimgrey")
    _tidy_grid(grid, used, summary[x], _y_label(column, metric))
    handles = grid[0, 0].get_legend_handles_labels()[0]
    if handles:
        figure_legend(fig, handles)  # its labels say "lines=value"
    figure_title(fig, _speedup_title(summary, column, metric, empty))
    return fig


def _nothing_to_draw(summary: pd.DataFrame, column: str, metric: str, empty: Sequence[str]) -> Figure:
    """No panel has a value: one blank panel that says so, under the usual title."""
    fig = Figure(figsize=(7.0, 3.0), layout="constrained")
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, "nothing to draw: no policy has a value in any cell", ha="center", va="center")
    figure_title(fig, _speedup_title(summary, column, metric, empty))
    return fig


def balanced_columns(n: int, most: int) -> int:
    """Panels per row for ``n`` panels, at most ``most``, rows as evenly filled as can be
    (``n`` = 4, ``most`` = 3: 2 rows of 2, not 3 and 1)."""
    return math.ceil(n / math.ceil(n / most)) if n else 1


def _y_label(column: str, metric: str) -> str:
    if column != "speedup_vs_equal":
        return "mean step time (s)"
    return f"speedup vs {BASELINE}\nby {METRIC_TEXT[metric][0]}"


def _tidy_grid(grid: np.ndarray, used: np.ndarray, xs: pd.Series, ylabel: str) -> None:
    """Hide the unused slots; x tick labels and label under every panel with none below it, the
    y label on the first column; ``xs``'s values as the x ticks (a log axis when they are
    positive numbers spanning 8x or more)."""
    values = sorted(set(xs)) if pd.api.types.is_numeric_dtype(xs) else None
    rows = grid.shape[0]
    for (r, c), ax in np.ndenumerate(grid):
        if not used[r, c]:
            ax.set_visible(False)
            continue
        last = r == rows - 1 or not used[r + 1, c]
        ax.xaxis.set_tick_params(labelbottom=last)
        if not last:
            ax.set_xlabel("")
        ax.set_ylabel(ylabel if c == 0 else "")
        if values and min(values) > 0 and max(values) >= 8 * min(values):
            ax.set_xscale("log")
            ax.minorticks_off()
        if values and len(values) <= 8:
            ax.set_xticks(values, [f"{v:g}" for v in values])
        elif values is None:  # text (a table's TOML): each tick's label wrapped to its share of the panel
            ax.xaxis.set_major_formatter(wrapped(ax.xaxis.get_major_formatter(), TICKS_WIDTH // max(1, xs.nunique())))


def _speedup_title(summary: pd.DataFrame, column: str, metric: str, empty: Sequence[str]) -> str:
    """What the grid shows, by which metric, over how many replications, how wide its 95% CIs
    are when they are too narrow to see, and which policies have no panel."""
    n = summary["replications"]
    reps = f"{n.min()}" if n.min() == n.max() else f"{n.min()}-{n.max()}"
    if column == "speedup_vs_equal":
        name, ratio = METRIC_TEXT[metric]
        what = f"Speedup vs {BASELINE} by {name} ({ratio})"
    else:
        what = f"Mean step time (no {BASELINE} run to compare with)"
    mean, half = summary[column].to_numpy(float), summary[f"{column}_ci95"].to_numpy(float)
    if not np.isfinite(mean).any():
        ci = f"{reps} replications"
    elif not np.isfinite(half).any():
        ci = f"mean of {reps} replications (no CI: a CI needs 2 or more)"
    else:
        span = np.nanmax(mean + np.nan_to_num(half)) - np.nanmin(mean - np.nan_to_num(half))
        widest = float(np.nanmax(half))
        ci = f"mean of {reps} replications; bands and error bars: 95% CI"
        if widest < 0.02 * span:
            ci += f" (at most ±{widest:.2g}: too narrow to see at this scale)"
    missing = f"\nno panel: {', '.join(empty)} ({MISSING_TEXT[metric]})" if empty else ""
    return f"{what}\n{ci}{missing}"


def cell_figures(cell: CellPlots) -> dict[str, Figure]:
    """step_cdf.png, utilization.png, and split.png and gantt.png when they have traces, each
    titled with the cell and with the workers named."""
    figures = {}
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    step_cdf(cell.traces, fig.add_subplot())
    figure_title(fig, cell.title("Step time CDF, one line per policy"))
    figures["step_cdf.png"] = fig

    n = max((len(v) for v in cell.utilization.values()), default=0)
    fig = Figure(figsize=(max(7.5, 2.0 + 0.5 * n * max(1, len(cell.utilization)) / 3), 4.6), layout="constrained")
    utilization_bars(cell.utilization, fig.add_subplot(), cell.workers)
    figure_title(fig, cell.title("Utilization per worker and policy"))
    figures["utilization.png"] = fig

    if cell.split:
        figures["split.png"] = _split_figure(cell)
    if cell.gantt:
        figures["gantt.png"] = _gantt_figure(cell)
    return figures


def _split_figure(cell: CellPlots) -> Figure:
    """One panel per re-splitting policy, at most 3 a row, on one y scale, one worker legend."""
    columns = balanced_columns(len(cell.split), 3)
    rows = math.ceil(len(cell.split) / columns)
    fig = Figure(figsize=(4.0 * columns + 1.8, 3.2 * rows + 0.8), layout="constrained")
    grid = fig.subplots(rows, columns, squeeze=False, sharey=True)
    for ax, trace in zip(grid.flat, cell.split):
        split_over_epochs(trace, ax, cell.workers, legend=False)
    for ax in grid.flat[len(cell.split) :]:
        ax.set_visible(False)
    _first_column_labels(grid)
    if cell.split[0].n_workers <= 16:
        figure_legend(fig, grid[0, 0].get_lines(), title="worker")
    figure_title(fig, cell.title("Each worker's local batch at the start of every epoch"))
    return fig


def _gantt_figure(cell: CellPlots) -> Figure:
    """One timeline per policy, stacked on one time scale (the same span is the same width)."""
    shown = cell.gantt
    height = 1.0 + (0.9 + 0.3 * shown[0].n_workers) * len(shown)
    fig = Figure(figsize=(9.5, height), layout="constrained")
    column = fig.subplots(len(shown), 1, squeeze=False, sharex=True)[:, 0]
    for ax, trace in zip(column, shown):
        gantt(trace, range(max(0, trace.n_steps - 4), trace.n_steps), ax, cell.workers, legend=False)
        ax.set_xlabel("")
        ax.xaxis.set_tick_params(labelbottom=True)
    column[-1].set_xlabel("time since the first step shown began (s)")
    figure_legend(fig, gantt_handles())
    names = [t.policy for t in shown]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    figure_title(fig, cell.title(f"The last steps of {listed}: compute, wait and all-reduce"))
    return fig


def _first_column_labels(grid: np.ndarray) -> None:
    """Keep the y label only on the first column of ``grid``."""
    for (_, c), ax in np.ndenumerate(grid):
        if c:
            ax.set_ylabel("")
