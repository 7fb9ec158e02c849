"""A plug-in policy written from the docs runs as fast as the built-in policy of its kind.

    python benchmarks/bench_plugin_policy.py [--workers 64] [--epochs 100] [--rounds 5]

The plug-in is the "Extending" page's kind of static policy: a ``Policy`` subclass with a name
and an ``initial_split`` (here the equal split written out), declaring no engine hints. The
vector engine's fast path (one block of steps per split) follows from what a class overrides
(:meth:`hetsim.policies.Policy.steady_steps`), so it should run at the built-in ``equal``'s
speed and give its trace. Each round times both on the vector engine, in turn, in one process
(whole runs, setup included); the ratio plug-in / built-in is taken within the round. Prints
JSON: the ratio's mean, median and 90th percentile over rounds, each one's seconds, and whether
the traces are equal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import stats

from hetsim.model.partition import split_by_shares
from hetsim.policies import Equal, Policy
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario


class EvenSplit(Policy):
    """The equal split, as a user would write it from the docs."""

    name = "even-split"
    excludes_failed = False

    def initial_split(self) -> tuple[int, ...]:
        return split_by_shares([1.0] * self.n_workers, self.global_batch, self.caps)


def timed(run) -> tuple[float, object]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    scenario = load_scenario(
        "paper", [f"workers.0.count={args.workers - 1}", "workload.global_batch=1024", f"workload.epochs={args.epochs}"]
    )
    ratios, plugin_s, builtin_s, same = [], [], [], True
    for _ in range(args.rounds):
        tb, ref = timed(lambda: simulate(scenario, Equal(), engine="vector"))
        tp, got = timed(lambda: simulate(scenario, EvenSplit(), engine="vector"))
        same &= all(np.array_equal(getattr(ref, c), getattr(got, c)) for c in ("local_batch", "compute_s", "wait_s"))
        ratios.append(tp / tb)
        plugin_s.append(tp)
        builtin_s.append(tb)
    out = {
        "workers": scenario.n_workers,
        "steps": scenario.workload.total_steps,
        "rounds": args.rounds,
        "ratio_plugin_over_builtin": stats(ratios),
        "plugin_s": stats(plugin_s),
        "builtin_s": stats(builtin_s),
        "same_trace": bool(same),
        "target": "ratio at most 2",
        "target_met": bool(max(ratios) <= 2.0),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
