"""``python -m hetsim``: the command line. It parses arguments and dispatches: simulating is
:mod:`hetsim.simulate`'s job, sweeps :mod:`hetsim.sweep`'s, report text, plots and output files
:mod:`hetsim.report`'s. It prints what the commands return (progress lines come from
:func:`hetsim.report.progress_printer`).

Bad input of any kind ends in one line on stderr (``hetsim: error: <field>: <problem>``) and
exit status 2, before anything is written.

Building the parser imports nothing heavy (tests/test_cli_startup.py checks): its choices and
defaults come from :mod:`hetsim.options`, and each command imports the modules it runs
(numpy, scipy, pandas, matplotlib, simpy come with them), so that ``--help`` or a mistyped
option answers at once. For the same reason ``--engine`` is checked as a command starts
(:func:`_check_engine`), not by argparse: the engine names are the registry's, known only once
the engines and plug-ins are imported.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hetsim import __version__
from hetsim.cli_analysis import COMMANDS as ANALYSIS_COMMANDS
from hetsim.cli_analysis import add_subcommands
from hetsim.cli_common import (
    OneLineParser,
    add_scenario_options,
    check_new_folder,
    check_seed,
    refuse_sweep_file,
    run_main,
    scenario_policies,
)
from hetsim.cli_costs import COMMANDS as COST_COMMANDS
from hetsim.cli_costs import add_subcommands as add_cost_subcommands
from hetsim.cli_plan import COMMANDS as PLAN_COMMANDS
from hetsim.cli_plan import add_subcommands as add_plan_subcommands
from hetsim.cli_traces import COMMANDS as TRACE_COMMANDS
from hetsim.cli_traces import add_subcommands as add_trace_subcommands
from hetsim.errors import ConfigError
from hetsim.options import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_SAMPLE_EVERY, SPEEDUP_METRICS, TRACE_MODES
from hetsim.params import MAX_COUNT, Param

if TYPE_CHECKING:
    from hetsim.results import RunFolder, TraceMode
    from hetsim.scenario import Scenario
    from hetsim.sweep import Cell, DaskExecutor, LocalExecutor
    from hetsim.sweepfile import SweepSpec


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="hetsim", description="Simulate synchronous data-parallel SGD on heterogeneous clusters."
    )
    parser.add_argument("--version", action="version", version=f"hetsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    sub.add_parser("scenarios", help="list the built-in scenarios")

    show = sub.add_parser("show", help="print a scenario as TOML (to copy and edit)")
    show.add_argument("scenario", help="built-in name or file")
    show.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")

    sim = sub.add_parser("simulate", help="simulate policies on one scenario and seed")
    add_scenario_options(sim, "print the summaries as a JSON list")
    sim.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="write trace.parquet, trace.csv and summary.json"
    )
    sim.add_argument(
        "--force", action="store_true", help="with --out: replace the results in a folder that already holds some"
    )
    sim.add_argument(
        "--trace",
        choices=TRACE_MODES,
        default="full",
        help="full: keep every worker's every step (default); none: summarise as the run goes, in memory "
        "O(workers + steps), and write no trace (--out writes summary.json only); sample: the same, keeping "
        "each --sample-every-th step's rows",
    )
    sim.add_argument(
        "--sample-every",
        type=int,
        default=DEFAULT_SAMPLE_EVERY,
        metavar="K",
        help=f"with --trace sample: keep every K-th step ({DEFAULT_SAMPLE_EVERY})",
    )
    sim.add_argument(
        "--engine",
        default="auto",
        help="simpy (the reference), vector (the same traces, faster), auto (vector where it runs the "
        "policy; the default) or a plug-in's name",
    )
    _add_sweep(
        sub.add_parser("sweep", help="run a parameter sweep into a new results folder (default: the embedded sweep)")
    )

    rep = sub.add_parser("report", help="re-render a results folder's tables and plots; print its summary")
    rep.add_argument("run_dir", type=Path)
    add_metric_option(rep)
    add_subcommands(sub)
    add_cost_subcommands(sub)
    add_plan_subcommands(sub)
    add_trace_subcommands(sub)
    return parser


def add_metric_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metric",
        choices=tuple(SPEEDUP_METRICS),
        default="throughput",
        help="what the speedup table and plots rank by: throughput (default) or time_to_target "
        "(needs [workload.efficiency] with target_steps)",
    )


def _add_sweep(sw: argparse.ArgumentParser) -> None:
    sw.add_argument("sweep", nargs="?", default=None, help="sweep file (TOML or JSON); default: the embedded sweep")
    sw.add_argument("--show-default", action="store_true", help="print the embedded default sweep file and exit")
    sw.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="local processes or LocalCluster workers (default: all cores)",
    )
    sw.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDR",
        help="a Dask scheduler (tcp://host:8786), or 'local' for a LocalCluster",
    )
    sw.add_argument(
        "--connect-timeout-s",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to try reaching --scheduler (default: {DEFAULT_CONNECT_TIMEOUT_S:g})",
    )
    sw.add_argument(
        "--resume", type=Path, default=None, metavar="RUN_DIR", help="finish the missing cells of an interrupted sweep"
    )
    sw.add_argument(
        "--runs", type=Path, default=Path("runs"), metavar="DIR", help="where results folders are made (default: runs)"
    )
    add_metric_option(sw)
    sw.add_argument(
        "--engine",
        default=None,
        help="simpy, vector, auto or a plug-in's name (default: the sweep file's engine key, else auto; the "
        "results are the same)",
    )
    sw.add_argument(
        "--trace",
        choices=TRACE_MODES,
        default=None,
        help="what the plotted cell (replication 0 of the [plots] cell, every policy) keeps for traces.parquet "
        "and the trace plots: full: every step (default); sample: each --sample-every-th step (the step CDF is "
        "of those steps; the Gantt chart is left out, and the split plot unless K divides an epoch's steps); "
        "none: no traces.parquet and no trace plots. Cells keep summaries whatever it says. Recorded in "
        "meta.json: --resume and report keep to it",
    )
    sw.add_argument(
        "--sample-every",
        type=int,
        default=None,
        metavar="K",
        help=f"with --trace sample: keep every K-th step ({DEFAULT_SAMPLE_EVERY})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    def run() -> int:
        if argv is not None:  # called from Python: the outputs record this command, not the caller's sys.argv
            from hetsim.provenance import record_command

            record_command(["python", "-m", "hetsim", *argv])
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)

    return run_main("hetsim", run)


def _check_engine(name: str | None) -> None:
    """``--engine`` (when given) names a registered engine or ``auto``: checked first, where
    argparse checked its choices before (see the module's docstring)."""
    if name is not None:
        from hetsim.engines import check_engine

        check_engine(name, "--engine")


def cmd_scenarios(args: argparse.Namespace) -> int:
    from hetsim.config import builtin_names, load_scenario

    for name in builtin_names():
        print(f"{name:<14} {load_scenario(name).description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    import tomli_w

    from hetsim.config import builtin_names, builtin_text, load_scenario

    if args.scenario in builtin_names() and not args.set and not Path(args.scenario).exists():
        print(builtin_text(args.scenario), end="")
        return 0
    print(tomli_w.dumps(load_scenario(args.scenario, args.set).to_dict()), end="")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from hetsim.config import load_scenario
    from hetsim.files import check_out_folder
    from hetsim.metrics import summarize, with_speedups
    from hetsim.provenance import run_record
    from hetsim.report import format_table, write_outputs
    from hetsim.results import TraceMode
    from hetsim.simulate import simulate, simulate_sampled

    _check_engine(args.engine)
    refuse_sweep_file(args.scenario)
    scenario = load_scenario(args.scenario, args.set)
    notes: list[str] = []
    policies = scenario_policies(args.policy, scenario, notes)
    check_seed(args.seed)
    every = TraceMode(args.trace, _sample_every(args.sample_every)).kept
    _check_sizes(scenario, policies, every)
    if args.out is not None:
        check_new_folder(args.out, args.force)
        check_out_folder(args.out)
    print(*notes, sep="\n", file=sys.stderr, end="\n" if notes else "")
    if args.trace != "full":  # summarised as the runs go, keeping no trace or each k-th step's rows
        runs = [simulate_sampled(scenario, p, every, seed=args.seed, engine=args.engine) for p in policies]
        traces = [t for t, _ in runs if t is not None]
        summaries = with_speedups([s for _, s in runs])
    else:
        traces = [simulate(scenario, name, seed=args.seed, engine=args.engine) for name in policies]
        summaries = with_speedups([summarize(t, scenario) for t in traces])
    if args.out is not None:
        seed = scenario.seed if args.seed is None else args.seed
        write_outputs(args.out, traces, summaries, run_record(scenario.name, scenario.to_dict(), seed))
    if args.json:
        print(json.dumps([s.to_dict() for s in summaries], indent=2))
    else:
        print(
            f"{scenario.name}: {scenario.n_workers} workers, global batch {scenario.workload.global_batch}, "
            f"{scenario.workload.epochs} epochs x {scenario.workload.steps_per_epoch} steps, "
            f"seed {scenario.seed if args.seed is None else args.seed}"
        )
        efficiency = scenario.workload.efficiency
        print(format_table(summaries, has_target=efficiency is not None and efficiency.target_steps is not None))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from hetsim.report import plotted_point, render_report
    from hetsim.results import RunFolder
    from hetsim.sweep import expand, make_executor
    from hetsim.sweepfile import default_sweep_text, point_scenario

    _check_engine(args.engine)
    if args.show_default:
        print(default_sweep_text(), end="")
        return 0
    folder, spec, trace = _resumed_or_new(args)
    cells = expand(spec)
    check_metric(args.metric, spec, cells)
    _check_sizes(point_scenario(spec, plotted_point(spec)), spec.policies, trace.kept)  # the plotted cell's traces
    executor = make_executor(args.jobs, args.scheduler, args.connect_timeout_s)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM ends the sweep as Ctrl-C does
    try:
        if folder is None:
            meta = {"executor": executor.description, "engine": spec.engine, "cells": len(cells),
                    "replications": spec.replications, **trace.to_meta(),
                    "scenario": {"name": spec.base.get("name"), "config": spec.base},  # the grid's base
                    "seed": spec.seed}  # fmt: skip
            folder = RunFolder.start(args.runs, spec, meta)
        _heal(folder, spec, "its cell runs again")
        try:
            _run_cells(folder, spec, executor, [c for c in cells if c.index not in folder.done_cells()], len(cells))
            print(render_report(folder, spec, args.metric, trace))
        except KeyboardInterrupt:
            print(f"\ninterrupted: {len(folder.done_cells())} of {len(cells)} cells saved; "
                  f"finish with: python -m hetsim sweep --resume {folder.path}", file=sys.stderr)  # fmt: skip
            return 130
    finally:
        executor.close()
        signal.signal(signal.SIGTERM, previous)
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _heal(folder: RunFolder, spec: SweepSpec, then: str) -> None:
    """Check the finished cells before using them: one note per damaged part, saying what was
    wrong and ``then``, what becomes of its cell."""
    from hetsim.sweep import replication_seeds

    for note in folder.heal(replication_seeds(spec)):
        print(f"hetsim: note: {note}: {then}", file=sys.stderr)


def _run_cells(folder: RunFolder, spec: SweepSpec, executor: LocalExecutor | DaskExecutor, todo: list[Cell],
               total: int) -> None:  # fmt: skip
    from hetsim.report import progress_printer
    from hetsim.sweep import Progress

    print(f"{folder.path}: {len(todo)} of {total} cells to run ({spec.replications} replications each) "
          f"on {executor.description}", file=sys.stderr)  # fmt: skip
    progress = Progress(len(todo))
    show = progress_printer(progress)
    for cell, rows in executor.run(spec, todo):
        folder.write_part(cell.index, rows)
        progress.advance()
        show()


def _resumed_or_new(args: argparse.Namespace) -> tuple[RunFolder | None, SweepSpec, TraceMode]:
    """The folder to resume (None for a new sweep), the sweep, with ``--engine`` applied, and
    what its plotted cell keeps (:func:`_trace_mode`)."""
    from hetsim.config import tomllib
    from hetsim.results import RunFolder
    from hetsim.sweepfile import default_sweep_text, load_sweep

    folder = None
    if args.resume is not None:
        if args.sweep is not None:
            raise ConfigError("--resume", "give either a sweep file or --resume, not both")
        folder = RunFolder.open(args.resume, "--resume")
        spec = folder.spec()
    else:
        spec = load_sweep(args.sweep if args.sweep is not None else tomllib.loads(default_sweep_text()))
    if args.engine is not None:
        spec = dataclasses.replace(spec, engine=args.engine)
    return folder, spec, _trace_mode(args, folder)


def _trace_mode(args: argparse.Namespace, folder: RunFolder | None) -> TraceMode:
    """``--trace`` and ``--sample-every`` (checked as ``simulate`` checks them) for a new sweep;
    for a resumed one, the mode its meta.json records, which options given must not contradict
    (unlike ``--engine``, the mode changes what the folder holds: traces.parquet and the plots)."""
    from hetsim.results import TraceMode

    if args.sample_every is not None:
        _sample_every(args.sample_every)
    if folder is None:
        return TraceMode(args.trace or "full", args.sample_every or DEFAULT_SAMPLE_EVERY)
    recorded = folder.trace_mode()
    if args.trace is not None and args.trace != recorded.mode:
        conflict = "--trace"
    elif recorded.mode == "sample" and args.sample_every not in (None, recorded.every):
        conflict = "--sample-every"
    else:
        return recorded
    started = f"{folder.path} was started with {recorded.describe()}"
    raise ConfigError(conflict, f"{started}: resume it without {conflict}, or with the same")


def _sample_every(value: int) -> int:
    """``--sample-every``, checked (simulate and sweep alike)."""
    return int(Param("--sample-every", "integer", low=1, high=MAX_COUNT).check(value))


def _check_sizes(scenario: Scenario, policies: Sequence[str], every: int) -> None:
    """Every policy's run size for what it keeps (:func:`check_kept_size`), before the first starts."""
    from hetsim.policies import policy_class
    from hetsim.simulate import check_kept_size

    for name in policies:
        check_kept_size(scenario, policy_class(name).synchronous, every)


def cmd_report(args: argparse.Namespace) -> int:
    from hetsim.report import render_report
    from hetsim.results import RunFolder
    from hetsim.sweep import expand

    folder = RunFolder.open(args.run_dir)
    spec = folder.spec()
    trace = folder.trace_mode()  # what the sweep kept: the report draws the same
    check_metric(args.metric, spec, expand(spec))
    _heal(folder, spec, f"its cell is left out until the sweep is resumed (--resume {folder.path})")
    print(render_report(folder, spec, args.metric, trace))
    return 0


def check_metric(metric: str, spec: SweepSpec, cells: Sequence[Cell]) -> None:
    """``time_to_target`` needs a target in every grid point's scenario (checked before any run)."""
    if metric != "time_to_target":
        return
    from hetsim.sweepfile import point_scenario

    for cell in cells:
        efficiency = point_scenario(spec, cell.point).workload.efficiency
        if efficiency is None or efficiency.target_steps is None:
            raise ConfigError(
                "--metric", "time_to_target needs [workload.efficiency] with target_steps in the sweep's scenario"
            )


COMMANDS = {
    "scenarios": cmd_scenarios,
    "show": cmd_show,
    "simulate": cmd_simulate,
    "sweep": cmd_sweep,
    "report": cmd_report,
    **ANALYSIS_COMMANDS,
    **COST_COMMANDS,
    **PLAN_COMMANDS,
    **TRACE_COMMANDS,
}
