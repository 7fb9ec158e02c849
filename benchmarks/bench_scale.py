"""The simulator's scaling targets (large clusters, long runs), as ratios measured side by side in one run, repeated.

    cd benchmarks && python bench_scale.py [--rounds 10] [--memory-runs 1] [--memory-steps 100000]

On the scenario of ``bench_engines.py`` (a quarter of the workers 2x slower, lognormal noise, an
exponential delay, 100 steps per epoch), on the vector engine unless named, it times seven runs
(:data:`RUNS`): ``dynamic`` and ``adaptive`` at 1024 and at 10,000 workers (1000 steps),
``async`` on the SimPy and on the vector engine at 256 workers (200 steps; their traces checked
identical), and ``dynamic`` at 100,000 workers (100 steps). After a warm-up run of each (the
scenario expands its worker specs once, and the first run of a size pays the operating system
for mapping its trace's memory: at 10,000 workers x 1000 steps, 700 MB, the first run took 5x
the next, which is not the engine's speed), each of ``--rounds`` rounds runs every one of the
seven once, a single timed run, in an order rotated from round to round so that none always
goes first (``bench_common.time_rounds``). The targets' ratios are taken within each round,
where both runs saw the same load:

* ``adaptive`` over ``dynamic`` worker-steps per second, at 1024 and at 10,000 workers
  (target: at least 1/3);
* ``async``, the vector engine's over the SimPy engine's, at 256 workers (target: at least 30x);
* ``dynamic`` at 100,000 workers over ``dynamic`` at 1024 workers, the same round's run
  (target: at least 0.5).

Then ``--memory-runs`` times, in a fresh process each (``trace_none_memory.py``), the peak
resident memory of a 10,000-worker x ``--memory-steps`` ``dynamic`` run summarised as it goes
(``--trace none``; target: under 2 GB): half a minute a run on a quiet machine, three on a busy one, and its peak
varies by a few percent from run to run (192-209 MB in nine runs), so one run by default.

Prints one JSON object: each round's figures; each run's rate (mean, median and 90th percentile
of its single runs, M worker-steps per second); and for each target its value per round (per
memory run), their mean, median and 90th percentile, the target and whether the median meets
it: every target is judged on the median, never on the best round. The machine may be shared:
read the ratios, which are measured within one round.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bench_common import Parser, Rounds, count, entry, stats, time_rounds
from bench_engines import same_trace, scenario

from hetsim.engines import run_simpy, run_vector
from hetsim.model.trace import Trace
from hetsim.policies import make_policy

HERE = Path(__file__).resolve().parent
RUNS: dict[str, tuple[int, int, str, bool]] = {  # name: (workers, steps, policy, on the SimPy engine)
    "dynamic at 1024": (1024, 1000, "dynamic", False),
    "adaptive at 1024": (1024, 1000, "adaptive", False),
    "dynamic at 10000": (10_000, 1000, "dynamic", False),
    "adaptive at 10000": (10_000, 1000, "adaptive", False),
    "async SimPy at 256": (256, 200, "async", True),
    "async vector at 256": (256, 200, "async", False),
    "dynamic at 100000": (100_000, 100, "dynamic", False),
}
RATIOS = {  # target's name: (the run whose rate is over, the run whose rate is under)
    "adaptive / dynamic at 1024 workers": ("adaptive at 1024", "dynamic at 1024"),
    "adaptive / dynamic at 10000 workers": ("adaptive at 10000", "dynamic at 10000"),
    "async vector / SimPy at 256 workers": ("async vector at 256", "async SimPy at 256"),
    "dynamic at 100000 / at 1024 workers": ("dynamic at 100000", "dynamic at 1024"),
}
MEMORY = "peak MB, 10000 workers --trace none"
TARGETS = {  # name: (target, whether higher is better)
    "adaptive / dynamic at 1024 workers": (1 / 3, True),
    "adaptive / dynamic at 10000 workers": (1 / 3, True),
    "async vector / SimPy at 256 workers": (30.0, True),
    "dynamic at 100000 / at 1024 workers": (0.5, True),
    MEMORY: (2048.0, False),
}


def work(name: str) -> int:
    """Worker-steps of one run of ``name``."""
    workers, steps, _, _ = RUNS[name]
    return workers * steps


def run_of(n: int, steps: int, policy: str, simpy: bool = False) -> Callable[[], Trace]:
    """One run of ``policy`` at ``n`` workers, on the vector engine or the SimPy one."""
    s = scenario(n, steps, policy)
    engine = run_simpy if simpy else run_vector
    return lambda: engine(s, make_policy(policy))


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
    each later policy's rate over the first's in each of ``pairs`` rounds: after a warm-up run of
    each, a round runs every policy once (``bench_common.time_rounds``: the order rotated from
    round to round), so that all see the same machine the same number of times."""
    timed = time_rounds({p: run_of(n, steps, p) for p in policies}, pairs, keep=False)
    rates = {p: n * steps / statistics.median(timed.seconds[p]) for p in policies}
    return rates, {p: timed.ratios(p, policies[0]) for p in policies[1:]}


def rounds_figures(timed: Rounds) -> list[dict[str, float]]:
    """Each round's figures: each run's rate (M worker-steps per second) and each target's ratio."""
    rates = {name: timed.rates(name, work(name) / 1e6) for name in RUNS}
    ratios = {key: timed.ratios(num, den, work(num), work(den)) for key, (num, den) in RATIOS.items()}
    return [
        {**{f"{name}, M/s": v[r] for name, v in rates.items()}, **{key: v[r] for key, v in ratios.items()}}
        for r in range(len(timed.seconds[next(iter(RUNS))]))
    ]


def measure_speed(rounds: int) -> tuple[list[dict[str, float]], dict[str, dict[str, float]]]:
    """The rounds' figures, and each run's rate (M worker-steps per second) over the rounds."""
    checked = ("async SimPy at 256", "async vector at 256")  # the large traces are let go round by round
    timed = time_rounds({name: run_of(*spec) for name, spec in RUNS.items()}, rounds, keep=checked)
    simpy_trace, vector_trace = (timed.first[name] for name in checked)
    if not (
        isinstance(simpy_trace, Trace) and isinstance(vector_trace, Trace) and same_trace(simpy_trace, vector_trace)
    ):
        raise SystemExit("async: the engines' traces differ")
    return rounds_figures(timed), {name: stats(timed.rates(name, work(name) / 1e6)) for name in RUNS}


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=count, default=10, help="rounds of single runs (default: 10)")
    parser.add_argument(
        "--memory-runs", type=count, default=1, help="--trace none runs, each in a fresh process (default: 1)"
    )
    parser.add_argument("--memory-steps", type=count, default=100_000, help="steps of the --trace none run")
    args = parser.parse_args()
    rounds, rates = measure_speed(args.rounds)
    memory = [peak_memory_mb(10_000, args.memory_steps) for _ in range(args.memory_runs)]
    values = {key: [r[key] for r in rounds] for key in RATIOS}
    values[MEMORY] = [m["peak_rss_mb"] for m in memory]
    summary = {}
    for name, (target, higher) in TARGETS.items():
        figures = stats(values[name])
        met = figures["median"] >= target if higher else figures["median"] < target
        summary[name] = {"rounds": values[name], **figures, "target": target, "met": met}
    out = {
        "command": " ".join(sys.argv),
        "rounds": rounds,
        "rates_M_per_s": rates,
        "memory_runs": memory,
        "targets": summary,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    entry(main, "bench_scale")
