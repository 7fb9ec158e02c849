"""Plots a reader understands without the README, checked on the matplotlib Figures before they
are saved: titles name the metric and the grid cell, workers are named, lines differ in style
as well as colour, legends and every label lie outside the data and inside the image, no panel
is empty, the aspect ratio is sensible, CI bands are drawn (or the title says why they cannot be
seen), and log-axis tick labels never overlap."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from hetsim.plots import CellPlots, cell_figures, render_run, speedup_figure
from hetsim.plots.style import DPI, nice_log_ticks
from hetsim.policies import Dynamic, Equal
from hetsim.report.build import cell_plots
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict
from validation.matrix_report import figure as matrix_figure

METRICS = ("throughput", "time_to_target")
POLICIES = ["equal", "dynamic", "dynamic-enhanced", "optimal", "adaptive", "backup", "ksync", "async"]
WORKERS = ["fast#0", "fast#1", "slow"]


def summary_frame(ci: float = 0.05) -> pd.DataFrame:
    """A speedup summary as results.summarize_cells writes it: x = noise_scale (128, 4096), lines
    = stragglers; ``dynamic`` never has a value (time to target not reached) and ``async`` none
    at 4096; every other policy's CI half-width is ``ci``."""
    rows = []
    for k, (policy, scale, stragglers) in enumerate(itertools.product(POLICIES, (128, 4096), ("mild", "heavy"))):
        value = 1.0 if policy == "equal" else 1.5 + 0.1 * k
        if policy == "dynamic" or (policy == "async" and scale == 4096):
            value = np.nan
        rows.append({"noise_scale": scale, "stragglers": stragglers, "policy": policy, "replications": 3,
                     "speedup_vs_equal": value, "speedup_vs_equal_ci95": 0.0 if policy == "equal" else ci})  # fmt: skip
    return pd.DataFrame(rows)


def drawn(fig: Figure):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def texts_inside(fig: Figure, renderer) -> None:
    """Every visible panel with its labels, titles and legend, and every figure-level legend and
    title, lies within the image (nothing clipped); a tight bbox holds only what was drawn."""
    image = fig.bbox.padded(1.0)
    parts = [*visible_axes(fig), *fig.legends, *([fig._suptitle] if fig._suptitle else [])]
    for part in parts:
        box = part.get_tightbbox(renderer) if hasattr(part, "get_tightbbox") else part.get_window_extent(renderer)
        assert image.contains(box.x0, box.y0) and image.contains(box.x1, box.y1), (part, box, image)


def visible_axes(fig: Figure):
    return [ax for ax in fig.axes if ax.get_visible()]


def aspect_ok(fig: Figure, widest: float = 3.0) -> None:
    width, height = fig.get_size_inches() * DPI
    assert width <= 2000 and height <= 2000, (width, height)
    assert 1 / widest <= width / height <= widest, (width, height)


# ----------------------------------------------------------------------------- the speedup grid


@pytest.fixture(scope="module")
def grids() -> dict[str, tuple[Figure, object]]:
    """The speedup grid of :func:`summary_frame` by each metric, drawn once."""
    axes = ["stragglers", "noise_scale"]
    figures = {m: speedup_figure(summary_frame(), axes, "noise_scale", "stragglers", m) for m in METRICS}
    return {m: (fig, drawn(fig)) for m, fig in figures.items()}


def test_time_to_target_grid_names_its_metric_and_leaves_no_empty_panel(grids):
    fig, renderer = grids["time_to_target"]
    title = fig.get_suptitle()
    assert "time to target" in title and "throughput" not in title
    assert "no panel: dynamic" in title  # said, not drawn as an empty axis
    panels = visible_axes(fig)
    titles = [ax.get_title() for ax in panels]
    assert len(panels) == len(POLICIES) - 2 and not any(t.startswith("dynamic\n") or t == "dynamic" for t in titles)
    assert all(any(np.isfinite(line.get_ydata()).any() for line in ax.get_lines()) for ax in panels)
    assert any(t.startswith("async") and "no value at noise_scale=4096" in t for t in titles)
    assert "time to target" in panels[0].get_ylabel()
    aspect_ok(fig)
    texts_inside(fig, renderer)


def test_the_grid_wraps_into_rows_of_at_most_four_panels(grids):
    fig, renderer = grids["throughput"]
    lefts = {round(ax.get_position().x0, 3) for ax in visible_axes(fig)}
    assert 1 < len(lefts) <= 4
    assert "by throughput" in fig.get_suptitle()
    aspect_ok(fig)
    texts_inside(fig, renderer)


def test_lines_differ_in_dash_or_marker_and_the_legend_is_outside_every_panel(grids):
    fig, renderer = grids["throughput"]
    first = visible_axes(fig)[0]
    handles, _ = first.get_legend_handles_labels()  # error-bar containers: [0] is the data line
    styles = [(h[0].get_linestyle(), h[0].get_marker()) for h in handles]
    assert len(styles) == 2 and styles[0][0] != styles[1][0] and styles[0][1] != styles[1][1]
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in visible_axes(fig))
    assert {t.get_text() for t in legend.get_texts()} == {"stragglers=mild", "stragglers=heavy"}


@pytest.mark.parametrize(("ci", "said"), [(1e-4, True), (0.5, False)])
def test_ci_bands_are_drawn_and_the_title_says_when_they_are_too_narrow_to_see(ci, said):
    fig = speedup_figure(summary_frame(ci), ["stragglers", "noise_scale"], "noise_scale", "stragglers")
    bands = [c for c in visible_axes(fig)[0].collections if isinstance(c, PolyCollection)]
    assert bands and all(c.get_alpha() >= 0.2 for c in bands)
    vertices = bands[0].get_paths()[0].vertices
    at_first_x = vertices[vertices[:, 0] == vertices[:, 0].min(), 1]
    assert np.ptp(at_first_x) == pytest.approx(2 * ci, rel=1e-6)  # the band is mean +- the CI half-width
    assert ("too narrow to see" in fig.get_suptitle()) is said
    assert "95% CI" in fig.get_suptitle()


@pytest.mark.slow  # saves a PNG: about 2 s here
def test_render_run_writes_pngs_of_a_sensible_shape(tmp_path):
    from matplotlib.image import imread

    (path,) = render_run(tmp_path, summary_frame(), ["stragglers", "noise_scale"], "noise_scale", "stragglers")
    height, width = imread(path).shape[:2]
    assert width / height <= 3.0 and width <= 2000  # was 2992 x 319: one strip of 8 panels


# ----------------------------------------------------------------------------- the plotted cell


@pytest.fixture(scope="module")
def cell() -> CellPlots:
    noise = {"dist": "lognormal", "sigma": 0.1}
    workers = [
        {"name": "fast", "count": 2, "overhead_s": 0.002, "per_sample_s": 0.0002, "noise": noise},
        {"name": "slow", "overhead_s": 0.002, "per_sample_s": 0.0006, "noise": noise},
    ]
    scenario = load_scenario(scenario_dict(workers, global_batch=96, steps_per_epoch=10, epochs=3))
    assert [w.name for w in scenario.workers] == WORKERS
    traces = {
        p: simulate(scenario, scenario.named_policy(p), seed=3)
        for p in ("equal", "dynamic", "dynamic-enhanced", "optimal")
    }
    chosen = cell_plots(traces)
    return CellPlots(chosen.traces, chosen.utilization, chosen.split, chosen.gantt, {"slow": 3.0, "size": 3}, WORKERS)


@pytest.fixture(scope="module")
def cell_figs(cell: CellPlots) -> dict[str, tuple[Figure, object]]:
    return {name: (fig, drawn(fig)) for name, fig in cell_figures(cell).items()}


def test_every_cell_plot_names_its_cell_and_keeps_its_text_inside(cell_figs):
    assert set(cell_figs) == {"step_cdf.png", "utilization.png", "split.png", "gantt.png"}
    for name, (fig, renderer) in cell_figs.items():
        assert "cell slow=3.0, size=3" in fig.get_suptitle(), name
        aspect_ok(fig)
        texts_inside(fig, renderer)


def test_workers_are_named_not_numbered(cell_figs):
    (bars,) = cell_figs["utilization.png"][0].axes
    assert [t.get_text() for t in bars.get_xticklabels()] == WORKERS
    for ax in cell_figs["gantt.png"][0].axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == WORKERS
    shown = [ax.get_title().split(":")[0] for ax in cell_figs["gantt.png"][0].axes]  # not every policy
    assert cell_figs["gantt.png"][0].get_suptitle().startswith(f"The last steps of {', '.join(shown[:-1])} and ")
    (legend,) = cell_figs["split.png"][0].legends
    assert [t.get_text() for t in legend.get_texts()] == WORKERS


def test_cdf_lines_differ_in_dash_or_marker_and_legends_sit_outside_the_data(cell_figs):
    (cdf,) = cell_figs["step_cdf.png"][0].axes
    styles = [(line.get_linestyle(), line.get_marker()) for line in cdf.get_lines()]
    assert len(styles) == 4
    for a, b in itertools.combinations(styles, 2):
        assert a[0] != b[0] or a[1] != b[1]  # dynamic's line no longer hides under dynamic-enhanced's
    for name in ("step_cdf.png", "utilization.png"):
        fig, renderer = cell_figs[name]
        (ax,) = fig.axes
        legend = ax.get_legend()
        assert legend is not None
        assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)), name


def test_gantt_panels_share_one_time_scale_from_zero(cell_figs):
    axes = cell_figs["gantt.png"][0].axes
    limits = {ax.get_xlim() for ax in axes}
    assert len(axes) >= 2 and len(limits) == 1
    (low, _), = limits  # fmt: skip
    assert low <= 0.0 < low + 0.1


# ----------------------------------------------------------------------------- matrix.png and log ticks


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-3, 1e4), st.floats(1.05, 1e6))
def test_log_ticks_are_few_inside_the_range_and_increasing(lo, ratio):
    ticks = nice_log_ticks(lo, lo * ratio)
    assert 2 <= len(ticks) <= 7
    assert all(lo * (1 - 1e-9) <= t <= lo * ratio * (1 + 1e-9) for t in ticks)
    assert all(a < b for a, b in zip(ticks, ticks[1:]))


@pytest.mark.parametrize("span", [(0.025, 0.035), (0.02, 1.4)])
def test_matrix_plot_log_tick_labels_never_overlap_and_its_diagonal_is_at_45_degrees(span):
    measured = np.geomspace(*span, 6)
    points = pd.DataFrame({"config": ["a", "a", "b", "b", "c", "c"], "kind": ["same-run", "cross-run"] * 3,
                           "measured_step_s": measured, "predicted_step_s": measured * 1.03})  # fmt: skip
    load = pd.DataFrame({"t_s": [1.0, 2.0, 3.0], "loadavg_1m": [1.0, 1.5, 2.0], "cpu_busy": [0.5, 0.9, 1.0]})
    fig = matrix_figure(points, load, cpus=2)
    renderer = drawn(fig)
    scatter = fig.axes[0]
    assert "6 predictions of 3 configurations" in scatter.get_title()
    assert scatter.get_xlim() == scatter.get_ylim() and scatter.get_box_aspect() == 1
    for labels in (scatter.get_xticklabels(), scatter.get_yticklabels()):
        boxes: list[Bbox] = [t.get_window_extent(renderer) for t in labels if t.get_text()]
        assert len(boxes) >= 2
        assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    assert not scatter.get_legend().get_window_extent(renderer).overlaps(scatter.get_window_extent(renderer))
    aspect_ok(fig)
    texts_inside(fig, renderer)


def test_a_grid_with_no_value_anywhere_draws_no_empty_axes_but_says_so():
    nothing = summary_frame().assign(speedup_vs_equal=np.nan)
    fig = speedup_figure(nothing, ["stragglers", "noise_scale"], "noise_scale", "stragglers", "time_to_target")
    (ax,) = fig.axes
    assert not ax.axison and "nothing to draw" in ax.texts[0].get_text()
    assert all(p in fig.get_suptitle() for p in POLICIES if p != "equal")
    assert "CI" not in fig.get_suptitle()  # no interval of values that do not exist


@pytest.mark.slow
def test_a_text_axis_keeps_the_files_order_and_its_long_labels_fit():
    """A table-valued x axis (slowdown episodes, labelled by their TOML) is drawn in the sweep
    file's order, not sorted as text ("every_s = 10" before "every_s = 5"), its tick labels and
    panel titles wrapped so that every label stays inside the image."""
    labels = [f"{{every_s = {s}.0, duration_s = 1.0, factor = 2.0}}" for s in (5, 10, 20)]
    rows = [{"slowdown": x, "policy": p, "replications": 2, "speedup_vs_equal": 1.0 if p == "equal" else 1.1 + 0.1 * i,
             "speedup_vs_equal_ci95": 0.0 if p == "equal" else 0.05} for i, x in enumerate(labels)
            for p in ("equal", "optimal")]  # fmt: skip
    fig = speedup_figure(pd.DataFrame(rows), ["slowdown"], "slowdown", None, "throughput")
    renderer = drawn(fig)
    (ax,) = visible_axes(fig)
    ticks = [t.get_text().replace("\n", " ") for t in ax.get_xticklabels()]
    assert ticks == labels and all("\n" in t.get_text() for t in ax.get_xticklabels())
    texts_inside(fig, renderer)


def test_one_panel_keeps_its_whole_title():
    # one policy against equal, CIs too narrow to see: the title's line ran past both sides of
    # the one-panel figure, which a constrained layout does not wrap
    rows = [{"x": x, "policy": p, "replications": 3, "speedup_vs_equal": 1.0 if p == "equal" else 1.0 + x,
             "speedup_vs_equal_ci95": 0.001} for x in (0.1, 0.2, 0.4) for p in ("equal", "optimal")]  # fmt: skip
    fig = speedup_figure(pd.DataFrame(rows), ["x"], "x", None, "throughput")
    assert "too narrow to see" in fig.get_suptitle()
    texts_inside(fig, drawn(fig))


@pytest.mark.slow  # draws the figure twice: 0.6 s
def test_long_worker_names_slant_and_never_overlap():
    """Eight names like node0-v100#0 under four policies' bars ran into each other on one line."""
    from hetsim.plots.charts import utilization_bars

    names = [f"node{i // 4}-{'v100' if i < 4 else 'p100'}#{i % 4}" for i in range(8)]
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = utilization_bars({p: [0.5] * 8 for p in ("equal", "dynamic", "adaptive", "backup")}, fig.add_subplot(), names)
    renderer = drawn(fig)
    labels = ax.get_xticklabels()
    assert [t.get_text() for t in labels] == names
    assert {(t.get_rotation(), t.get_horizontalalignment()) for t in labels} == {(30.0, "right")}
    texts_inside(fig, renderer)
    for label in labels:  # level, they would run into each other
        label.set_rotation(0)
    boxes = [t.get_window_extent(drawn(fig)) for t in labels]
    assert any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")  # short names stay level
    ax = utilization_bars({"equal": [0.5] * 3}, fig.add_subplot(), WORKERS)
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {0.0}


def test_a_long_tailed_step_cdf_is_drawn_on_a_log_axis_and_epochs_tick_whole():
    """A few failure-repair steps 100x the rest pressed every policy's bulk into the first 2% of
    a linear axis; the epoch axis of a 5-epoch run ticked 0.5."""
    from hetsim.plots.charts import split_over_epochs, step_cdf

    scenario = load_scenario("shared-cluster", ["workload.epochs=3"])
    traces = {p: simulate(scenario, scenario.named_policy(p), seed=1) for p in ("equal", "dynamic")}
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = step_cdf(traces, fig.add_subplot())
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    calm = load_scenario("workstation", ["workload.epochs=5"])
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    assert step_cdf({"equal": simulate(calm, Equal(), seed=1)}, fig.add_subplot()).get_xscale() == "linear"
    ax = split_over_epochs(simulate(calm, Dynamic(), seed=1), Figure().add_subplot())
    drawn(ax.figure)
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_a_prediction_overlays_dotted_line_for_a_policy_with_no_closed_form_is_in_its_legend():
    """A group only simulated is joined by a dotted line, which read as an analytic curve: the
    legend names that style where (and only where) one is drawn."""
    from hetsim.plots.charts import prediction_overlay

    simulated = pd.DataFrame({"x": [0, 1, 0, 1], "policy": ["optimal"] * 2 + ["adaptive"] * 2, "speedup": [1, 2, 1, 3]})
    predicted = pd.DataFrame({"x": [0, 1], "policy": ["optimal"] * 2, "speedup": [1.0, 2.0]})
    for shown, dotted in ((simulated, True), (simulated[simulated["policy"] == "optimal"], False)):
        ax = prediction_overlay(shown, predicted, x="x", lines="policy", metric="speedup", ax=Figure().add_subplot())
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert ("simulated, no closed form" in labels) == dotted
        assert [line.get_linestyle() for line in ax.get_lines()].count(":") == int(dotted)
