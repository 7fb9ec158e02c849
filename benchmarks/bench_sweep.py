"""Sweep throughput: cells per second with 1 and with 2 local processes, on one sweep.

    python benchmarks/bench_sweep.py [--json] [--cells N] [--rounds R]

The sweep is the embedded default cut to its first N grid points (every policy), so the cells
are the real workload of `make run`. One process runs cells in-process; two use the process
pool (its start-up counted). Each round runs both once, in an order rotated from round to round
(:func:`bench_common.time_rounds`; the first round's in-process run also pays the sweep's first
imports); the ratio is taken within a round, where both saw the same load. Prints the rates'
medians and the ratio's mean, median and 90th percentile over the rounds; --json every
rate's and ratio's mean, median and 90th percentile, and every round's figures.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bench_common import Parser, count, entry, stats, time_rounds

from hetsim.scenario.config import tomllib
from hetsim.sweep.run import expand, make_executor
from hetsim.sweep.spec import default_sweep_text, load_sweep


def run_cells(jobs: int, spec: Any, cells: list[Any]) -> int:
    """Run ``cells`` of ``spec`` on ``jobs`` processes; how many finished."""
    executor = make_executor(jobs, None)
    try:
        return sum(1 for _ in executor.run(spec, cells))
    finally:
        executor.close()


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cells", type=count, default=80)
    parser.add_argument("--rounds", type=count, default=5, help="rounds, each running both once (default 5)")
    args = parser.parse_args()
    spec = dataclasses.replace(load_sweep(tomllib.loads(default_sweep_text())), replications=2)
    cells = expand(spec)[: args.cells]  # built once, outside the timed runs; the sweep may hold fewer
    n = len(cells)
    methods = {str(j): (lambda j=j: run_cells(j, spec, cells)) for j in (1, 2)}
    seconds = time_rounds(methods, args.rounds, warmup=False, keep=False).seconds
    rates = {j: [n / t for t in seconds[j]] for j in methods}
    ratios = [two / one for one, two in zip(rates["1"], rates["2"])]
    result = {"cells": n, "rounds": args.rounds, "ratio": stats(ratios),
              "cells_per_s": {j: stats(r) for j, r in rates.items()}}  # fmt: skip
    if args.json:
        print(json.dumps({**result, "per_round": {"ratio": ratios, "cells_per_s": rates}}))
    else:
        one, two, ratio = result["cells_per_s"]["1"], result["cells_per_s"]["2"], result["ratio"]
        print(f"cells/s, median over {args.rounds} rounds: 1 process {one['median']:.1f}, 2 processes "
              f"{two['median']:.1f}; ratio mean / median / p90 {ratio['mean']:.2f} / {ratio['median']:.2f} / "
              f"{ratio['p90']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    entry(main, "bench_sweep")
