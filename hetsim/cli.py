"""``python -m hetsim``: the command line. The only module that prints.

Bad input of any kind ends in one line on stderr (``hetsim: error: <field>: <problem>``) and
exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import tomli_w

from hetsim import __version__
from hetsim.cli_analysis import COMMANDS as ANALYSIS_COMMANDS
from hetsim.cli_analysis import add_subcommands
from hetsim.engines import ENGINE_CHOICES
from hetsim.config import builtin_names, builtin_text, load_scenario, tomllib
from hetsim.sweepfile import SweepSpec, default_sweep_text, load_sweep, point_scenario
from hetsim.errors import ConfigError
from hetsim.metrics import Summary, summarize, with_speedups
from hetsim.cli_common import OneLineParser, add_scenario_options, check_seed, parse_policies, run_main, text_table
from hetsim.plots import render_run
from hetsim.results import RunFolder, markdown_table, provenance, summarize_cells
from hetsim.simulate import simulate
from hetsim.sweep import Progress, expand, make_executor, replication_seeds
from hetsim.files import atomic_write, write_json
from hetsim.trace import Trace

def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="hetsim", description="Simulate synchronous data-parallel SGD on heterogeneous clusters.")
    parser.add_argument("--version", action="version", version=f"hetsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    sub.add_parser("scenarios", help="list the built-in scenarios")

    show = sub.add_parser("show", help="print a scenario as TOML (to copy and edit)")
    show.add_argument("scenario", help="built-in name or file")
    show.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")

    sim = sub.add_parser("simulate", help="simulate policies on one scenario and seed")
    add_scenario_options(sim, "print the summaries as a JSON list")
    sim.add_argument("--out", type=Path, default=None, metavar="DIR", help="write trace.parquet, trace.csv and summary.json")
    sim.add_argument("--engine", choices=ENGINE_CHOICES, default="auto",
                     help="simpy (the reference), vector (barrier policies; the same traces, faster) or auto "
                          "(vector where it runs the policy; the default)")
    sw = sub.add_parser("sweep", help="run a parameter sweep into a new results folder (default: the embedded sweep)")
    sw.add_argument("sweep", nargs="?", default=None, help="sweep file (TOML or JSON); default: the embedded sweep")
    sw.add_argument("--show-default", action="store_true", help="print the embedded default sweep file and exit")
    sw.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="local processes or LocalCluster workers (default: all cores)")
    sw.add_argument("--scheduler", default=None, metavar="ADDR", help="a Dask scheduler (tcp://host:8786), or 'local' for a LocalCluster")
    sw.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR", help="finish the missing cells of an interrupted sweep")
    sw.add_argument("--runs", type=Path, default=Path("runs"), metavar="DIR", help="where results folders are made (default: runs)")
    sw.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                    help="simpy, vector or auto (default: the sweep file's engine key, else auto; the results are the same)")

    rep = sub.add_parser("report", help="re-render a results folder's tables and plots; print its summary")
    rep.add_argument("run_dir", type=Path)
    add_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    def run() -> int:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)

    return run_main("hetsim", run)


def cmd_scenarios(args: argparse.Namespace) -> int:
    for name in builtin_names():
        print(f"{name:<14} {load_scenario(name).description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.scenario in builtin_names() and not args.set and not Path(args.scenario).exists():
        print(builtin_text(args.scenario), end="")
        return 0
    print(tomli_w.dumps(load_scenario(args.scenario, args.set).to_dict()), end="")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.set)
    policies = parse_policies(args.policy)
    check_seed(args.seed)
    traces = [simulate(scenario, name, seed=args.seed, engine=args.engine) for name in policies]
    summaries = with_speedups([summarize(t, scenario) for t in traces])
    if args.out is not None:
        write_outputs(args.out, traces, summaries)
    if args.json:
        print(json.dumps([s.to_dict() for s in summaries], indent=2))
    else:
        print(f"{scenario.name}: {scenario.n_workers} workers, global batch {scenario.workload.global_batch}, "
              f"{scenario.workload.epochs} epochs x {scenario.workload.steps_per_epoch} steps, "
              f"seed {scenario.seed if args.seed is None else args.seed}")
        print(format_table(summaries))
    return 0


def write_outputs(directory: Path, traces: Sequence[Trace], summaries: Sequence[Summary]) -> None:
    import pandas as pd

    if directory.exists() and not directory.is_dir():
        raise ConfigError("--out", f"{directory} exists and is not a folder")
    frame = pd.concat([t.to_frame() for t in traces], ignore_index=True)
    atomic_write(directory / "trace.parquet", lambda tmp: frame.to_parquet(tmp, index=False))
    atomic_write(directory / "trace.csv", lambda tmp: frame.to_csv(tmp, index=False))
    text = json.dumps([s.to_dict() for s in summaries], indent=2) + "\n"
    atomic_write(directory / "summary.json", lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def format_table(summaries: Sequence[Summary]) -> str:
    """One row per policy; straggler columns appear when some policy has them."""
    columns: list[tuple[str, Callable[[Summary], str]]] = [
        ("policy", lambda s: s.policy),
        ("mean step", lambda s: f"{s.mean_step_s * 1e3:.1f} ms"),
        ("total time", lambda s: f"{s.total_time_s:.1f} s"),
        ("throughput", lambda s: f"{s.throughput_sps:.0f} /s"),
        ("utilization", lambda s: f"{s.mean_utilization:.1%}"),
        ("vs equal", lambda s: "-" if s.speedup_vs_equal is None else f"{s.speedup_vs_equal:.3f}x"),
    ]
    if any(s.dropped_samples for s in summaries):
        columns.append(("dropped", lambda s: f"{s.dropped_samples / s.steps:.0f} /step" if s.dropped_samples else "-"))
    if any(s.staleness_mean is not None for s in summaries):
        columns.append(("staleness", lambda s: "-" if s.staleness_mean is None else f"{s.staleness_mean:.1f} (p95 {s.staleness_p95:.0f})"))
    if any(s.recovery_steps is not None for s in summaries):
        columns.append(("recovery", lambda s: "-" if s.recovery_steps is None else f"{s.recovery_steps:.1f} steps"))
    columns.append(("final split", lambda s: "/".join(map(str, s.final_batches))))
    rows = [[fmt(s) for _, fmt in columns] for s in summaries]
    return text_table([name for name, _ in columns], rows, left={0, len(columns) - 1})


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.show_default:
        print(default_sweep_text(), end="")
        return 0
    if args.resume is not None:
        if args.sweep is not None:
            raise ConfigError("--resume", "give either a sweep file or --resume, not both")
        folder = RunFolder.open(args.resume, "--resume")
        spec = folder.spec()
    else:
        spec = load_sweep(args.sweep if args.sweep is not None else tomllib.loads(default_sweep_text()))
    if args.engine is not None:
        spec = dataclasses.replace(spec, engine=args.engine)
    cells = expand(spec)
    executor = make_executor(args.jobs, args.scheduler)
    try:
        if args.resume is None:
            folder = RunFolder.create(args.runs, spec.name)
            folder.write_text("sweep.toml", tomli_w.dumps(spec.to_dict()))
            write_json(folder.path / "meta.json", {**provenance(), "executor": executor.description, "engine": spec.engine,
                                             "cells": len(cells), "replications": spec.replications})
        done = folder.done_cells()
        todo = [c for c in cells if c.index not in done]
        print(f"{folder.path}: {len(todo)} of {len(cells)} cells to run ({spec.replications} replications each) "
              f"on {executor.description}", file=sys.stderr)
        progress = Progress(len(todo))
        show = _progress_printer(progress)
        try:
            for cell, rows in executor.run(spec, todo):
                folder.write_part(cell.index, rows)
                progress.advance()
                show()
        except KeyboardInterrupt:
            print(f"\ninterrupted: {len(folder.done_cells())} of {len(cells)} cells saved; "
                  f"finish with: python -m hetsim sweep --resume {folder.path}", file=sys.stderr)
            return 130
    finally:
        executor.close()
    print(render_report(folder, spec))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    folder = RunFolder.open(args.run_dir)
    print(render_report(folder, folder.spec()))
    return 0


def render_report(folder: RunFolder, spec: SweepSpec) -> str:
    """Rebuild results.parquet, summary.csv, the plotted cell's traces and every plot."""
    results = folder.results()
    axes = [a.name for a in spec.axes]
    summary = summarize_cells(results, axes)
    folder.write_frame("results.parquet", results)
    folder.write_frame("summary.csv", summary)
    traces = plotted_traces(folder, spec)
    plots = render_run(folder.path / "plots", summary, results, traces, axes, spec.plots.x, spec.plots.lines)
    missing = len(expand(spec)) - results["cell"].nunique()
    cell = ", ".join(f"{k}={v}" for k, v in plot_cell_labels(spec).items())
    head = (f"{folder.path}: {results['cell'].nunique()} cells x {spec.replications} replications"
            + (f" ({missing} cells missing: --resume {folder.path})" if missing else "")
            + f"; {len(plots)} plots in {folder.path / 'plots'} (traces of {cell})")
    return head + "\n\nSpeedup vs equal (throughput of the policy / throughput of equal; mean ± 95% CI over replications)\n\n" + markdown_table(summary, axes, spec.policies)


def plot_cell_labels(spec: SweepSpec) -> dict[str, object]:
    """The grid point the trace plots show: the sweep's [plots] cell, else each axis's last value."""
    chosen = dict(spec.plots.cell)
    return {a.name: chosen.get(a.name, a.labels[-1]) for a in spec.axes}


def plotted_traces(folder: RunFolder, spec: SweepSpec) -> dict[str, Trace]:
    """Replication 0 of the plotted cell under every policy (simulated once, then read back)."""
    import pandas as pd

    path = folder.path / "traces.parquet"
    if path.is_file():
        frame = pd.read_parquet(path)
        return {p: Trace.from_frame(frame[frame["policy"] == p]) for p in dict.fromkeys(frame["policy"])}
    labels = plot_cell_labels(spec)
    point = tuple(a.labels.index(labels[a.name]) for a in spec.axes)
    scenario = point_scenario(spec, point)
    seed = replication_seeds(spec)[0]
    traces = {p: simulate(scenario, p, seed=seed, engine=spec.engine) for p in spec.policies}
    folder.write_frame("traces.parquet", pd.concat([t.to_frame() for t in traces.values()], ignore_index=True))
    return traces


def _progress_printer(progress: Progress):
    tty = sys.stderr.isatty()
    step = max(1, progress.total // 10)

    def show() -> None:
        p = progress
        text = f"{p.done}/{p.total} cells  {p.rate:.1f} cells/s  ETA {p.eta_s:.0f} s"
        if tty:
            filled = int(30 * p.done / max(p.total, 1))
            print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}", end="\n" if p.done == p.total else "", file=sys.stderr, flush=True)
        elif p.done % step == 0 or p.done == p.total:
            print(text, file=sys.stderr, flush=True)

    return show


COMMANDS = {"scenarios": cmd_scenarios, "show": cmd_show, "simulate": cmd_simulate, "sweep": cmd_sweep, "report": cmd_report, **ANALYSIS_COMMANDS}
