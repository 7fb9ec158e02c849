"""Engine throughput: worker-steps per second of four ways to do the same work, in one process.

    python benchmarks/bench_engines.py [--json] [--workers 8,64,256,1024] [--steps 1000] [--rounds 2]

For each cluster size the same scenario (a quarter of the workers 2x slower, lognormal noise,
an exponential injected delay, the paper's ``dynamic`` policy, 100 steps per epoch) is run by

* ``simpy``: the SimPy engine (the reference);
* ``vector``: the vector engine (the benchmark checks that it gives the SimPy engine's trace);
* ``bare_simpy``: a bare SimPy barrier loop with the same events per step (a shared release
  event, one timeout and one done event per worker, the barrier condition, the all-reduce
  timeout) and no hetsim code: its durations are drawn beforehand, outside the timing;
* ``numpy_draws``: raw NumPy drawing of the run's random times (one noise and one delay per
  worker-step) with one Generator, one call per distribution: the cost of the randomness itself.

For reference it also reports ``numpy_streams`` (not one of the four): the model's own draws of
the run (:class:`hetsim.model.draws.StepDraws`: counter-based tiles, every law by inversion), the
floor of any engine that reproduces the model's random numbers.

Each rate is worker-steps per second, whole runs (an engine's setup included), the best over
``--rounds`` rounds that measure the four in turn (the machine may be shared: ratios within one
run are what to read). Prints the rates and the target ratios; ``--json`` prints
``{"workers": {"8": {"simpy": ..., "vector": ..., "bare_simpy": ..., "numpy_draws": ...}, ...},
"ratios": {...}, "targets_met": ..., ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import numpy as np
import simpy
from simpy.events import Condition

from hetsim.engines import run_simpy, run_vector
from hetsim.model.draws import StepDraws
from hetsim.model.trace import Trace
from hetsim.policies import make_policy
from hetsim.scenario.config import build_scenario
from hetsim.scenario.scenario import Scenario

STEPS_PER_EPOCH = 100
SIGMA, DELAY_MEAN_S = 0.05, 0.002
MIN_TIME_S = 1.0  # within a round a method repeats until it has run this long (at least once)


def scenario(n_workers: int, steps: int, policy: str) -> Scenario:
    slow = n_workers // 4
    common = {"noise": {"dist": "lognormal", "sigma": SIGMA}, "delay": {"dist": "exponential", "mean": DELAY_MEAN_S}}
    workers = [{"name": "fast", "count": n_workers - slow, "overhead_s": 0.01, "per_sample_s": 0.001, **common}]
    if slow:
        workers.append({"name": "slow", "count": slow, "overhead_s": 0.02, "per_sample_s": 0.002, **common})
    per_epoch = min(steps, STEPS_PER_EPOCH)
    global_batch = 32 * n_workers
    return build_scenario(
        {
            "name": f"bench-{n_workers}",
            "seed": 0,
            "workload": {
                "global_batch": global_batch,
                "dataset_size": global_batch * per_epoch,
                "epochs": max(1, steps // per_epoch),
                "gradient_mb": 25.0,
            },
            "network": {"kind": "ring", "latency_s": 2e-5, "bandwidth_gbps": 100},
            "workers": workers,
            "policy": {"name": policy},
        }
    )


def bare_simpy(n: int, durations: list[list[float]], comm_s: float) -> None:
    """The SimPy engine's event pattern with nothing else: release, hold, report, barrier, hold."""
    env = simpy.Environment()
    go = [env.event()]

    def worker(i: int):
        while True:
            row, done = yield go[0]
            yield env.timeout(durations[row][i])
            done[i].succeed()

    for i in range(n):
        env.process(worker(i))

    def coordinator():
        for row in range(len(durations)):
            done = [env.event() for _ in range(n)]
            release, go[0] = go[0], env.event()
            release.succeed((row, done))
            yield Condition(env, lambda events, count: count >= n, done)
            yield env.timeout(comm_s)

    env.run(env.process(coordinator()))


def numpy_draws(worker_steps: int) -> None:
    rng = np.random.default_rng(0)
    rng.lognormal(-0.5 * SIGMA**2, SIGMA, worker_steps)
    rng.exponential(DELAY_MEAN_S, worker_steps)


def numpy_streams(s: Scenario) -> None:
    StepDraws(s.seed, s.workers).take(0, s.workload.total_steps)


def timed(fn: Callable[[], object], min_time_s: float) -> tuple[float, object]:
    """Best seconds per call of ``fn``, repeating until ``min_time_s`` has passed; and its last result."""
    best, spent, result = float("inf"), 0.0, None
    while spent < min_time_s or best == float("inf"):
        t0 = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - t0
        best, spent = min(best, elapsed), spent + elapsed
    return best, result


def same_trace(a: Trace, b: Trace) -> bool:
    floats = ("start_s", "compute_s", "wait_s", "comm_s", "slowdown")
    exact = ("epoch", "step", "worker", "local_batch", "included", "up")
    return all(np.array_equal(getattr(a, c), getattr(b, c)) for c in exact) and all(
        np.max(np.abs(getattr(a, c) - getattr(b, c)), initial=0.0) <= 1e-9 for c in floats
    )


def measure(n: int, steps: int, policy: str, rounds: int) -> dict[str, float]:
    s = scenario(n, steps, policy)
    worker_steps = n * s.workload.total_steps
    durations = np.random.default_rng(1).exponential(0.05, (s.workload.total_steps, n)).tolist()
    methods: dict[str, Callable[[], object]] = {
        "simpy": lambda: run_simpy(s, make_policy(policy)),
        "vector": lambda: run_vector(s, make_policy(policy)),
        "bare_simpy": lambda: bare_simpy(n, durations, s.allreduce_s()),
        "numpy_draws": lambda: numpy_draws(worker_steps),
        "numpy_streams": lambda: numpy_streams(s),
    }
    best = dict.fromkeys(methods, float("inf"))
    traces = {}
    for _ in range(rounds):
        for name, fn in methods.items():
            seconds, result = timed(fn, MIN_TIME_S)
            best[name] = min(best[name], seconds)
            traces[name] = result
    simpy_trace, vector_trace = traces["simpy"], traces["vector"]
    if not (
        isinstance(simpy_trace, Trace) and isinstance(vector_trace, Trace) and same_trace(simpy_trace, vector_trace)
    ):
        raise SystemExit(f"the engines disagree at {n} workers")
    return {name: worker_steps / seconds for name, seconds in best.items()}


def ratios(rates: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        n: {
            "vector/simpy": r["vector"] / r["simpy"],
            "simpy/bare_simpy": r["simpy"] / r["bare_simpy"],
            "vector/numpy_draws": r["vector"] / r["numpy_draws"],
            "vector/numpy_streams": r["vector"] / r["numpy_streams"],
        }
        for n, r in rates.items()
    }


def targets(rates: dict[str, dict[str, float]]) -> dict[str, bool]:
    """The issue's targets, where this run measured the sizes they name."""
    q = ratios(rates)
    out = {}
    if "256" in q:
        out["vector >= 50x simpy at 256"] = q["256"]["vector/simpy"] >= 50
    out["simpy >= 0.5x bare_simpy"] = all(r["simpy/bare_simpy"] >= 0.5 for r in q.values())
    for n in ("256", "1024"):
        if n in q:
            out[f"vector >= 0.25x numpy_draws at {n}"] = q[n]["vector/numpy_draws"] >= 0.25
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", default="8,64,256,1024", help="comma-separated cluster sizes")
    parser.add_argument("--steps", type=int, default=1000, help="steps per run (default: 1000, a default-sweep cell)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four measurements; the best counts")
    parser.add_argument("--policy", default="dynamic", help="a barrier policy (default: dynamic)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.workers.split(",")]
    rates = {str(n): measure(n, args.steps, args.policy, args.rounds) for n in sizes}
    result = {
        "workers": rates,
        "ratios": ratios(rates),
        "targets_met": targets(rates),
        "steps": args.steps,
        "policy": args.policy,
        "rounds": args.rounds,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"worker-steps/s ({args.steps} steps, policy {args.policy}, best of {args.rounds} rounds)")
    print(
        f"{'workers':>8} {'simpy':>10} {'vector':>10} {'bare_simpy':>10} {'numpy_draws':>11} {'np_streams':>10}"
        f" {'vec/simpy':>9} {'simpy/bare':>10} {'vec/numpy':>9} {'vec/np_str':>10}"
    )
    for n, r in rates.items():
        q = result["ratios"][n]
        print(
            f"{n:>8} {r['simpy']:>10.4g} {r['vector']:>10.4g} {r['bare_simpy']:>10.4g} {r['numpy_draws']:>11.4g}"
            f" {r['numpy_streams']:>10.4g} {q['vector/simpy']:>9.1f} {q['simpy/bare_simpy']:>10.2f}"
            f" {q['vector/numpy_draws']:>9.2f} {q['vector/numpy_streams']:>10.2f}"
        )
    for target, met in result["targets_met"].items():
        print(f"{'met' if met else 'NOT met':>8}: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
