"""Steps to a target accuracy at 2x, 4x and 8x the base global batch, predicted from runs at the
base batch (and 2x), against real runs: issue 28's benchmark.

    python benchmarks/batch_scaling.py --quick --jobs 2 --out runs/batch-scaling
    python benchmarks/batch_scaling.py --reuse runs/batch-scaling   # the sweeps already there

For each workload (digits-cnn, transformer) one ``python -m validation batch-sweep --batches
1,2,4,8 --seeds 3`` (or ``--seeds``; a folder that already holds results.json is reused). Every
run that reached the target at 2x, 4x or 8x is one prediction per model, each model fitted on
the other seeds' runs at the base batch (and 2x) alone (leave-one-seed-out, so a seed's own
noise never predicts itself):

* ``plain``: today's model, one noise scale (the base runs' median whole-run estimate);
* ``schedule``: the measured noise scale over progress (its shape over the base runs), one run's
  information, no other batch;
* ``fit_1x_2x``: ``hetsim.model.efficiency_fit.fit`` on the base and 2x runs (target steps and noise
  scale free; its 2x predictions are of a batch it was fitted on, reported apart);
* ``same_batch``: not a model but the noise floor, the median of the other seeds' measured steps
  at the run's own batch.

Prints one JSON object: per model and workload, every prediction's relative error
``(predicted - measured) / measured``, and the mean, median and p90 of ``|error|``, overall and
over the extrapolations (4x, 8x) alone.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import stats

from hetsim.calibrate.efficiency_runs import Sweep, fitted_model, load_sweeps, plain_model, reached
from hetsim.model.efficiency import Efficiency

WORKLOADS = ("digits-cnn", "transformer")
MULTIPLES = (1, 2, 4, 8)


def error_stats(errors: list[float]) -> dict[str, float | int]:
    """How many ``errors``, and the mean, median and p90 of their absolute values (nan when none)."""
    if not errors:
        return {"n": 0, "mean": math.nan, "median": math.nan, "p90": math.nan}
    return {"n": len(errors), **stats(abs(e) for e in errors)}


def models(train: Sweep) -> dict[str, Efficiency]:
    """The three models fitted on ``train`` (runs of the other seeds)."""
    base = train.base_batch
    return {
        "plain": plain_model(train),
        "schedule": fitted_model(train, [base], schedule=True).efficiency,
        "fit_1x_2x": fitted_model(train, [base, 2 * base], exponent=False).efficiency,
    }


def predictions(sweep: Sweep) -> dict[str, list[dict[str, Any]]]:
    """Every model's prediction of every run at 2x, 4x, 8x, leaving the run's seed out of the fit;
    and the noise floor, ``same_batch``: the median of the other seeds' steps at the run's own batch
    (what no model of the batch can beat, one run being one draw of the seed-to-seed scatter)."""
    out: dict[str, list[dict[str, Any]]] = {"plain": [], "schedule": [], "fit_1x_2x": [], "same_batch": []}
    for seed in sorted({p.seed for p in sweep.points}):
        train = replace(sweep, points=tuple(p for p in sweep.points if p.seed != seed))
        fitted = models(train)
        for point in reached(sweep, [k * sweep.base_batch for k in MULTIPLES[1:]]):
            if point.seed != seed:
                continue
            measured = float(point.steps or 0)
            guesses = {name: eff.steps_to_target(point.batch) for name, eff in fitted.items()}
            others = [float(p.steps or 0) for p in reached(train, [point.batch])]
            if others:
                guesses["same_batch"] = float(np.median(others))
            for name, predicted in guesses.items():
                out[name].append({"batch": point.batch, "multiple": point.batch // sweep.base_batch, "seed": seed,
                                  "measured": measured, "predicted": predicted,
                                  "error": (predicted - measured) / measured})  # fmt: skip
    return out


def sweep_folder(workload: str, args: argparse.Namespace) -> Path:
    """``args.out/WORKLOAD``, its sweep run first unless it holds one."""
    folder = args.out / workload
    if not (folder / "results.json").exists():
        command = [sys.executable, "-m", "validation", "batch-sweep", "--workload", workload, "--batches",
                   ",".join(map(str, MULTIPLES)), "--seeds", str(args.seeds), "--jobs", str(args.jobs),
                   "--out", str(folder)]  # fmt: skip
        command += ["--quick"] if args.quick else []
        subprocess.run(command, check=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/batch-scaling"), help="sweeps' folder")
    parser.add_argument("--reuse", type=Path, default=None, help="a folder of sweeps already run (WORKLOAD/)")
    parser.add_argument("--quick", action="store_true", help="the sweeps' --quick")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--jobs", type=int, default=1, help="the sweeps' --jobs (runs at once)")
    parser.add_argument("--seeds", type=int, default=3, help="the sweeps' --seeds")
    args = parser.parse_args()
    result: dict[str, Any] = {"models": {}}
    pooled: dict[str, list[dict[str, Any]]] = {}
    for workload in args.workloads.split(","):
        folder = (args.reuse / workload) if args.reuse else sweep_folder(workload, args)
        sweep = load_sweeps([folder])
        unreached = [f"{p.batch}/{p.seed}" for p in sweep.points if p.steps is None]
        for name, rows in predictions(sweep).items():
            entry = result["models"].setdefault(name, {})
            far = [r["error"] for r in rows if r["multiple"] >= 4]
            entry[workload] = {"predictions": rows, "all": error_stats([r["error"] for r in rows]),
                               "extrapolated_4x_8x": error_stats(far)}  # fmt: skip
            pooled.setdefault(name, []).extend(rows)
        result.setdefault("not_reached", {})[workload] = unreached
    result["pooled"] = {name: {"all": error_stats([r["error"] for r in rows]),
                               "extrapolated_4x_8x": error_stats([r["error"] for r in rows if r["multiple"] >= 4])}
                        for name, rows in pooled.items()}  # fmt: skip
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
