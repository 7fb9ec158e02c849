"""The targets of the issue "Scale", as ratios measured side by side in one run, repeated.

    cd benchmarks && python bench_scale.py [--rounds 3] [--memory-steps 100000]

Every round measures, in turn, on the scenario of ``bench_engines.py`` (a quarter of the workers
2x slower, lognormal noise, an exponential delay, 100 steps per epoch), vector engine unless
named:

* ``adaptive`` against ``dynamic``, worker-steps per second, at 1024 and 10,000 workers (1000 steps):
  the median ratio of 5 (at 10,000 workers 3) pairs of runs, a pair being one run of each back
  to back after a warm-up run of each (the best of the runs that fit in a second, as below,
  would favour ``dynamic``, which fits three times as many);
* ``async`` on the vector engine against the SimPy engine at 256 workers (200 steps), their
  traces checked identical;
* ``dynamic`` at 100,000 workers (100 steps) against ``dynamic`` at 1024 workers (1000 steps);
* the peak resident memory of a 10,000-worker x ``--memory-steps`` ``dynamic`` run summarised as
  it goes (``--trace none``), in a fresh process (``trace_none_memory.py``).

Any other rate is the best of the runs that fit in a second (a large run: one run), after one
warm-up run: the scenario expands its worker specs once, and the first run of a size pays the
operating system for mapping its trace's memory (at 10,000 workers x 1000 steps, 700 MB: the
first run took 5x the next), which is not the engine's speed. Prints one JSON
object: each round's figures, and for each target its value per round, their mean, median and
90th percentile, the target and whether the median meets it. The machine may be shared: read
the ratios, which are measured within one round.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from bench_common import stats
from bench_engines import MIN_TIME_S, same_trace, scenario, timed

from hetsim.engines import run_simpy, run_vector
from hetsim.model.trace import Trace
from hetsim.policies import make_policy

HERE = Path(__file__).resolve().parent
PAIRS = {1024: 5, 10000: 3}  # workers: dynamic-adaptive pairs a round runs
TARGETS = {  # name: (target, whether higher is better)
    "adaptive / dynamic at 1024 workers": (1 / 3, True),
    "adaptive / dynamic at 10000 workers": (1 / 3, True),
    "async vector / SimPy at 256 workers": (30.0, True),
    "dynamic at 100000 / at 1024 workers": (0.5, True),
    "peak MB, 10000 workers --trace none": (2048.0, False),
}


def rate(n: int, steps: int, policy: str, run: Callable[..., Trace] = run_vector) -> tuple[float, Trace]:
    """Worker-steps per second of ``policy`` at ``n`` workers, and its trace."""
    s = scenario(n, steps, policy)
    run(s, make_policy(policy))  # a warm-up: the worker specs expanded, the trace's memory mapped once
    seconds, trace = timed(lambda: run(s, make_policy(policy)), MIN_TIME_S)
    assert isinstance(trace, Trace)
    return n * s.workload.total_steps / seconds, trace


def peak_memory_mb(workers: int, steps: int) -> dict[str, float]:
    """Peak memory and speed of a ``--trace none`` run, measured by a fresh process."""
    command = [sys.executable, str(HERE / "trace_none_memory.py"), "--workers", str(workers), "--steps", str(steps)]
    out = json.loads(subprocess.run(command, check=True, capture_output=True, text=True, cwd=HERE).stdout)
    return {
        "peak_rss_mb": out["peak_rss_mb"],
        "seconds": out["seconds"],
        "worker_steps_per_s": out["worker_steps_per_s"],
    }


def paired(n: int, steps: int, policies: Sequence[str], pairs: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each policy's rate at ``n`` workers (worker-steps per second, from its median time), and
    each later policy's rate over the first's in each of ``pairs`` turns: a turn runs every
    policy once, back to back, after a warm-up run of each, so that all see the same machine
    the same number of times."""
    runs = {p: scenario(n, steps, p) for p in policies}
    seconds: dict[str, list[float]] = {p: [] for p in policies}
    for p in policies:
        run_vector(runs[p], make_policy(p))
    for _ in range(pairs):
        for p in policies:
            t0 = time.perf_counter()
            run_vector(runs[p], make_policy(p))
            seconds[p].append(time.perf_counter() - t0)
    first = np.array(seconds[policies[0]])
    rates = {p: n * steps / float(np.median(seconds[p])) for p in policies}
    return rates, {p: (first / np.array(seconds[p])).tolist() for p in policies[1:]}


def one_round(memory_steps: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for n, pairs in PAIRS.items():
        rates, ratios = paired(n, 1000, ("dynamic", "adaptive"), pairs)
        figures[f"dynamic at {n}, M/s"], figures[f"adaptive at {n}, M/s"] = (
            rates["dynamic"] / 1e6,
            rates["adaptive"] / 1e6,
        )
        figures[f"adaptive / dynamic at {n} workers"] = float(np.median(ratios["adaptive"]))
    simpy, simpy_trace = rate(256, 200, "async", run_simpy)
    vector, vector_trace = rate(256, 200, "async")
    if not same_trace(simpy_trace, vector_trace):
        raise SystemExit("async: the engines' traces differ")
    figures["async SimPy at 256, M/s"], figures["async vector at 256, M/s"] = simpy / 1e6, vector / 1e6
    figures["async vector / SimPy at 256 workers"] = vector / simpy
    small, _ = rate(1024, 1000, "dynamic")
    large, _ = rate(100_000, 100, "dynamic")
    figures["dynamic at 100000, M/s"] = large / 1e6
    figures["dynamic at 100000 / at 1024 workers"] = large / small
    memory = peak_memory_mb(10_000, memory_steps)
    figures["peak MB, 10000 workers --trace none"] = memory["peak_rss_mb"]
    figures["--trace none run, s"] = memory["seconds"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-steps", type=int, default=100_000, help="steps of the --trace none run")
    args = parser.parse_args()
    rounds = [one_round(args.memory_steps) for _ in range(args.rounds)]
    summary = {}
    for name, (target, higher) in TARGETS.items():
        values = [r[name] for r in rounds]
        figures = stats(values)
        met = figures["median"] >= target if higher else figures["median"] < target
        summary[name] = {"rounds": values, **figures, "target": target, "met": met}
    print(json.dumps({"command": " ".join(sys.argv), "rounds": rounds, "targets": summary}, indent=2))


if __name__ == "__main__":
    main()
