"""The test suite's own wall time: ``make test-fast`` (or another make target) run N times, beside
one process that keeps a core busy (the project's "beside one busy process" condition).

    python benchmarks/bench_test_suite.py [--runs N] [--target test-fast] [--no-busy]

Each run is a fresh ``make TARGET`` (the environment already installed, so install time is not
counted; the target's bytecode caches warm after the first run, which is not counted). Prints one
JSON object: the seconds of every run, their mean, median and 90th percentile, the load average
before and after, and whether every run passed. A failed run is reported, not retried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_common import Parser, count, entry, stats

ROOT = Path(__file__).resolve().parent.parent


def one_run_s(target: str) -> tuple[float, int]:
    """Seconds ``make TARGET`` took from start to exit, and its exit status."""
    start = time.perf_counter()
    done = subprocess.run(["make", target], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, done.returncode


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=count, default=5, help="runs measured (default 5)")
    parser.add_argument("--target", default="test-fast", help="make target (default test-fast)")
    parser.add_argument("--no-busy", action="store_true", help="measure without the busy neighbour")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    load_before = os.getloadavg()[0]
    one_run_s(args.target)  # warm-up: fills bytecode and file caches; not counted
    busy = None if args.no_busy else subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        runs = [one_run_s(args.target) for _ in range(args.runs)]
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    seconds = [s for s, _ in runs]
    result = {
        "command": f"make {args.target}",
        "runs": args.runs,
        "busy": not args.no_busy,
        "cores": os.cpu_count(),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "all_passed": all(rc == 0 for _, rc in runs),
        "seconds_each": [round(s, 1) for s in seconds],
        "seconds": stats(seconds),
    }
    print(json.dumps(result, indent=2))
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    entry(main, "bench_test_suite")
