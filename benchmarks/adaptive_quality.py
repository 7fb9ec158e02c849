"""How close ``adaptive`` gets to ``optimal``, from small clusters to 10,000 workers.

    python benchmarks/adaptive_quality.py [--params '{"forgetting": 0.9}'] [--seeds 3]

What a change to ``adaptive`` (its fit, detector, hysteresis or noise margin) is judged by, on
the vector engine, seeded (it reproduces exactly):

* the embedded default sweep's lognormal-noise cells with one worker 1x, 2x or 4x slower, 2 to
  16 workers: ``adaptive``'s throughput over ``optimal``'s, mean over ``--seeds`` seeds;
* the built-in scenarios, the same ratio over ``--seeds + 1`` seeds, with the steps to recover
  from a slowdown where the scenario has episodes;
* the scenario of ``bench_engines.py`` at 1024 and 10,000 workers (1000 steps, summarised as it
  goes): the mean step time over ``optimal``'s, and how many steps changed the split.

Prints one JSON object. ``split_changes`` is the Summary's (samples moved per step).
"""

from __future__ import annotations

import json
import sys
import tomllib
from typing import Any

import numpy as np
from bench_common import Parser, count, entry
from bench_engines import scenario as bench_scenario

from hetsim.engines import VectorEngine, engine_for
from hetsim.policies import Adaptive, Optimal
from hetsim.run.metrics import run_changes, summary_of
from hetsim.run.simulate import simulate_summary
from hetsim.run.summary_recorder import SummaryRecorder, Tee
from hetsim.scenario.config import builtin_names, load_scenario
from hetsim.scenario.scenario import Scenario
from hetsim.sweep.spec import default_sweep_text, grid_points, load_sweep, point_scenario


def compare(scenario: Scenario, params: dict[str, Any], seeds: range) -> dict[str, Any]:
    """adaptive against optimal on ``scenario``, seed by seed and on average."""
    ratios, changes, recovery, share = [], [], [], []
    for seed in seeds:
        a = simulate_summary(scenario, Adaptive(**params), seed=seed, engine=VectorEngine())
        o = simulate_summary(scenario, Optimal(), seed=seed, engine=VectorEngine())
        ratios.append(a.throughput_sps / o.throughput_sps)
        changes.append(a.split_changes)
        if a.recovery_steps is not None:
            recovery.append(a.recovery_steps)
        if a.recovered_share is not None:
            share.append(a.recovered_share)
    return {
        "throughput_over_optimal": float(np.mean(ratios)),
        "per_seed": ratios,
        "split_changes": float(np.mean(changes)),
        "recovery_steps": float(np.mean(recovery)) if recovery else None,  # over the onsets recovered from
        "recovered_share": float(np.mean(share)) if share else None,
    }


class ChangedSteps:
    """A recorder that counts the steps whose split differs from the step before."""

    def __init__(self) -> None:
        self.last: np.ndarray | None = None
        self.changed = 0

    def add_block(self, first: int, epoch: Any, start_s: Any, local_batch: np.ndarray, compute_s: np.ndarray,
                  *rest: Any) -> None:  # fmt: skip
        rows = np.broadcast_to(local_batch, compute_s.shape)
        before = rows[:1] if self.last is None else self.last[None]
        self.changed += len(run_changes(np.concatenate([before, rows])))
        self.last = rows[-1].copy()


def at_scale(n: int, params: dict[str, Any]) -> dict[str, Any]:
    """adaptive against optimal on bench_engines' scenario at ``n`` workers x 1000 steps."""
    out: dict[str, Any] = {}
    for policy, given in (("adaptive", params), ("optimal", None)):
        s = bench_scenario(n, 1000, policy)
        chosen = s.named_policy(policy, given)
        summary, changed = SummaryRecorder(chosen.name, n, s.hints()), ChangedSteps()
        engine_for(VectorEngine(), chosen).record(s, chosen, Tee(summary, changed), None)
        out[policy] = (summary_of(summary.totals(), s), changed.changed)
    (a, a_changed), (o, _) = out["adaptive"], out["optimal"]
    return {"step_over_optimal": a.mean_step_s / o.mean_step_s, "changed_steps": a_changed,
            "split_changes": a.split_changes}  # fmt: skip


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="{}", help="adaptive's parameters, a JSON object")
    parser.add_argument("--seeds", type=count, default=3)
    args = parser.parse_args()
    params = json.loads(args.params)
    spec = load_sweep(tomllib.loads(default_sweep_text()))
    sweep = {}
    for point in grid_points(spec.axes):
        labels = {axis.name: axis.labels[k] for axis, k in zip(spec.axes, point)}
        if labels["noise"] == "lognormal" and labels["slow_factor"] in (1.0, 2.0, 4.0):
            key = f"slow {labels['slow_factor']}x, {labels['workers']} workers"
            sweep[key] = compare(point_scenario(spec, point), params, range(args.seeds))
    builtins = {name: compare(load_scenario(name), params, range(args.seeds + 1)) for name in builtin_names()}
    scale = {str(n): at_scale(n, params) for n in (1024, 10_000)}
    print(json.dumps({"command": " ".join(sys.argv), "params": params, "default_sweep": sweep,
                      "builtins": builtins, "scale": scale}, indent=2))  # fmt: skip


if __name__ == "__main__":
    entry(main, "adaptive_quality")
