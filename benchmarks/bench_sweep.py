"""Sweep throughput: cells per second with 1 and with 2 local processes, on one sweep.

    python benchmarks/bench_sweep.py [--json] [--cells N]

The sweep is the embedded default cut to its first N grid points (every policy), so the cells
are the real workload of `make run`. One process runs cells in-process; two use the process
pool. Prints {"cells_per_s": {"1": ..., "2": ...}, "ratio": ...} with --json.
"""

from __future__ import annotations

import dataclasses
import json
import time

from bench_common import Parser, count, entry

from hetsim.scenario.config import tomllib
from hetsim.sweep.run import expand, make_executor
from hetsim.sweep.spec import default_sweep_text, load_sweep


def measure(jobs: int, n_cells: int) -> float:
    spec = load_sweep(tomllib.loads(default_sweep_text()))
    spec = dataclasses.replace(spec, replications=2)
    cells = expand(spec)[:n_cells]
    executor = make_executor(jobs, None)
    start = time.perf_counter()
    finished = sum(1 for _ in executor.run(spec, cells))
    elapsed = time.perf_counter() - start
    executor.close()
    return finished / elapsed


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cells", type=count, default=80)
    args = parser.parse_args()
    rates = {str(j): measure(j, args.cells) for j in (1, 2)}
    result = {"cells_per_s": rates, "ratio": rates["2"] / rates["1"], "cells": args.cells}
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"1 process: {rates['1']:.2f} cells/s; 2 processes: {rates['2']:.2f} cells/s; ratio {result['ratio']:.2f}"
        )
    return 0


if __name__ == "__main__":
    entry(main, "bench_sweep")
