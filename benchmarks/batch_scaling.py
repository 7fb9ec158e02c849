"""Steps to a target accuracy at 2x, 4x and 8x the base global batch, predicted from runs at the
base batch (and 2x), against real runs: issue 28's benchmark.

    python benchmarks/batch_scaling.py --quick --jobs 2 --seeds 8 --out runs/batch-scaling
    python benchmarks/batch_scaling.py --reuse runs/bs-digits runs/bs-transformer   # sweeps already run

For each workload (digits-cnn, transformer) one ``python -m validation batch-sweep --batches
1,2,4,8 --seeds N`` (digits-cnn at ``--lr 0.03``: at the sweep's default 0.05 its 8x runs
oscillate; ``--lr WORKLOAD=LR`` to choose; a folder that already holds results.json is reused).
``--reuse`` takes sweeps already run instead: each a batch-sweep folder or a folder of WORKLOAD/
sweeps, several sets of seeds of one workload pooled. Two measures, each per model:

* ``per_run``: every run that reached the target at 2x, 4x or 8x is one prediction, each model
  fitted on the other seeds' runs at the base batch (and 2x) alone (leave-one-seed-out, so a
  seed's own noise never predicts itself). One run is one draw of the seed-to-seed scatter, so
  these errors have a floor: ``same_batch``, not a model but the median of the other seeds'
  measured steps at the run's own batch.
* ``typical``: what the models predict, expected steps (the exponential of the mean log steps,
  which the efficiency fit models), against the seeds' own: per set of seeds (one sweep folder)
  and batch, the models fitted on that set's base (and 2x) runs against the geometric mean of
  its runs at the batch, with that mean's standard error (the sd of log steps over the root of the
  seeds); a batch where a seed missed the target has no such mean and is left out (listed).

The models: ``plain``, today's model, one noise scale (the base runs' median whole-run estimate);
``schedule``, the measured noise scale over progress (its shape over the base runs), one run's
information, no other batch; ``fit_1x_2x``, ``hetsim.model.efficiency_fit.fit`` on the base and 2x
runs (target steps and noise scale free; its 2x predictions are of a batch it was fitted on,
reported apart: ``extrapolated_4x_8x``).

Prints one JSON object: per measure, model and workload, every prediction's relative error
``(predicted - measured) / measured``, and the mean, median and p90 of ``|error|``, overall and
over the extrapolations (4x, 8x) alone, and pooled over the workloads.
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


def typical(sweep: Sweep) -> dict[str, list[dict[str, Any]]]:
    """Every model fitted on all of ``sweep``'s base (and 2x) runs against the geometric mean of its
    seeds' steps at 2x, 4x and 8x, where every seed reached the target there."""
    fitted = models(sweep)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in fitted}
    for k in MULTIPLES[1:]:
        runs = [p for p in sweep.points if p.batch == k * sweep.base_batch]
        if len(runs) < 2 or any(p.steps is None for p in runs):
            continue
        logs = np.log([float(p.steps or 0) for p in runs])
        measured = float(np.exp(logs.mean()))
        for name, eff in fitted.items():
            predicted = eff.steps_to_target(k * sweep.base_batch)
            out[name].append({"batch": k * sweep.base_batch, "multiple": k, "seeds": len(runs),
                              "measured": measured, "measured_log_se": float(logs.std(ddof=1) / math.sqrt(len(runs))),
                              "predicted": predicted, "error": (predicted - measured) / measured})  # fmt: skip
    return out


def summarised(rows_by_model: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each model's rows with their error statistics, overall and at 4x and 8x alone."""
    return {name: {"predictions": rows, "all": error_stats([r["error"] for r in rows]),
                   "extrapolated_4x_8x": error_stats([r["error"] for r in rows if r["multiple"] >= 4])}
            for name, rows in rows_by_model.items()}  # fmt: skip


def sweep_folder(workload: str, args: argparse.Namespace) -> Path:
    """``args.out/WORKLOAD``, its sweep run first unless it holds one."""
    folder = args.out / workload
    if not (folder / "results.json").exists():
        command = [sys.executable, "-m", "validation", "batch-sweep", "--workload", workload, "--batches",
                   ",".join(map(str, MULTIPLES)), "--seeds", str(args.seeds), "--first-seed", str(args.first_seed),
                   "--jobs", str(args.jobs), "--out", str(folder)]  # fmt: skip
        command += ["--lr", str(args.lr[workload])] if workload in args.lr else []
        command += ["--quick"] if args.quick else []
        subprocess.run(command, check=True)
    return folder


def reused_sets(folders: list[Path]) -> dict[str, list[Path]]:
    """The sweep folders under ``folders`` (each a sweep or a folder of sweeps), by workload."""
    found: dict[str, list[Path]] = {}
    for folder in folders:
        inside = sorted(f.parent for f in folder.glob("*/results.json"))
        sweeps = [folder] if (folder / "results.json").exists() else inside
        if not sweeps:
            sys.exit(f"batch_scaling: error: --reuse: no batch-sweep results under {folder}")
        for sweep in sweeps:
            found.setdefault(load_sweeps([sweep]).workload, []).append(sweep)
    return found


def learning_rates(text: str) -> dict[str, float]:
    """``--lr``'s WORKLOAD=LR,... as a mapping."""
    try:
        pairs = [item.split("=", 1) for item in text.split(",") if item]
        return {name: float(value) for name, value in pairs}
    except ValueError:
        sys.exit(f"batch_scaling: error: --lr: expected WORKLOAD=LR,..., got {text!r}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/batch-scaling"), help="sweeps' folder")
    parser.add_argument("--reuse", type=Path, nargs="+", default=None,
                        help="sweeps already run: batch-sweep folders, or folders of WORKLOAD/ sweeps")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the sweeps' --quick")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--jobs", type=int, default=1, help="the sweeps' --jobs (runs at once)")
    parser.add_argument("--seeds", type=int, default=3, help="the sweeps' --seeds")
    parser.add_argument("--first-seed", type=int, default=0, help="the sweeps' --first-seed")
    parser.add_argument("--lr", type=learning_rates, default="digits-cnn=0.03", metavar="WORKLOAD=LR,...",
                        help="the sweeps' --lr per workload (default digits-cnn=0.03)")  # fmt: skip
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.reuse:
        sets = reused_sets(args.reuse)
    else:
        sets = {workload: [sweep_folder(workload, args)] for workload in args.workloads.split(",")}
    result: dict[str, Any] = {"command": " ".join(sys.argv), "per_run": {}, "typical": {}, "not_reached": {},
                              "sets": {w: [str(f) for f in fs] for w, fs in sets.items()}}  # fmt: skip
    pooled: dict[str, dict[str, list[dict[str, Any]]]] = {"per_run": {}, "typical": {}}
    for workload, folders in sets.items():
        sweep = load_sweeps(folders)
        result["not_reached"][workload] = [f"{p.batch}/{p.seed}" for p in sweep.points if p.steps is None]
        found = {"per_run": predictions(sweep), "typical": {}}
        for folder in folders:
            for name, rows in typical(load_sweeps([folder])).items():
                found["typical"].setdefault(name, []).extend({"set": str(folder), **r} for r in rows)
        for measure, by_model in found.items():
            result[measure][workload] = summarised(by_model)
            for name, rows in by_model.items():
                pooled[measure].setdefault(name, []).extend(rows)
    for measure, by_model in pooled.items():
        result[measure]["pooled"] = {name: {k: v for k, v in entry.items() if k != "predictions"}
                                     for name, entry in summarised(by_model).items()}  # fmt: skip
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
