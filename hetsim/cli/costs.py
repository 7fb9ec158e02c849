"""Command-line wiring of the cost commands: ``profiles`` (the shipped device profiles) and
``costs`` (every worker's expected compute time at given local batch sizes, so a user can see
what a fitted, profiled or hand-written cost model says).

Adding the commands to a parser imports nothing heavy: the handlers import the scenario,
cost-model and report modules (numpy, scipy, pandas) when they run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from hetsim.cli.common import say_unfitted, scenario_of
from hetsim.core.errors import ConfigError
from hetsim.core.files import json_text
from hetsim.core.params import MAX_COUNT, Param


def add_subcommands(sub: Any) -> None:
    """Add ``profiles`` and ``costs`` to an argparse subparsers object."""
    prof = sub.add_parser("profiles", help="list the shipped device profiles (measured step time vs batch)")
    prof.add_argument("--json", action="store_true", help="print a JSON list of profiles")

    costs = sub.add_parser("costs", help="every worker's expected compute time at given local batch sizes")
    costs.add_argument("scenario", help="built-in name or file")
    costs.add_argument("--batch", required=True, metavar="B,B,...", help="local batch sizes, e.g. 16,32,64")
    costs.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    costs.add_argument("--json", action="store_true", help="print a JSON list of {worker, name, batch, compute_s, "
                       "extrapolated (below, beyond or null), beyond_max_batch}")  # fmt: skip


def cmd_profiles(args: argparse.Namespace) -> int:
    from hetsim.core.console import text_table
    from hetsim.model.costs import device_profiles

    profiles = [
        {"device": device, "workload": workload, "batch": batches.astype(int).tolist(), "step_s": times.tolist()}
        for (device, workload), (batches, times) in sorted(device_profiles().items())
    ]
    if args.json:
        print(json_text(profiles))
        return 0
    rows = [[p["device"], p["workload"], "  ".join(f"{b}: {1e3 * t:.1f}" for b, t in zip(p["batch"], p["step_s"]))]
            for p in profiles]  # fmt: skip
    print(
        text_table(["device", "workload", "batch: step ms (non-decreasing fit of the measurements)"], rows, {0, 1, 2})
    )
    print('use one as a worker\'s cost = { model = "profile", device = "...", workload = "..." }')
    return 0


def parse_batches(text: str) -> list[int]:
    """``16,32,64`` -> positive integers."""
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise ConfigError("--batch", "no batch size given")
    if not all(items):
        raise ConfigError("--batch", f"an empty size in {text!r}")
    out = []
    for item in items:
        try:
            value: Any = int(item)
        except ValueError:
            value = item
        out.append(int(Param("--batch", "integer", low=1, high=MAX_COUNT).check(value)))
    return out


def cmd_costs(args: argparse.Namespace) -> int:
    from hetsim.core.console import text_table

    scenario = scenario_of(args)
    batches = parse_batches(args.batch)
    say_unfitted(scenario.unfitted())
    rows = [
        {"worker": i, "name": w.name, "batch": b, "compute_s": w.expected_compute_s(b),
         "extrapolated": w.cost.extrapolated(b),
         "beyond_max_batch": w.max_batch is not None and b > w.max_batch}
        for i, w in enumerate(scenario.workers)
        for b in batches
    ]  # fmt: skip
    if args.json:
        print(json_text(rows))
        return 0
    k = len(batches)  # the rows run worker by worker, a batch each
    table = [[str(i), w.name, *map(_cell, rows[i * k : (i + 1) * k])] for i, w in enumerate(scenario.workers)]
    print(f"{scenario.name}: expected compute time (ms) of each worker at each local batch size")
    print(text_table(["worker", "name", *(f"b={b}" for b in batches)], table, {0, 1}))
    if any(r["extrapolated"] for r in rows):
        print("~ outside the batches the worker's cost curve was measured at: the curve's extrapolation")
    capped = sorted({f"{w.name} ({w.max_batch})" for w in scenario.workers
                     if w.max_batch is not None and max(batches) > w.max_batch})  # fmt: skip
    if capped:
        print(f"* beyond the worker's max_batch, which no policy gives it: {', '.join(capped)}")
    return 0


def _cell(row: dict[str, Any]) -> str:
    """A time in ms, marked ``~`` where extrapolated and ``*`` beyond the worker's max_batch."""
    return (
        f"{1e3 * row['compute_s']:.2f}"
        + ("~" if row["extrapolated"] else "")
        + ("*" if row["beyond_max_batch"] else "")
    )


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"profiles": cmd_profiles, "costs": cmd_costs}
