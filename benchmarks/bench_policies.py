"""The vector engine's speed per policy: ``adaptive`` against ``dynamic``, as a ratio in one run.

    python benchmarks/bench_policies.py [--workers 1024,10000] [--steps 1000] [--rounds 3]

The scenario of ``benchmarks/bench_engines.py`` (a quarter of the workers 2x slower, lognormal
noise, an exponential injected delay, 100 steps per epoch) under each policy of ``--policies``
(default ``dynamic,adaptive``), on the vector engine: after a warm-up run of each, ``--rounds``
turns that run every policy once, back to back, the order rotated from turn to turn
(``bench_scale.paired``). A policy that chooses
the global batch by statistical efficiency (``goodput``) runs on the same scenario with a
``[workload.efficiency]`` (gradient noise scale 4x the global batch, base batch the global
batch: :data:`EFFICIENCY`), which the others run without. Prints one JSON
object: per cluster size each policy's worker-steps per second (from its median time), and the
ratio of each policy's rate to the first policy's, turn by turn, with its mean, median and
90th percentile (the machine may be shared: the ratio within a turn is what to read).
"""

from __future__ import annotations

import json
import sys

import bench_scale
from bench_common import Parser, count, entry, refuse, stats
from bench_engines import scenario

from hetsim.core.errors import ConfigError
from hetsim.policies import policy_class
from hetsim.scenario.config import build_scenario
from hetsim.scenario.scenario import Scenario

EFFICIENCY = {"noise_scale_per_batch": 4.0, "base_batch_per_batch": 1.0}  # relative to the global batch


def scenario_for(n_workers: int, steps: int, policy: str) -> Scenario:
    """bench_engines' scenario, with a workload efficiency for a policy that needs one."""
    plain = scenario(n_workers, steps, policy)
    if not policy_class(policy).needs_efficiency:
        return plain
    config = plain.to_dict()
    batch = plain.workload.global_batch
    config["workload"]["efficiency"] = {
        "noise_scale": EFFICIENCY["noise_scale_per_batch"] * batch,
        "base_batch": int(EFFICIENCY["base_batch_per_batch"] * batch),
    }
    return build_scenario(config)


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1024,10000")
    parser.add_argument("--steps", type=count, default=1000)
    parser.add_argument("--rounds", type=count, default=3)
    parser.add_argument("--policies", default="dynamic,adaptive")
    args = parser.parse_args()
    policies = args.policies.split(",")
    try:
        for p in policies:
            policy_class(p, "--policies")
    except ConfigError as exc:
        refuse("bench_policies", str(exc))
    bench_scale.scenario = scenario_for  # paired() builds each policy's scenario by this name
    out: dict[str, object] = {"command": " ".join(sys.argv), "steps": args.steps, "sizes": {}}
    for n in (int(x) for x in args.workers.split(",")):
        rates, ratios = bench_scale.paired(n, args.steps, policies, args.rounds)
        out["sizes"][str(n)] = {  # type: ignore[index]
            "worker_steps_per_s": rates,
            "ratio_to_" + policies[0]: {
                p: {"rounds": r, **stats(r)} for p, r in ratios.items()
            },
        }  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    entry(main, "bench_policies")
