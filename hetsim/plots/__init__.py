"""Plots: matplotlib drawings from plain data (the object-oriented API only: no pyplot, no global
state, no display). :mod:`~hetsim.plots.charts` draws one chart onto an Axes,
:mod:`~hetsim.plots.run` composes and saves a results folder's figures, and
:mod:`~hetsim.plots.style` holds what makes them all readable the same way (distinct line styles,
legends outside the data, uncrowded log ticks).
"""

from hetsim.plots.charts import (
    best_policy_map,
    comparison_bars,
    gantt,
    prediction_overlay,
    share_by_epoch,
    speedup_lines,
    split_over_epochs,
    step_cdf,
    step_time_by_epoch,
    utilization_bars,
)
from hetsim.plots.run import CellPlots, cell_figures, render_run, speedup_figure
from hetsim.plots.style import line_style, save, set_log_ticks

__all__ = [
    "CellPlots",
    "best_policy_map",
    "cell_figures",
    "comparison_bars",
    "gantt",
    "line_style",
    "prediction_overlay",
    "render_run",
    "save",
    "set_log_ticks",
    "share_by_epoch",
    "speedup_figure",
    "speedup_lines",
    "split_over_epochs",
    "step_cdf",
    "step_time_by_epoch",
    "utilization_bars",
]
