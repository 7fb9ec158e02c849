"""Command-line start-up: the wall time of ``python -m hetsim --help``, ``scenarios`` and
``show paper`` (and of ``python -m validation --help``) against ``python -c "import numpy"``,
each a fresh subprocess.

    python benchmarks/bench_startup.py [--runs N] [--warmup W] [--busy]

Each of the N rounds runs every command once, back to back (the order rotated from round to
round, so none always goes first), and divides each command's time by numpy's of the same round:
a ratio measured within one round, under the same load, never one command's best run against
the other's. W rounds before them (default 1) are not counted: they fill the file caches.
Prints one JSON object: per command the seconds and per ratio the mean, median and 90th
percentile over the N rounds. ``--busy`` keeps one other process spinning on a core for the
whole measurement (the project's "beside one busy process" condition), and stops it after.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench_common import Parser, count, entry, stats

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "numpy"
COMMANDS = {
    BASELINE: [sys.executable, "-c", "import numpy"],
    "hetsim": [sys.executable, "-m", "hetsim", "--help"],
    "hetsim scenarios": [sys.executable, "-m", "hetsim", "scenarios"],
    "hetsim show paper": [sys.executable, "-m", "hetsim", "show", "paper"],
    "validation": [sys.executable, "-m", "validation", "--help"],
}


def wall_s(argv: Sequence[str]) -> float:
    """Seconds from start to exit of ``argv`` (its output discarded; it must succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def rounds(n: int) -> list[dict[str, float]]:
    """``n`` rounds, each every command's seconds, the order rotated by one each round."""
    names = list(COMMANDS)
    out = []
    for i in range(n):
        order = names[i % len(names) :] + names[: i % len(names)]
        out.append({name: wall_s(COMMANDS[name]) for name in order})
    return out


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=count, default=10, help="rounds measured (default 10)")
    parser.add_argument("--warmup", type=count, default=1, help="rounds run first and not counted (default 1)")
    parser.add_argument("--busy", action="store_true", help="measure beside one process that keeps a core busy")
    args = parser.parse_args()
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        rounds(args.warmup)
        measured = rounds(args.runs)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    result = {
        "runs": args.runs,
        "busy": args.busy,
        "python": sys.version.split()[0],
        "commands": {name: shlex.join(["python", *argv[1:]]) for name, argv in COMMANDS.items()},
        "seconds": {name: stats([r[name] for r in measured]) for name in COMMANDS},
        "ratio": {
            f"{name}/{BASELINE}": stats([r[name] / r[BASELINE] for r in measured])
            for name in COMMANDS
            if name != BASELINE
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    entry(main, "bench_startup")
