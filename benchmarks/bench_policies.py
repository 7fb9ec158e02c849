"""The vector engine's speed per policy: ``adaptive`` against ``dynamic``, as a ratio in one run.

    python benchmarks/bench_policies.py [--workers 1024,10000] [--steps 1000] [--rounds 3]

The scenario of ``benchmarks/bench_engines.py`` (a quarter of the workers 2x slower, lognormal
noise, an exponential injected delay, 100 steps per epoch) under each policy of ``--policies``
(default ``dynamic,adaptive``), on the vector engine: after a warm-up run of each, ``--rounds``
turns that run every policy once, back to back (``bench_scale.paired``). Prints one JSON
object: per cluster size each policy's worker-steps per second (from its median time), and the
ratio of each policy's rate to the first policy's, turn by turn, with its mean, median and
90th percentile (the machine may be shared: the ratio within a turn is what to read).
"""

from __future__ import annotations

import argparse
import json
import sys

from bench_engines import stats
from bench_scale import paired


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1024,10000")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", default="dynamic,adaptive")
    args = parser.parse_args()
    policies = args.policies.split(",")
    out: dict[str, object] = {"command": " ".join(sys.argv), "steps": args.steps, "sizes": {}}
    for n in (int(x) for x in args.workers.split(",")):
        rates, ratios = paired(n, args.steps, policies, args.rounds)
        out["sizes"][str(n)] = {  # type: ignore[index]
            "worker_steps_per_s": rates,
            "ratio_to_" + policies[0]: {
                p: {"rounds": r, **stats(r)} for p, r in ratios.items()
            },
        }  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
