"""Validation's failure handling, measured: a hung rank and a killed launcher.

    python benchmarks/bench_failures.py [--trials 5] [--json]

* hung rank: a two-rank run (collective timeout 900 s), rank 1 stopped with SIGSTOP once
  training has begun; measured: seconds from the stop to the launcher's exit, and whether its
  message names rank 1 as the rank that failed first.
* killed launcher: the launcher SIGKILLed once training has begun; measured: rank processes
  still alive 5 s later.

Prints per-trial values and mean, median and 90th percentile, or one JSON object.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import Parser, count, entry, stats

from validation.launch import child_pids

ROOT = Path(__file__).resolve().parent.parent


def start_run(out: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "validation", "run", "--epochs", "50", "--policies", "equal",
               "--probe-repeats", "1", "--out", str(out), "--timeout-s", "900"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT, env=env,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "trace.csv").exists():
        time.sleep(0.05)
    return proc


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def hung_rank_trial(folder: Path) -> dict[str, float | bool]:
    proc = start_run(folder / "run")
    ranks = child_pids(proc.pid)
    os.kill(ranks[1], signal.SIGSTOP)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=120)
    return {"seconds": time.monotonic() - stopped, "named_rank_1": "rank 1 failed first (stopped responding" in err}


def killed_launcher_trial(folder: Path) -> dict[str, float | bool]:
    proc = start_run(folder / "run")
    ranks = child_pids(proc.pid)
    proc.kill()
    proc.wait()
    time.sleep(5.0)
    left = [r for r in ranks if alive(r)]
    for r in left:
        os.kill(r, signal.SIGKILL)
    return {"ranks_alive_after_5s": float(len(left))}


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=count, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    hung, killed = [], []
    for _ in range(args.trials):
        with tempfile.TemporaryDirectory() as tmp:
            hung.append(hung_rank_trial(Path(tmp)))
        with tempfile.TemporaryDirectory() as tmp:
            killed.append(killed_launcher_trial(Path(tmp)))
    result: dict[str, dict[str, Any]] = {
        "hung_rank": {"trials": hung, "seconds": stats([float(t["seconds"]) for t in hung]),
                      "named_correctly": sum(bool(t["named_rank_1"]) for t in hung)},
        "killed_launcher": {"trials": killed,
                            "runs_with_ranks_left": sum(t["ranks_alive_after_5s"] > 0 for t in killed)},
    }  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        h = result["hung_rank"]
        print(f"hung rank: failed after {h['seconds']['median']:.1f} s median ({h['seconds']['p90']:.1f} s p90), "
              f"named in {h['named_correctly']}/{args.trials}")  # fmt: skip
        print(f"killed launcher: ranks left 5 s later in {result['killed_launcher']['runs_with_ranks_left']}/"
              f"{args.trials} runs")  # fmt: skip
    return 0


if __name__ == "__main__":
    entry(main, "bench_failures")
