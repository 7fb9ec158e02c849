"""``python -m hetsim sweep`` and ``report``: a parameter sweep into a results folder (new, or
resumed), and a results folder's tables and plots drawn again. The sweeping is
:mod:`hetsim.sweep.run`'s job, the folder :mod:`hetsim.sweep.results`', the text and plots
:mod:`hetsim.report.build`'s; as everywhere on the command line, each command imports what it runs."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsim.cli.common import check_sample_every_alone, check_sizes, engine_option, sample_every, say_unfitted
from hetsim.core.console import path_argument, sigterm_as_interrupt, stop_status
from hetsim.core.errors import ConfigError
from hetsim.core.options import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_SAMPLE_EVERY,
    MAX_JOBS,
    SPEEDUP_METRICS,
    TRACE_MODES,
)

if TYPE_CHECKING:
    from hetsim.core.options import TraceMode
    from hetsim.sweep.results import RunFolder
    from hetsim.sweep.run import Cell, DaskExecutor, LocalExecutor
    from hetsim.sweep.spec import SweepSpec


def add_subcommands(sub: Any) -> None:
    """Add ``sweep`` and ``report`` to an argparse subparsers object."""
    _add_sweep(
        sub.add_parser("sweep", help="run a parameter sweep into a new results folder (default: the embedded sweep)")
    )
    rep = sub.add_parser("report", help="re-render a results folder's tables and plots; print its summary")
    rep.add_argument("run_dir", type=path_argument)
    add_metric_option(rep)


def add_metric_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metric",
        choices=tuple(SPEEDUP_METRICS),
        default="throughput",
        help="what the speedup table and plots rank by: throughput (default) or time_to_target "
        "(needs [workload.efficiency] with target_steps)",
    )


def usable_cores(cap: int = MAX_JOBS) -> int:
    """The cores this process may run on (its affinity: a container's or a batch job's share, not
    the host's), at most ``cap`` (the sweep's largest --jobs)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        cores = os.cpu_count() or 1
    return max(1, min(cores, cap))


def _add_sweep(sw: argparse.ArgumentParser) -> None:
    sw.add_argument("sweep", nargs="?", default=None, help="sweep file (TOML or JSON); default: the embedded sweep")
    sw.add_argument("--show-default", action="store_true", help="print the embedded default sweep file and exit")
    sw.add_argument(
        "--jobs",
        type=int,
        default=usable_cores(),
        help="local processes or LocalCluster workers (default: the cores this process may use, at most 256)",
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
        default=None,
        metavar="SECONDS",
        help=f"how long to try reaching --scheduler (default: {DEFAULT_CONNECT_TIMEOUT_S:g})",
    )
    sw.add_argument(
        "--resume",
        type=path_argument,
        default=None,
        metavar="RUN_DIR",
        help="finish the missing cells of an interrupted sweep",
    )
    sw.add_argument(
        "--runs",
        type=path_argument,
        default=None,
        metavar="DIR",
        help="where results folders are made (default: runs; not with --resume, whose folder is given)",
    )
    add_metric_option(sw)
    _add_run_options(sw)


def _add_run_options(sw: argparse.ArgumentParser) -> None:
    """How each cell is run and what the plotted cell keeps."""
    sw.add_argument(
        "--engine",
        default=None,
        help="simpy, vector, auto or a plug-in's name (default: the sweep file's engine key, else auto; the "
        "traces are the same, a utilization summed in another order may differ in its last bit)",
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


def cmd_sweep(args: argparse.Namespace) -> int:
    from hetsim.policies import policy_class
    from hetsim.report.build import plotted_point, render_report
    from hetsim.sweep.results import RunFolder
    from hetsim.sweep.run import expand, make_executor
    from hetsim.sweep.spec import default_sweep_text, point_scenario

    engine_option(args.engine)  # checked first; the sweep's engine is a name, resolved as it runs
    if args.show_default:
        if args.sweep is not None or args.resume is not None:
            raise ConfigError("--show-default", "prints the embedded sweep and runs nothing: give no sweep to run")
        print(default_sweep_text(), end="")
        return 0
    folder, spec, trace = _resumed_or_new(args)
    cells = expand(spec)
    check_metric(args.metric, spec, cells)
    plotted = point_scenario(spec, plotted_point(spec))
    check_sizes(plotted, map(policy_class, spec.policies), trace.kept)  # the plotted cell's traces
    say_unfitted(spec.unfitted)
    if args.connect_timeout_s is not None and args.scheduler is None:
        raise ConfigError("--connect-timeout-s", "only with --scheduler (how long to try reaching it)")
    timeout_s = DEFAULT_CONNECT_TIMEOUT_S if args.connect_timeout_s is None else args.connect_timeout_s
    resumed = folder is not None
    # SIGTERM ends the sweep as Ctrl-C does, from the executor's start on (a cluster's start too)
    with sigterm_as_interrupt(), closing(make_executor(args.jobs, args.scheduler, timeout_s)) as executor:
        if folder is None:
            meta = {"executor": executor.description, "engine": spec.engine, "cells": len(cells),
                    "replications": spec.replications, **trace.to_meta(),
                    "scenario": {"name": spec.base.get("name"), "config": spec.base},  # the grid's base
                    "seed": spec.seed}  # fmt: skip
            folder = RunFolder.start(args.runs or Path("runs"), spec, meta)
        _heal(folder, spec, cells, "its cell runs again")  # it may refuse the folder: then no resume to record
        if resumed and (note := folder.record_resume({"executor": executor.description, "engine": spec.engine})):
            print(f"hetsim: note: {note}", file=sys.stderr)
        try:
            _run_cells(folder, spec, executor, [c for c in cells if c.index not in folder.done_cells()], len(cells))
            print(render_report(folder, spec, args.metric, trace))
        except KeyboardInterrupt as stopped:
            print(f"\ninterrupted: {len(folder.done_cells())} of {len(cells)} cells saved; "
                  f"finish with: python -m hetsim sweep --resume {folder.path}", file=sys.stderr)  # fmt: skip
            return stop_status(stopped)
    return 0


def _heal(folder: RunFolder, spec: SweepSpec, cells: Sequence[Cell], then: str) -> None:
    """Check the finished cells (``cells``: the sweep's, expanded) before using them: one note
    per damaged part, saying what was wrong and ``then``, what becomes of its cell."""
    from hetsim.sweep.run import cell_labels, replication_seeds

    labels = [{**cell_labels(spec, cell), "policy": cell.policy} for cell in cells]
    for note in folder.heal(replication_seeds(spec), labels):
        print(f"hetsim: note: {note}: {then}", file=sys.stderr)


def _run_cells(folder: RunFolder, spec: SweepSpec, executor: LocalExecutor | DaskExecutor, todo: list[Cell],
               total: int) -> None:  # fmt: skip
    from hetsim.report.build import progress_printer
    from hetsim.sweep.run import Progress

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
    from hetsim.scenario.config import tomllib
    from hetsim.sweep.results import RunFolder
    from hetsim.sweep.spec import default_sweep_text, load_sweep

    folder = None
    if args.resume is not None:
        if args.sweep is not None:
            raise ConfigError("--resume", "give either a sweep file or --resume, not both")
        if args.runs is not None:
            raise ConfigError("--runs", f"not with --resume: the sweep goes on in {args.resume}")
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
    from hetsim.core.options import TraceMode

    if args.sample_every is not None:
        sample_every(args.sample_every)
        if folder is None:
            check_sample_every_alone(args.sample_every, args.trace)
    if folder is None:
        return TraceMode(args.trace or "full", args.sample_every or DEFAULT_SAMPLE_EVERY)
    recorded = folder.trace_mode()
    if args.trace is not None and args.trace != recorded.mode:
        conflict = "--trace"
    elif args.sample_every not in (None, recorded.every if recorded.mode == "sample" else None):
        conflict = "--sample-every"
    else:
        return recorded
    started = f"{folder.path} was started with {recorded.describe()}"
    raise ConfigError(conflict, f"{started}: resume it without {conflict}, or with the same")


def cmd_report(args: argparse.Namespace) -> int:
    from hetsim.report.build import render_report
    from hetsim.sweep.results import RunFolder
    from hetsim.sweep.run import expand

    folder = RunFolder.open(args.run_dir)
    spec = folder.spec()
    trace = folder.trace_mode()  # what the sweep kept: the report draws the same
    cells = expand(spec)
    check_metric(args.metric, spec, cells)
    _heal(folder, spec, cells, f"its cell is left out until the sweep is resumed (--resume {folder.path})")
    print(render_report(folder, spec, args.metric, trace))
    return 0


def check_metric(metric: str, spec: SweepSpec, cells: Sequence[Cell]) -> None:
    """``time_to_target`` needs a target in every grid point's scenario (checked before any run)."""
    if metric != "time_to_target":
        return
    from hetsim.sweep.spec import point_scenario

    for cell in cells:
        efficiency = point_scenario(spec, cell.point).workload.efficiency
        if efficiency is None or efficiency.target_steps is None:
            raise ConfigError(
                "--metric", "time_to_target needs [workload.efficiency] with target_steps in the sweep's scenario"
            )


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"sweep": cmd_sweep, "report": cmd_report}
