"""``python -m hetsim``: the command line. It parses arguments and dispatches: simulating is
:mod:`hetsim.run.simulate`'s job, sweeps :mod:`hetsim.sweep.run`'s, report text, plots and output files
:mod:`hetsim.report.build`'s. It prints what the commands return (progress lines come from
:func:`hetsim.report.build.progress_printer`).

Bad input of any kind ends in one line on stderr (``hetsim: error: <field>: <problem>``) and
exit status 2, before anything is written.

Building the parser imports nothing heavy (tests/test_cli_startup.py checks): its choices and
defaults come from :mod:`hetsim.core.options`, and each command imports the modules it runs
(numpy, scipy, pandas, matplotlib, simpy come with them), so that ``--help`` or a mistyped
option answers at once. For the same reason ``--engine`` is checked as a command starts
(:func:`_check_engine`), not by argparse: the engine names are the registry's, known only once
the engines and plug-ins are imported.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hetsim import __version__
from hetsim.cli.analysis import COMMANDS as ANALYSIS_COMMANDS
from hetsim.cli.analysis import add_subcommands
from hetsim.cli.common import (
    add_efficiency_option,
    add_scenario_options,
    check_new_folder,
    check_sample_every_alone,
    check_seed,
    check_sizes,
    engine_option,
    sample_every,
    say_unfitted,
    scenario_of,
    scenario_policies,
)
from hetsim.cli.costs import COMMANDS as COST_COMMANDS
from hetsim.cli.costs import add_subcommands as add_cost_subcommands
from hetsim.cli.efficiency import COMMANDS as EFFICIENCY_COMMANDS
from hetsim.cli.efficiency import add_subcommands as add_efficiency_subcommands
from hetsim.cli.plan import COMMANDS as PLAN_COMMANDS
from hetsim.cli.plan import add_subcommands as add_plan_subcommands
from hetsim.cli.sweep import COMMANDS as SWEEP_COMMANDS
from hetsim.cli.sweep import add_subcommands as add_sweep_subcommands
from hetsim.cli.traces import COMMANDS as TRACE_COMMANDS
from hetsim.cli.traces import add_subcommands as add_trace_subcommands
from hetsim.core.console import OneLineParser, path_argument, run_main
from hetsim.core.errors import ConfigError
from hetsim.core.options import DEFAULT_SAMPLE_EVERY, TRACE_MODES

if TYPE_CHECKING:
    pass


def check_together(args: argparse.Namespace) -> None:
    """Options that mean something only beside another are refused alone (silently ignored, a
    typed option would look obeyed)."""
    check_sample_every_alone(args.sample_every, args.trace)
    if args.force and args.out is None:
        raise ConfigError("--force", "only with --out (it replaces the results in that folder)")


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
    add_efficiency_option(show)

    sim = sub.add_parser("simulate", help="simulate policies on one scenario and seed")
    add_scenario_options(sim, "print the summaries as a JSON list")
    sim.add_argument(
        "--out", type=path_argument, default=None, metavar="DIR", help="write trace.parquet, trace.csv and summary.json"
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
        default=None,
        metavar="K",
        help=f"with --trace sample: keep every K-th step ({DEFAULT_SAMPLE_EVERY})",
    )
    sim.add_argument(
        "--engine",
        default="auto",
        help="simpy (the reference), vector (the same traces, faster), auto (vector where it runs the "
        "policy; the default) or a plug-in's name",
    )
    add_sweep_subcommands(sub)
    add_subcommands(sub)
    add_cost_subcommands(sub)
    add_plan_subcommands(sub)
    add_trace_subcommands(sub)
    add_efficiency_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    def run() -> int:
        if argv is not None:  # called from Python: the outputs record this command, not the caller's sys.argv
            from hetsim.core.provenance import record_command

            record_command(["python", "-m", "hetsim", *argv])
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)

    return run_main("hetsim", run)


def cmd_scenarios(args: argparse.Namespace) -> int:
    from hetsim.core.builtins import builtin_description, builtin_names

    for name in builtin_names():
        print(f"{name:<14} {builtin_description(name)}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from hetsim.core.builtins import builtin_names, builtin_text

    as_given = not args.set and args.efficiency is None
    if args.scenario in builtin_names() and as_given and not Path(args.scenario).exists():
        print(builtin_text(args.scenario), end="")
        return 0
    import tomli_w

    scenario = scenario_of(args)
    say_unfitted(scenario.unfitted())
    print(tomli_w.dumps(scenario.to_dict()), end="")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from hetsim.core.files import check_out_folder, json_text
    from hetsim.core.options import TraceMode
    from hetsim.core.provenance import run_record
    from hetsim.engines import engine_for
    from hetsim.report.run_table import format_table, write_outputs
    from hetsim.run.metrics import summarize, with_speedups
    from hetsim.run.simulate import simulate, simulate_sampled

    engine = engine_option(args.engine)
    scenario = scenario_of(args)
    notes: list[str] = []
    policies = scenario_policies(args.policy, scenario, notes)
    check_seed(args.seed)
    check_together(args)
    every_k = DEFAULT_SAMPLE_EVERY if args.sample_every is None else args.sample_every
    every = TraceMode(args.trace, sample_every(every_k)).kept
    check_sizes(scenario, policies.values(), every)
    if args.out is not None:
        check_new_folder(args.out, args.force)
        check_out_folder(args.out)
    say_unfitted(scenario.unfitted())
    print(*notes, sep="\n", file=sys.stderr, end="\n" if notes else "")
    if args.trace != "full":  # summarised as the runs go, keeping no trace or each k-th step's rows
        runs = [simulate_sampled(scenario, p, every, seed=args.seed, engine=engine) for p in policies.values()]
        traces = [t for t, _ in runs if t is not None]
        summaries = with_speedups([s for _, s in runs])
    else:
        traces = [simulate(scenario, p, seed=args.seed, engine=engine) for p in policies.values()]
        summaries = with_speedups([summarize(t, scenario) for t in traces])
    if args.out is not None:
        seed = scenario.seed if args.seed is None else args.seed
        engines = {name: engine_for(engine, policy).name for name, policy in policies.items()}  # auto resolved
        record = {**run_record(scenario.name, scenario.to_dict(), seed), "engines": engines}
        write_outputs(args.out, traces, summaries, record)
    if args.json:
        print(json_text([s.to_dict() for s in summaries]))
    else:
        print(
            f"{scenario.name}: {scenario.n_workers} workers, global batch {scenario.workload.global_batch}, "
            f"{scenario.workload.epochs} epochs x {scenario.workload.steps_per_epoch} steps, "
            f"seed {scenario.seed if args.seed is None else args.seed}"
        )
        efficiency = scenario.workload.efficiency
        print(format_table(summaries, has_target=efficiency is not None and efficiency.target_steps is not None))
    return 0


COMMANDS = {
    "scenarios": cmd_scenarios,
    "show": cmd_show,
    "simulate": cmd_simulate,
    **SWEEP_COMMANDS,
    **ANALYSIS_COMMANDS,
    **COST_COMMANDS,
    **PLAN_COMMANDS,
    **TRACE_COMMANDS,
    **EFFICIENCY_COMMANDS,
}
