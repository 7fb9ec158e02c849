"""A plug-in policy written from the docs runs as fast as the built-in policy of its kind.

    python benchmarks/bench_plugin_policy.py [--workers 64] [--epochs 100] [--rounds 5]

The plug-in is the "Extending" page's kind of static policy: a ``Policy`` subclass with a name
and an ``initial_split`` (here the equal split written out), declaring no engine hints. The
vector engine's fast path (one block of steps per split) follows from what a class overrides
(:meth:`hetsim.policies.Policy.steady_steps`), so it should run at the built-in ``equal``'s
speed and give its trace. The second pair is the page's worked example of a policy that
re-splits at epoch ends (``shift``, examples/my_policies.py, with its ``observe_steps``)
against the built-in of that kind, ``dynamic``. After a warm-up run of each, each round times one run of each on the
vector engine, in one process (whole runs, setup included), in an order rotated from round to
round (``bench_common.time_rounds``); the ratio plug-in / built-in seconds is taken within the
round. Prints JSON: the ratios' mean, median and 90th percentile over rounds, each one's
seconds, and whether the static pair's traces (of the first round) are equal.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import Parser, count, entry, stats, time_rounds

from hetsim.core.registry import PLUGINS_ENV
from hetsim.engines import VectorEngine
from hetsim.model.partition import split_by_shares
from hetsim.policies import Dynamic, Equal, Policy, make_policy
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario


class EvenSplit(Policy):
    """The equal split, as a user would write it from the docs."""

    name = "even-split"
    excludes_failed = False

    def initial_split(self) -> tuple[int, ...]:
        return split_by_shares([1.0] * self.n_workers, self.global_batch, self.caps)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=count, default=64)
    ap.add_argument("--epochs", type=count, default=100)
    ap.add_argument("--rounds", type=count, default=5)
    args = ap.parse_args(argv)
    os.environ[PLUGINS_ENV] = str(Path(__file__).resolve().parents[1] / "examples" / "my_policies.py")  # as users do
    scenario = load_scenario(
        "paper", [f"workers.0.count={args.workers - 1}", "workload.global_batch=1024", f"workload.epochs={args.epochs}"]
    )
    timed = time_rounds(
        {
            "builtin": lambda: simulate(scenario, Equal(), engine=VectorEngine()),
            "plugin": lambda: simulate(scenario, EvenSplit(), engine=VectorEngine()),
            "dynamic": lambda: simulate(scenario, Dynamic(), engine=VectorEngine()),
            "shift": lambda: simulate(scenario, make_policy("shift"), engine=VectorEngine()),
        },
        args.rounds,
    )
    ref, got = timed.first["builtin"], timed.first["plugin"]
    same = all(np.array_equal(getattr(ref, c), getattr(got, c)) for c in ("local_batch", "compute_s", "wait_s"))
    plugin_s, builtin_s = timed.seconds["plugin"], timed.seconds["builtin"]
    ratios = timed.ratios("builtin", "plugin")  # the built-in's rate over the plug-in's: plug-in s / built-in s
    resplit = timed.ratios("dynamic", "shift")
    out = {
        "workers": scenario.n_workers,
        "steps": scenario.workload.total_steps,
        "rounds": args.rounds,
        "ratio_plugin_over_builtin": stats(ratios),
        "plugin_s": stats(plugin_s),
        "builtin_s": stats(builtin_s),
        "same_trace": bool(same),
        "ratio_shift_over_dynamic": stats(resplit),
        "shift_s": stats(timed.seconds["shift"]),
        "dynamic_s": stats(timed.seconds["dynamic"]),
        "target": "each ratio at most 2",
        "target_met": bool(max(ratios) <= 2.0 and max(resplit) <= 2.0),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    entry(main, "bench_plugin_policy")
