"""goodput against the best fixed global batch and against adaptive at the workload's batch.

    python benchmarks/goodput.py [--seeds 5]

On two clusters, each with a noise scale that grows over training (a schedule from 256 to 4096
samples, McCandlish et al. 2018's typical growth): the built-in ``mixed-gpus`` (2 V100 + 2 P100
+ 2 K80, measured step-time curves, K80s capped at 128 samples) and the same cards as heavy
stragglers (lognormal noise sigma 0.6). For every seed: ``adaptive`` at each fixed global batch
of :data:`BATCHES` (each run long enough to reach the target), ``adaptive`` at the workload's
512, and ``goodput`` (starting at 256, its range 256 to the caps' 1280), all simulated to the same target. The
best fixed batch is the one of lowest mean time over the seeds (chosen in hindsight, which a
user cannot do). Prints one JSON object: per cluster, each run's time to target per seed, and
the ratios goodput / best fixed and goodput / adaptive at 512 (mean, median, 90th percentile
over seeds; below 1 means goodput is faster).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from bench_common import Parser, count, entry, stats

from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario

BATCHES = (256, 384, 512, 768, 1024, 1280)
DEFAULT_BATCH = 512
EFFICIENCY = [
    "workload.efficiency.noise_scale=[[0, 256], [1500, 4096]]",
    "workload.efficiency.base_batch=512",
    "workload.efficiency.target_steps=3000",
]
CLUSTERS = {
    "mixed-gpus": [],
    "mixed-gpus-stragglers": [f"workers.{i}.noise.sigma=0.6" for i in range(3)],
}


def time_to_target(overrides: list[str], policy: str, batch: int, seed: int, params: dict[str, Any]) -> float:
    steps = 3000 * max(1.0, 512 / batch)  # a step of b < 512 gains at least b / 512 (gain's concavity)
    epochs = int(np.ceil(1.2 * steps / (50000 // batch))) + 1  # a run long enough to meet the target
    scenario = load_scenario("mixed-gpus", [*overrides, *EFFICIENCY, f"workload.global_batch={batch}",
                                            f"workload.epochs={epochs}", f"seed={seed}"])  # fmt: skip
    summary = summarize(simulate(scenario, scenario.named_policy(policy, params)), scenario)
    if summary.time_to_target_s is None:
        raise SystemExit(f"{policy} at batch {batch} did not reach the target: raise the epochs")
    return summary.time_to_target_s


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=count, default=5)
    args = parser.parse_args()
    out: dict[str, Any] = {"command": " ".join(sys.argv), "clusters": {}}
    for name, overrides in CLUSTERS.items():
        seeds = range(args.seeds)
        fixed = {b: [time_to_target(overrides, "adaptive", b, s, {}) for s in seeds] for b in BATCHES}
        best = min(fixed, key=lambda b: float(np.mean(fixed[b])))
        goodput = [time_to_target(overrides, "goodput", BATCHES[0], s, {}) for s in seeds]  # from 256 up
        out["clusters"][name] = {
            "adaptive_fixed_batch_s": {str(b): t for b, t in fixed.items()},
            "best_fixed_batch": best,
            "goodput_s": goodput,
            "goodput_over_best_fixed": stats([g / f for g, f in zip(goodput, fixed[best])]),
            "goodput_over_adaptive_default": stats([g / f for g, f in zip(goodput, fixed[DEFAULT_BATCH])]),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    entry(main, "goodput")
