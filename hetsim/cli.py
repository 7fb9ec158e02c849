"""``python -m hetsim``: the command line. The only module that prints.

Bad input of any kind ends in one line on stderr (``hetsim: error: <field>: <problem>``) and
exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from hetsim import __version__
from hetsim.config import Scenario, builtin_names, builtin_text, load_scenario
from hetsim.errors import ConfigError
from hetsim.metrics import Summary, summarize, with_speedups
from hetsim.policies import POLICIES, policy_class
from hetsim.simulate import simulate
from hetsim.trace import Trace, atomic_write

DEFAULT_SCENARIO = "workstation"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError("", f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hetsim", description="Simulate synchronous data-parallel SGD on heterogeneous clusters.")
    parser.add_argument("--version", action="version", version=f"hetsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("scenarios", help="list the built-in scenarios")

    show = sub.add_parser("show", help="print a scenario as TOML (to copy and edit)")
    show.add_argument("scenario", help="built-in name or file")
    show.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")

    sim = sub.add_parser("simulate", help="simulate policies on one scenario and seed")
    sim.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO, help=f"built-in name or file (default: {DEFAULT_SCENARIO})")
    sim.add_argument("--policy", default=",".join(POLICIES), help="comma-separated policies (default: all)")
    sim.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field, e.g. workers.1.per_sample_s=0.004")
    sim.add_argument("--seed", type=int, default=None, help="random seed (default: the scenario's)")
    sim.add_argument("--json", action="store_true", help="print the summaries as a JSON list")
    sim.add_argument("--out", type=Path, default=None, metavar="DIR", help="write trace.parquet, trace.csv and summary.json")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"hetsim: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    for name in builtin_names():
        print(f"{name:<14} {load_scenario(name).description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.scenario in builtin_names() and not args.set and not Path(args.scenario).exists():
        print(builtin_text(args.scenario), end="")
        return 0
    import tomli_w

    print(tomli_w.dumps(load_scenario(args.scenario, args.set).to_dict()), end="")
    return 0


def parse_policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise ConfigError("--policy", "no policy given")
    for name in names:
        policy_class(name, "--policy")
    return names


def cmd_simulate(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.set)
    policies = parse_policies(args.policy)
    if args.seed is not None and args.seed < 0:
        raise ConfigError("--seed", f"must be >= 0, got {args.seed}")
    traces = [simulate(scenario, name, seed=args.seed) for name in policies]
    summaries = with_speedups([summarize(t) for t in traces])
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
    header = ("policy", "mean step", "total time", "throughput", "utilization", "vs equal", "final split")
    rows = [
        (
            s.policy,
            f"{s.mean_step_s * 1e3:.1f} ms",
            f"{s.total_time_s:.1f} s",
            f"{s.throughput_sps:.0f} /s",
            f"{s.mean_utilization:.1%}",
            "-" if s.speedup_vs_equal is None else f"{s.speedup_vs_equal:.3f}x",
            "/".join(map(str, s.final_batches)),
        )
        for s in summaries
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if i in (0, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *map(line, rows)])


COMMANDS = {"scenarios": cmd_scenarios, "show": cmd_show, "simulate": cmd_simulate}
