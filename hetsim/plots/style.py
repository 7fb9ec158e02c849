"""What makes every plot readable the same way: a line style per series (colour, dash and marker
all differ, so a line drawn over another with the same values still shows), legends outside the
data, tick labels that cannot overlap on a log axis, and the atomic save.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, FuncFormatter, MaxNLocator

from hetsim.core.files import atomic_write

DASHES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DPI = 110


def line_style(k: int) -> dict[str, Any]:
    """The ``k``-th series' colour, dash and marker: 4 dashes and 8 markers against 10 colours,
    so any two of the first 40 series differ in colour and in dash or marker."""
    return {"color": f"C{k % 10}", "linestyle": DASHES[k % len(DASHES)], "marker": MARKERS[k % len(MARKERS)]}


LEGEND_WIDTH = 32  # characters a legend entry's line may take (a table-valued axis's label is longer)
TITLE_WIDTH = 48  # characters a panel title's line may take in a 3.2-inch panel, small type
TICKS_WIDTH = 36  # characters one row of x tick labels may take in such a panel, shared by its ticks
TITLE_PER_INCH = 12  # characters a figure title's line may take per inch of the figure's width, medium type


def wrap(text: str, width: int) -> str:
    """``text`` with each of its lines wrapped to ``width`` characters (long labels: a
    table-valued axis's TOML text) so that a constrained layout keeps room for the data."""
    return "\n".join(textwrap.fill(line, max(8, width)) for line in text.split("\n"))


def wrapped(formatter: Formatter, width: int) -> FuncFormatter:
    """``formatter``'s tick labels wrapped to ``width`` characters."""
    return FuncFormatter(lambda value, pos: wrap(str(formatter(value, pos)), width))


def legend_outside(ax: Axes, **kwargs: Any) -> None:
    """The axes' legend to the right of its data, top-aligned (a constrained layout makes room),
    long entries wrapped so that the room taken leaves the data theirs."""
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small", **kwargs)
    for text in legend.get_texts():
        text.set_text(wrap(text.get_text(), LEGEND_WIDTH))


def figure_title(fig: Figure, text: str) -> None:
    """``text`` over the whole figure, each line wrapped to the figure's width (a one-panel
    figure is narrow, and a constrained layout does not wrap a title: it cut it at both sides)."""
    fig.suptitle(wrap(text, int(fig.get_figwidth() * TITLE_PER_INCH)), fontsize="medium")


def figure_legend(fig: Figure, handles: Sequence[Any], title: str | None = None) -> None:
    """One legend for a figure of several panels, right of them all (a constrained layout)."""
    labels = [wrap(h.get_label(), LEGEND_WIDTH) for h in handles]
    fig.legend(handles, labels, loc="outside right center", fontsize="small", title=title, title_fontsize="small")


def nice_log_ticks(lo: float, hi: float, most: int = 7) -> list[float]:
    """Ticks for a log axis from ``lo`` to ``hi`` (> 0): 1-2-3-5 per decade, thinned to 1-2-5, 1-3
    and then to powers of ten (every k-th) until at most ``most`` remain, so labels never crowd; a
    range too narrow for three 1-2-5 ticks gets about four evenly spaced round ones instead."""
    decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    ticks = [m * 10.0**d for d in decades for m in (1, 2, 5) if lo <= m * 10.0**d <= hi]
    if len(ticks) < 3:
        return [float(t) for t in MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi) if lo <= t <= hi]
    for mantissas in ((1, 2, 3, 5), (1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0**d for d in decades for m in mantissas if lo <= m * 10.0**d <= hi]
        if len(ticks) <= most:
            return ticks
    step = int(np.ceil(len(ticks) / most))
    return ticks[::step]


def set_log_ticks(ax: Axes, which: str, lo: float, hi: float) -> None:
    """Log scale on ``which`` ("x" or "y") from ``lo`` to ``hi`` with :func:`nice_log_ticks`
    labelled as plain numbers ("20", "50", "100", not "2 x 10^1") and no minor labels."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    getattr(ax, f"set_{which}scale")("log")
    getattr(ax, f"set_{which}lim")(lo, hi)
    ticks = nice_log_ticks(lo, hi)
    axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
    axis.set_ticks([], minor=True)


def save(fig: Figure, path: Path) -> Path:
    """``fig`` as a PNG at ``path``, written atomically."""
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=DPI))
    return path
