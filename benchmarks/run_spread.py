"""How far apart are runs of one plan on this machine? The noise floor under own_job.py's targets.
Prints JSON.

One profile and one plan (as ``benchmarks/own_job.py`` makes them: ``validation profile`` of
``examples/train_your_model.py:WORKLOAD`` on two CPU ranks, ``--slowdown 1,2``; ``hetsim
plan``), then the example run with that plan ``--runs`` times in a row (each a fresh torchrun,
``--epochs`` epochs). Nothing changes between the runs but the machine, so their spread is what
any prediction of one run, and any comparison of two runs, is up against here:

* ``mean_step_s``: each run's measured mean step, and their mean / median / p90;
* ``cv``: the runs' standard deviation over their mean (one run's noise, relative);
* ``deviation_from_mean``: mean / median / p90 over runs of ``|run - mean of runs| / mean``;
* ``pair_difference``: mean / median / p90 of ``|a - b| / a`` over consecutive runs (what
  own_job.py's ``repeat_difference`` measures, once per repetition);
* ``prediction_error``: the plan's predicted step against each run (mean / median / p90 of
  ``|predicted - run| / run``, own_job.py's target 5%) and against the mean of the runs (the
  model's error with one run's noise averaged out);
* ``within_run``: per run, the coefficient of variation of its means over blocks of ~66 steps
  (a second or two each) beside what independent steps would give: how slow the noise is;
* the load average before and after each run.

    .venv/bin/python benchmarks/run_spread.py [--runs 8] [--epochs 60] [--budget-s 30] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_common import Parser, count, entry, stats
from own_job import add_job_options, figures, launch, policy_steps, profile_and_plan

BLOCK_STEPS = 66  # six epochs of 11 steps at the default global batch


def within_run(steps: Any) -> dict[str, float]:
    """The run's per-step max compute plus communication (``steps``: its policy's rows grouped by
    step, :func:`own_job.policy_steps`), its blocks' means' spread against iid steps'."""
    step_s = (steps["compute_s"].max() + steps["comm_s"].max()).to_numpy()
    blocks = [step_s[i : i + BLOCK_STEPS].mean() for i in range(0, len(step_s) - BLOCK_STEPS + 1, BLOCK_STEPS)]
    cv_step = float(step_s.std() / step_s.mean())
    return {
        "block_cv": float(statistics.pstdev(blocks) / statistics.fmean(blocks)) if len(blocks) > 1 else math.nan,
        "iid_block_cv": cv_step / math.sqrt(BLOCK_STEPS),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The profile, the plan and ``args.runs`` runs of it (see the module's docstring)."""
    plan = profile_and_plan(args.out, 0, args)
    predicted_s = float(plan["recommended"]["predicted_step_s"])
    how = ["--plan", str(args.out / "plan.json")]
    runs = []
    for k in range(args.runs):
        load = os.getloadavg()[0]
        folder = args.out / f"run{k}"
        launch(folder, how, 0, args)
        trace, steps = policy_steps(folder)  # the trace read once, for both
        runs.append({"mean_step_s": figures(folder, trace, steps)["mean_step_s"],
                     "load_average": [load, os.getloadavg()[0]], **within_run(steps)})  # fmt: skip
    means = [r["mean_step_s"] for r in runs]
    center = statistics.fmean(means)
    return {
        "recommended": {k: plan["recommended"][k] for k in ("policy", "split", "predicted_step_s")},
        "mean_step_s": stats(means),
        "cv": statistics.stdev(means) / center,
        "deviation_from_mean": stats(abs(m - center) / center for m in means),
        "pair_difference": stats(abs(b - a) / a for a, b in zip(means, means[1:])),
        "prediction_error": {
            "per_run": stats(abs(predicted_s - m) / m for m in means),
            "against_mean_of_runs": (predicted_s - center) / center,
        },
        "runs": runs,
    }


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=count, default=8, help="runs of the one plan (default 8)")
    add_job_options(parser)  # own_job.py's, so a new one (--cost-error) reaches profile_and_plan here too
    args = parser.parse_args()
    if args.runs < 2:
        parser.error("--runs: at least 2 (a spread needs two runs)")
    with tempfile.TemporaryDirectory(prefix="run-spread-") as tmp:
        args.out = args.out or Path(tmp)
        result = measure(args)
    print(json.dumps({"command": " ".join(sys.argv), "config": {k: str(v) for k, v in vars(args).items()},
                      **result, "cpu_count": os.cpu_count()}, indent=2))  # fmt: skip


if __name__ == "__main__":
    entry(main, "run_spread")
