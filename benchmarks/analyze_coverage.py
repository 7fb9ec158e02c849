"""Coverage of ``analyze``'s 95% confidence intervals of the expected mean step time.

    python benchmarks/analyze_coverage.py [--seeds 200] [--rounds 3] [--jobs N] [--quick] [--only NAME,...]

For each scenario below (built-in scenarios with ``--set`` style overrides: one to ten epochs;
independent, shared and persistent noise; barrier policies and async), ``--seeds`` analyses,
seeds 0, 1, ..., each computed as ``analyze`` computes it (:func:`hetsim.analysis.step_ci.simulated_mean`,
vector engine where it runs the policy): one run with that seed, or, where
:func:`hetsim.analysis.step_ci.method` says so, the mean of that seed's replications. Per scenario:

* ``truth``: the mean over the seeds of those analyses' simulated means (the mean of the
  ``--seeds`` seeded runs; with replications, of all their runs);
* ``coverage``: the share of the analyses whose interval contains ``truth``;
* ``width_ratio``: the mean half-width of the intervals over ``1.96 x`` the standard deviation
  over the seeds of the simulated means they are centred on. An interval of exactly the right
  width has 1 (a Student t interval is wider by its quantile's excess over 1.96, and on
  average narrower by the spread of its standard deviation);
* ``method``, ``runs`` (per analysis), ``steps`` (per run; async: updates) and ``seconds``.

``acceptance_set`` gives the least and greatest coverage over the scenarios of the issue's set
(independent, shared and persistent noise), and whether all are within 90-98%; the scenario with
slowdown episodes and failures is reported beside them (``in_acceptance_set`` false). Each
figure is measured in ``--rounds`` rounds on fresh seeds and given as its mean, median and 90th
percentile over the rounds. ``--quick`` runs one round of 50 seeds and leaves out the
80,000-update run. Seeded: it reproduces exactly. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from bench_common import Parser, count, entry

from hetsim.analysis.step_ci import simulated_mean
from hetsim.policies import policy_class
from hetsim.scenario.config import load_scenario

LEVEL = 0.95


def persistent(rho: float, groups: int) -> list[str]:
    return [f"workers.{i}.noise.persistence={rho}" for i in range(groups)]


def shared(rho: float, groups: int = 2) -> list[str]:
    """Every worker of the first ``groups`` [[workers]] entries on one host: a shared factor."""
    table = f'{{group = "host", dist = "lognormal", sigma = 0.05, persistence = {rho}}}'
    return [f"workers.{i}.shared_noise={table}" for i in range(groups)]


SIXTEEN = ["workers.0.count=8", "workers.1.count=8", "workers.1.max_batch=512", "workload.global_batch=2048",
           "workload.dataset_size=204800", "workers.0.noise.sigma=0.1", "workers.1.noise.sigma=0.1"]  # fmt: skip
PS = ["network.kind=ps", "network.bandwidth_gbps=10", "workload.gradient_mb=2"]

SCENARIOS: dict[str, tuple[str, list[str], str]] = {  # name: (scenario, overrides, policy)
    "paper equal 1 epoch": ("paper", ["workload.epochs=1"], "equal"),
    "paper equal 1 epoch, persistence 0.9": ("paper", ["workload.epochs=1", *persistent(0.9, 2)], "equal"),
    "paper optimal 10 epochs, persistence 0.5": ("paper", ["workload.epochs=10", *persistent(0.5, 2)], "optimal"),
    "paper dynamic 3 epochs": ("paper", ["workload.epochs=3"], "dynamic"),
    "paper dynamic 10 epochs": ("paper", ["workload.epochs=10"], "dynamic"),
    "workstation proportional 1 epoch": ("workstation", ["workload.epochs=1"], "proportional"),
    "workstation optimal 3 epochs, persistence 0.7": (
        "workstation", ["workload.epochs=3", *persistent(0.7, 2)], "optimal"),
    "workstation equal 10 epochs, shared 0.8": ("workstation", ["workload.epochs=10", *shared(0.8)], "equal"),
    "workstation dynamic 3 epochs": ("workstation", ["workload.epochs=3"], "dynamic"),
    "workstation dynamic 3 epochs, persistence 0.5": (
        "workstation", ["workload.epochs=3", *persistent(0.5, 2)], "dynamic"),
    "workstation ksync 1 epoch, shared": ("workstation", ["workload.epochs=1", *shared(0.0)], "ksync"),
    "mixed-gpus backup 3 epochs": ("mixed-gpus", ["workload.epochs=3"], "backup"),
    "mixed-gpus ksync 10 epochs, persistence 0.9": (
        "mixed-gpus", ["workload.epochs=10", *persistent(0.9, 3)], "ksync"),
    "mixed-gpus equal 3 epochs, persistence 0.9": ("mixed-gpus", ["workload.epochs=3", *persistent(0.9, 3)], "equal"),
    "16 workers optimal 1 epoch, persistence 0.9": (
        "workstation", [*SIXTEEN, "workload.epochs=1", *persistent(0.9, 2)], "optimal"),
    "16 workers equal 3 epochs, persistence 0.9": (
        "workstation", [*SIXTEEN, "workload.epochs=3", *persistent(0.9, 2)], "equal"),
    "shared-cluster equal 2 epochs (episodes, failures)": ("shared-cluster", ["workload.epochs=2"], "equal"),
    "workstation async 1 epoch": ("workstation", ["workload.epochs=1"], "async"),
    "workstation async 3 epochs, shared 0.5": ("workstation", ["workload.epochs=3", *shared(0.5)], "async"),
    "workstation async 10 epochs, persistence 0.9": (
        "workstation", ["workload.epochs=10", *persistent(0.9, 2)], "async"),
    "workstation async 3 epochs, parameter server": ("workstation", ["workload.epochs=3", *PS], "async"),
    "workstation async, 80,000 updates": ("workstation", ["workload.epochs=1", "workload.dataset_size=10240000"],
                                          "async"),  # fmt: skip
}  # fmt: skip
SLOW = {"workstation async, 80,000 updates"}
# Outside the set (independent, shared and persistent noise): its run means are skewed
# (a 30 s repair in a 100 s run), which 10 replications' t interval under-covers.
BEYOND = {"shared-cluster equal 2 epochs (episodes, failures)"}


def coverage(name: str, seeds: range) -> dict[str, Any]:
    """Scenario ``name``'s analyses with ``seeds``: coverage and width (module docstring)."""
    scenario_name, overrides, policy = SCENARIOS[name]
    scenario = load_scenario(scenario_name, overrides)
    start = time.perf_counter()
    results = [simulated_mean(scenario, scenario.named_policy(policy), seed, LEVEL) for seed in seeds]
    means = np.array([r.mean_s for r in results])
    truth = float(means.mean())
    halves = np.array([r.ci.half_width if r.ci is not None else np.nan for r in results])
    return {
        "policy": policy,
        "method": results[0].method,
        "runs": results[0].runs,
        "steps": scenario.workload.total_steps * (1 if policy_class(policy).synchronous else scenario.n_workers),
        "truth_s": truth,
        "coverage": float(np.mean([r.ci is not None and r.ci.contains(truth) for r in results])),
        "width_ratio": float(np.mean(halves) / (1.96 * means.std(ddof=1))),
        "seconds": time.perf_counter() - start,
        "in_acceptance_set": name not in BEYOND,
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "median": float(np.median(values)), "p90": float(np.percentile(values, 90))}


def run(names: list[str], seeds: int, rounds: int, jobs: int) -> dict[str, Any]:
    """Every scenario in ``rounds`` rounds of ``seeds`` seeds (round r: seeds r*seeds onwards) on
    ``jobs`` processes; coverage and width per round, and their mean, median and 90th
    percentile over the rounds."""
    tasks = [(name, range(r * seeds, (r + 1) * seeds)) for r in range(rounds) for name in names]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(coverage, *zip(*tasks)))
    rows = {}
    for i, name in enumerate(names):
        per_round = [done[r * len(names) + i] for r in range(rounds)]
        rows[name] = {
            **{k: per_round[0][k] for k in ("policy", "method", "runs", "steps", "in_acceptance_set")},
            "coverage": _stats([r["coverage"] for r in per_round]),
            "width_ratio": _stats([r["width_ratio"] for r in per_round]),
            "rounds": [{k: r[k] for k in ("coverage", "width_ratio", "truth_s", "seconds")} for r in per_round],
        }
    inside = [[done[r * len(names) + i]["coverage"] for i, n in enumerate(names) if n not in BEYOND]
              for r in range(rounds)]  # fmt: skip
    return {
        "scenarios": rows,
        "acceptance_set": {
            "coverage_min": _stats([min(c) for c in inside if c]),
            "coverage_max": _stats([max(c) for c in inside if c]),
            "rounds_all_within_0.90_0.98": [all(0.90 <= x <= 0.98 for x in c) for c in inside],
        },
    }  # fmt: skip


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=count, default=None, help="analyses per scenario (default 200; --quick 50)")
    parser.add_argument("--quick", action="store_true", help="50 seeds, without the 80,000-update run")
    parser.add_argument("--only", default=None, help="comma-separated scenario names (default: all)")
    parser.add_argument("--rounds", type=count, default=3, help="rounds on fresh seeds (the figures' spread)")
    parser.add_argument("--jobs", type=count, default=os.cpu_count() or 1, help="processes")
    args = parser.parse_args()
    seeds = args.seeds or (50 if args.quick else 200)
    names = list(SCENARIOS) if args.only is None else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}")
    if args.quick:
        names = [n for n in names if n not in SLOW]
    result = run(names, seeds, 1 if args.quick else args.rounds, args.jobs)
    print(json.dumps({"command": " ".join(sys.argv), "level": LEVEL, "seeds": seeds, **result}, indent=2))


if __name__ == "__main__":
    entry(main, "analyze_coverage")
