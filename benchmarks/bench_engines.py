"""Engine throughput: worker-steps per second of four ways to do the same work, in one process.

    python benchmarks/bench_engines.py [--json] [--workers 8,64,256,1024] [--steps 1000] [--rounds 3] [--budget-s 20]

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

Each figure is timed on single runs (an engine's setup included): after a warm-up run (of each
method at the first size; of the NumPy ones, which map new memory at each size, after it),
every round runs each of the five once, in an order rotated from round to round so that none
always goes first (``bench_common.time_rounds``). A cluster size runs ``--rounds`` rounds, and
more while its timed runs took under ``--budget-s`` seconds, at most 100 (at 8 workers a round
takes milliseconds, and one run is noisy). The ratios (``vector/simpy``, ``simpy/bare_simpy``,
``vector/numpy_draws``, ``vector/numpy_streams``) are taken within each round, where both runs
saw the same load (the machine may be shared: the ratios are what to read), then summarised
over the rounds: mean, median and 90th percentile; never the best run. The targets (vector >=
50x SimPy at 256 workers; SimPy >= 0.5x the bare loop at every size; vector >= 0.25x the raw
NumPy draws at 256 and 1024 workers) are each judged on the ratio's median over the rounds.

Prints a table; ``--json`` prints ``{"workers": {"8": {"rounds": ..., "rates": {"simpy": {"mean":
..., "median": ..., "p90": ...}, ...}, "ratios": {"vector/simpy": {"mean": ..., ...}, ...}}, ...},
"targets_met": {...}, ...}`` (rates in worker-steps per second, each round's single run).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TypedDict

import numpy as np
import simpy
from bench_common import Parser, count, entry, stats, time_rounds
from simpy.events import Condition

from hetsim.engines import run_simpy, run_vector
from hetsim.model.draws import StepDraws
from hetsim.model.trace import Trace
from hetsim.policies import make_policy
from hetsim.scenario.config import build_scenario
from hetsim.scenario.scenario import Scenario

STEPS_PER_EPOCH = 100
SIGMA, DELAY_MEAN_S = 0.05, 0.002
NUMPY_METHODS = ("vector", "numpy_draws", "numpy_streams")
RATIOS = {  # name: (the method whose rate is over, the method whose rate is under)
    "vector/simpy": ("vector", "simpy"),
    "simpy/bare_simpy": ("simpy", "bare_simpy"),
    "vector/numpy_draws": ("vector", "numpy_draws"),
    "vector/numpy_streams": ("vector", "numpy_streams"),
}


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


def same_trace(a: Trace, b: Trace) -> bool:
    floats = ("start_s", "compute_s", "wait_s", "comm_s", "slowdown")
    exact = ("epoch", "step", "worker", "local_batch", "included", "up")
    return all(np.array_equal(getattr(a, c), getattr(b, c)) for c in exact) and all(
        np.max(np.abs(getattr(a, c) - getattr(b, c)), initial=0.0) <= 1e-9 for c in floats
    )


class Size(TypedDict):
    """What one cluster size measured: its rounds, each method's rate and each ratio (mean,
    median and p90 over the rounds)."""

    rounds: int
    rates: dict[str, dict[str, float]]
    ratios: dict[str, dict[str, float]]


def measure(n: int, steps: int, policy: str, min_rounds: int, budget_s: float, first: bool = True) -> Size:
    """Each method's rate and each ratio at ``n`` workers, over rounds of single runs. A warm-up
    run of each method first, or, after the ``first`` size, of the NumPy ones only: their first
    run at a size pays the operating system for mapping its arrays' memory, while a SimPy run
    (at 1024 workers, tens of seconds) has nothing left to warm."""
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
    warmup = True if first else NUMPY_METHODS
    timed = time_rounds(methods, min_rounds, warmup, budget_s, keep=("simpy", "vector"))
    simpy_trace, vector_trace = timed.first["simpy"], timed.first["vector"]
    if not (
        isinstance(simpy_trace, Trace) and isinstance(vector_trace, Trace) and same_trace(simpy_trace, vector_trace)
    ):
        raise SystemExit(f"the engines disagree at {n} workers")
    return {
        "rounds": len(timed.seconds["simpy"]),
        "rates": {name: stats(timed.rates(name, worker_steps)) for name in methods},
        "ratios": {key: stats(timed.ratios(num, den)) for key, (num, den) in RATIOS.items()},
    }


def targets(sizes: dict[str, Size]) -> dict[str, bool]:
    """The issue's targets, where this run measured the sizes they name, each judged on the
    median over the rounds of its ratio."""

    def median(n: str, ratio: str) -> float:
        return sizes[n]["ratios"][ratio]["median"]

    out = {}
    if "256" in sizes:
        out["vector >= 50x simpy at 256"] = median("256", "vector/simpy") >= 50
    out["simpy >= 0.5x bare_simpy"] = all(median(n, "simpy/bare_simpy") >= 0.5 for n in sizes)
    for n in ("256", "1024"):
        if n in sizes:
            out[f"vector >= 0.25x numpy_draws at {n}"] = median(n, "vector/numpy_draws") >= 0.25
    return out


def print_table(sizes: dict[str, Size], met: dict[str, bool], steps: int, policy: str) -> None:
    print(
        f"{steps} steps, policy {policy}; rates: median M worker-steps/s of single runs;"
        " ratios within each round: median (mean / p90)"
    )
    print(f"{'workers':>8} {'rounds':>6} {'simpy':>7} {'vector':>7} " + " ".join(f"{k:>26}" for k in RATIOS))
    for n, size in sizes.items():
        rates = " ".join(f"{size['rates'][m]['median'] / 1e6:>7.3g}" for m in ("simpy", "vector"))
        cells = " ".join(f"{'{median:.3g} ({mean:.3g} / {p90:.3g})'.format(**size['ratios'][k]):>26}" for k in RATIOS)
        print(f"{n:>8} {size['rounds']:>6} {rates} {cells}")
    for target, ok in met.items():
        print(f"{'met' if ok else 'NOT met':>8}: {target}")


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", default="8,64,256,1024", help="comma-separated cluster sizes")
    parser.add_argument("--steps", type=count, default=1000, help="steps per run (default: 1000, a default-sweep cell)")
    parser.add_argument("--rounds", type=count, default=3, help="rounds at each size, at least (default: 3)")
    parser.add_argument(
        "--budget-s", type=float, default=20.0, help="more rounds while a size's runs took under this (default: 20)"
    )
    parser.add_argument("--policy", default="dynamic", help="a barrier policy (default: dynamic)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.workers.split(",")]
    measured = {
        str(n): measure(n, args.steps, args.policy, args.rounds, args.budget_s, first=i == 0)
        for i, n in enumerate(sizes)
    }
    met = targets(measured)
    result = {
        "command": " ".join(sys.argv),
        "workers": measured,
        "targets_met": met,
        "steps": args.steps,
        "policy": args.policy,
        "min_rounds": args.rounds,
        "budget_s": args.budget_s,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print_table(measured, met, args.steps, args.policy)
    return 0


if __name__ == "__main__":
    entry(main, "bench_engines")
