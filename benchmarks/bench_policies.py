"""The vector engine's speed per policy: ``adaptive`` against ``dynamic``, as a ratio in one run.

    python benchmarks/bench_policies.py [--workers 1024,10000] [--steps 1000] [--rounds 3]

The scenario of ``benchmarks/bench_engines.py`` (a quarter of the workers 2x slower, lognormal
noise, an exponential injected delay, 100 steps per epoch) under each policy of ``--policies``
(default ``dynamic,adaptive``), on the vector engine, ``--rounds`` times in turn (each rate as
``bench_scale.py`` measures it: after a warm-up run, the best of the runs that fit in a
second). Prints one JSON
object: per cluster size and policy the worker-steps per second of each round, and per size the
ratio of each policy's rate to the first policy's, round by round, with its mean, median and
90th percentile (the machine may be shared: the ratio within a round is what to read).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from bench_engines import stats
from bench_scale import rate


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
        rates: dict[str, list[float]] = {p: [] for p in policies}
        for _ in range(args.rounds):
            for p in policies:
                rates[p].append(rate(n, args.steps, p)[0])
        base = np.asarray(rates[policies[0]])
        ratios = {p: (np.asarray(r) / base).tolist() for p, r in rates.items() if p != policies[0]}
        out["sizes"][str(n)] = {  # type: ignore[index]
            "worker_steps_per_s": rates,
            "ratio_to_" + policies[0]: {
                p: {"rounds": r, **stats(r)} for p, r in ratios.items()
            },
        }  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
