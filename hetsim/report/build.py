"""Report building: what ``sweep`` and ``report`` show and leave on disk.

This module owns turning a sweep's results into reports (``simulate``'s table and files are
:mod:`hetsim.report.run_table`'s): a sweep's progress line, and a results folder's report (results.parquet,
summary.csv, the plotted cell's traces, every plot, and the speedup table). It decides what the
trace plots show (:func:`cell_plots`, and :func:`plotted_cell` for what ``sweep --trace`` keeps);
:mod:`hetsim.plots` only draws it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO

import pandas as pd

from hetsim.core.errors import ConfigError
from hetsim.core.files import atomic_folder, write_frame
from hetsim.core.options import TraceMode
from hetsim.engines import engine_named
from hetsim.model.trace import Trace
from hetsim.policies import policy_class
from hetsim.run.metrics import BASELINE, summarize
from hetsim.run.simulate import simulate, simulate_sampled
from hetsim.sweep.results import RunFolder, markdown_table, row_speedups, summarize_cells
from hetsim.sweep.run import Progress, expand, replication_seeds
from hetsim.sweep.spec import SweepSpec, point_scenario

if TYPE_CHECKING:  # hetsim.plots (matplotlib: over a second) is imported only where a figure is drawn
    from hetsim.plots import CellPlots

TRACES_FILE = "traces.parquet"  # replication 0 of the plotted cell, every policy


# ----------------------------------------------------------------------------- sweep progress


def progress_printer(progress: Progress, stream: TextIO | None = None) -> Callable[[], None]:
    """A function that shows ``progress`` on ``stream`` (default: stderr at call time): a bar
    redrawn in place on a terminal, else a line every tenth of the cells."""
    out = stream if stream is not None else sys.stderr
    tty = out.isatty()
    step = max(1, progress.total // 10)

    def show() -> None:
        p = progress
        text = f"{p.done}/{p.total} cells  {p.rate:.1f} cells/s  ETA {p.eta_s:.0f} s"
        if tty:
            filled = int(30 * p.done / max(p.total, 1))
            bar = f"[{'#' * filled}{'.' * (30 - filled)}]"
            print(f"\r{bar} {text}", end="\n" if p.done == p.total else "", file=out, flush=True)
        elif p.done % step == 0 or p.done == p.total:
            print(text, file=out, flush=True)

    return show


# ----------------------------------------------------------------------------- results folder


SPEEDUP_TEXT = {
    "throughput": f"throughput of the policy / throughput of {BASELINE}",
    "time_to_target": f"time to target of {BASELINE} / time to target of the policy",
}


def render_report(
    folder: RunFolder, spec: SweepSpec, metric: str = "throughput", trace: TraceMode | None = None
) -> str:
    """Rebuild results.parquet, summary.csv and every plot, all or none of them (the plotted
    cell's traces, a cache, are simulated and written first when missing); return the report's
    text (the folder's line and the speedup table, by ``metric``). ``trace`` (default: what the
    folder's meta.json records) decides what the trace plots draw (:func:`plotted_cell`); a plot
    it leaves out gets a note on stderr."""
    trace = folder.trace_mode() if trace is None else trace
    results = folder.results()
    axes = [a.name for a in spec.axes]
    summary = summarize_cells(results, axes, metric)
    cell, notes = plotted_cell(folder, spec, results, trace)
    if cell is not None:  # the titles name the cell, the axes its workers
        names = [w.name for w in point_scenario(spec, plotted_point(spec)).workers]
        cell = dataclasses.replace(cell, where=plot_cell_labels(spec), workers=names)
    with atomic_folder(folder.path, "run_dir") as tmp:  # a failure leaves the previous tables and plots
        write_frame(tmp / "results.parquet", row_speedups(results, axes, metric))
        write_frame(tmp / "summary.csv", summary)
        (tmp / "plots").mkdir()
        from hetsim.plots import render_run

        plots = render_run(tmp / "plots", summary, axes, spec.plots.x, spec.plots.lines, cell, metric)
    for note in notes:
        print(f"hetsim: note: {note}", file=sys.stderr)
    missing = len(expand(spec)) - results["cell"].nunique()
    labels = ", ".join(f"{k}={v}" for k, v in plot_cell_labels(spec).items()) or "the one grid point"
    shown = {1: f"traces of {labels}", 0: "no traces: --trace none"}.get(
        trace.kept, f"traces of {labels}, steps 0, {trace.kept}, {2 * trace.kept}, ..."
    )
    head = (
        f"{folder.path}: {results['cell'].nunique()} cells x {spec.replications} replications"
        + (f" ({missing} cells missing: --resume {folder.path})" if missing else "")
        + f"; {len(plots)} plots in {folder.path / 'plots'} ({shown})"
    )
    gaps = bool(summary["speedup_vs_equal"].isna().any())
    if BASELINE not in spec.policies:
        why = f"-: no value (no {BASELINE} run to compare with: add {BASELINE} to the sweep's policies)"
    else:
        why = "-: no value" + (
            f" (one or more of the policy's runs, or of {BASELINE}'s, end before the target)"
            if metric == "time_to_target"
            else ""
        )
    return (
        head + f"\n\nSpeedup vs {BASELINE} ({SPEEDUP_TEXT[metric]}; "
        "mean ± 95% CI over replications)\n\n"
        + markdown_table(summary, axes, spec.policies)
        + (f"\n\n{why}" if gaps else "")
    )


def plot_cell_labels(spec: SweepSpec) -> dict[str, object]:
    """The grid point the trace plots show: the sweep's [plots] cell, else each axis's last value."""
    chosen = dict(spec.plots.cell)
    return {a.name: chosen.get(a.name, a.labels[-1]) for a in spec.axes}


def plotted_point(spec: SweepSpec) -> tuple[int, ...]:
    """The grid point whose traces the plots show (:func:`plot_cell_labels`)."""
    labels = plot_cell_labels(spec)
    return tuple(a.labels.index(labels[a.name]) for a in spec.axes)


def plotted_traces(folder: RunFolder, spec: SweepSpec, trace: TraceMode | None = None) -> dict[str, Trace]:
    """Replication 0 of the plotted cell under every policy (simulated once, then read back):
    every step, or with ``trace`` sampling (``--trace sample``) steps 0, k, 2k, ... of a barrier
    policy's run (an async run keeps every update)."""
    saved = folder.read_traces(TRACES_FILE)
    if saved is not None:
        return saved
    every = 1 if trace is None else max(trace.kept, 1)
    scenario = point_scenario(spec, plotted_point(spec))
    seed = replication_seeds(spec)[0]
    engine = engine_named(spec.engine)
    traces = {}
    for p in spec.policies:
        if every == 1:
            traces[p] = simulate(scenario, scenario.named_policy(p), seed=seed, engine=engine)
            continue
        sampled, _ = simulate_sampled(scenario, scenario.named_policy(p), every, seed=seed, engine=engine)
        assert sampled is not None  # every > 0 keeps a trace
        traces[p] = sampled
    folder.write_traces(TRACES_FILE, traces.values())
    return traces


def plotted_cell(
    folder: RunFolder, spec: SweepSpec, results: pd.DataFrame, trace: TraceMode
) -> tuple[CellPlots | None, list[str]]:
    """What the trace plots draw under ``trace``, and a note per plot left out. ``none``: no
    trace plots. ``sample``: the step CDF is that of the kept steps (a systematic sample of the
    run's); each policy's utilization is the whole run's (its replication-0 row in ``results``;
    the kept steps would only estimate it); the Gantt chart, which draws consecutive steps, is
    left out, and so is the split over epochs unless every epoch's first step is kept."""
    if trace.kept == 0:
        return None, []
    traces = plotted_traces(folder, spec, trace)
    cell = cell_plots(traces)
    if trace.kept == 1:
        return cell, []
    notes = []
    if cell.gantt:
        notes.append(f"gantt.png left out: {trace.describe()} keeps steps {trace.kept} apart, and a Gantt chart "
                     "draws consecutive steps")  # fmt: skip
    split = cell.split
    per_epoch = point_scenario(spec, plotted_point(spec)).workload.steps_per_epoch
    if split and per_epoch % trace.kept:
        split = []
        notes.append(f"split.png left out: {trace.describe()} does not keep the first step of every epoch "
                     f"(epochs of {per_epoch} steps)")  # fmt: skip
    run = run_utilization(spec, results)
    estimated = [p for p in cell.utilization if p not in run]
    if estimated:
        notes.append(f"utilization.png: {', '.join(estimated)} from the kept steps only (the plotted cell has not "
                     f"finished: --resume {folder.path})")  # fmt: skip
    utilization = {p: run.get(p, u) for p, u in cell.utilization.items()}
    return dataclasses.replace(cell, utilization=utilization, split=split, gantt=[]), notes


def run_utilization(spec: SweepSpec, results: pd.DataFrame) -> dict[str, list[float]]:
    """Each policy's per-worker utilization in replication 0 of the plotted cell, from its row
    of ``results`` (the same run as its trace); a policy whose cell has not finished is absent."""
    point = plotted_point(spec)
    policy = {c.index: c.policy for c in expand(spec) if c.point == point}
    rows = results[results["cell"].isin(list(policy)) & (results["replication"] == 0)]
    return {policy[int(c)]: [float(x) for x in u] for c, u in zip(rows["cell"], rows["utilization"])}


# ----------------------------------------------------------------------------- what the trace plots show


def resplits(policy: str) -> bool:
    """Whether the policy registered as ``policy`` changes its split while it runs (False for a
    name that is not registered)."""
    try:
        return policy_class(policy).resplits
    except ConfigError:
        return False


def cell_plots(traces: Mapping[str, Trace], baseline: str = BASELINE) -> CellPlots:
    """The plotted cell's data for :func:`hetsim.plots.render_run`: every trace's utilization;
    the split over epochs of the policies that re-split (else of the first synchronous trace);
    Gantt charts of the baseline, the first policy that re-splits and the one with the highest
    throughput, each once, synchronous traces only (an async trace has no steps to draw)."""
    summaries = {p: summarize(t) for p, t in traces.items()}
    synchronous = {p: t for p, t in traces.items() if t.synchronous}
    moving = [p for p in synchronous if resplits(p)]
    split = [synchronous[p] for p in moving] or list(synchronous.values())[:1]
    best = max(synchronous, key=lambda p: summaries[p].throughput_sps, default=None)
    shown = [p for p in dict.fromkeys([baseline, *moving[:1], best]) if p in synchronous]
    from hetsim.plots import CellPlots

    return CellPlots(
        traces=traces,
        utilization={p: s.utilization for p, s in summaries.items()},
        split=split,
        gantt=[synchronous[p] for p in shown],
    )
