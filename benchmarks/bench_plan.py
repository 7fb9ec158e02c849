"""``hetsim plan``'s speed: the wall time of :func:`hetsim.plan.planner.plan` on mixed-gpus scaled to 64
and 1,024 workers (a third V100s, a third P100s, the rest K80s; the global batch and the dataset
scaled with the count, so each worker's share and the 97-step epoch stay the scenario's).

    python benchmarks/bench_plan.py [--runs N] [--workers 64,1024] [--objective throughput] [--policy a,b]

Each repetition runs in a fresh interpreter (so no cache of an earlier one helps) and times
``plan()`` alone: imports and loading the scenario are not counted. Prints one JSON object: per
size the wall seconds of each repetition, their mean, median and 90th percentile, the same of
the process's CPU seconds (plan runs on one core: on a busy machine the wall time is the CPU
time stretched by the others' share), the recommended policy, and the load average when the
runs began and ended.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_common import Parser, count, entry, stats

ROOT = Path(__file__).resolve().parent.parent
BASE_WORKERS, BASE_BATCH, BASE_DATASET = 6, 512, 50_000  # mixed-gpus as shipped


def overrides(workers: int) -> list[str]:
    """``--set`` overrides that scale mixed-gpus to ``workers`` workers."""
    third = workers // 3
    return [
        f"workers.0.count={third}",
        f"workers.1.count={third}",
        f"workers.2.count={workers - 2 * third}",
        f"workload.global_batch={BASE_BATCH * workers // BASE_WORKERS}",
        f"workload.dataset_size={BASE_DATASET * workers // BASE_WORKERS}",
    ]


def one(workers: int, objective: str, policies: list[str] | None) -> dict[str, object]:
    """One timed plan, in this interpreter."""
    from hetsim.plan.planner import plan
    from hetsim.scenario.config import load_scenario

    scenario = load_scenario("mixed-gpus", overrides(workers))
    chosen = None if policies is None else [scenario.named_policy(p) for p in policies]
    start, cpu = time.perf_counter(), time.process_time()
    result = plan(scenario, objective, policies=chosen)
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    return {"seconds": seconds, "cpu_s": cpu_s, "recommended": result.recommended.policy}


def repeat(workers: int, runs: int, objective: str, policies: str | None) -> list[dict[str, object]]:
    """``runs`` timed plans, each in a fresh interpreter."""
    out = []
    for _ in range(runs):
        argv = [sys.executable, __file__, "--one", str(workers), "--objective", objective]
        argv += [] if policies is None else ["--policy", policies]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
        out.append(json.loads(done.stdout))
    return out


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=count, default=5, help="repetitions per size (default 5, at least 3)")
    parser.add_argument("--workers", default="64,1024", help="comma-separated cluster sizes (default 64,1024)")
    parser.add_argument("--objective", default="throughput", help="plan's objective (default throughput)")
    parser.add_argument("--policy", default=None, help="comma-separated policies (default: every one that can run)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a repetition's child
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.objective, None if args.policy is None else args.policy.split(","))))
        return 0
    if args.runs < 3:
        parser.error("--runs must be at least 3")
    sizes = [int(w) for w in args.workers.split(",")]
    load_before = os.getloadavg()
    result: dict[str, object] = {"runs": args.runs, "objective": args.objective, "policies": args.policy or "all",
                                 "cpus": os.cpu_count()}  # fmt: skip
    for workers in sizes:
        runs = repeat(workers, args.runs, args.objective, args.policy)
        seconds = [float(str(r["seconds"])) for r in runs]
        cpu = [float(str(r["cpu_s"])) for r in runs]
        result[str(workers)] = {"seconds": stats(seconds), "cpu_seconds": stats(cpu), "each_s": seconds,
                                "recommended": runs[0]["recommended"]}  # fmt: skip
    result["load_average"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    entry(main, "bench_plan")
