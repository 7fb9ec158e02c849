"""Predicted vs measured time to a target accuracy in real runs, repeated.

    python benchmarks/time_to_target_runs.py --workload digits-cnn --repeats 5 --out runs/ttt-digits
    python benchmarks/time_to_target_runs.py --workload transformer --repeats 3 --epochs 3 --target 0.285 \\
        --out runs/ttt-transformer -- --per-sample-delay 1=0.002

Each repeat is one ``python -m validation run --noise-scale --target-accuracy A`` (seed = the
repeat's index, so shuffles and initial weights differ) of every policy, then
``validation.time_to_target.predict_time_to_target`` on its probe's calibration: each policy's
time to the accuracy predicted from the calibrated step times plus the run's measured noise
scale, beside the measured one. A repeat whose folder already holds a finished run is not run
again, and an unfinished one is run again (a rerun resumes). Prints one JSON object: per
repeat, every policy's measured and predicted seconds and error; per repeat, the median |error|
over its policies; pooled over all predictions, the mean, median and 90th percentile of |error|.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import Parser, count, entry, out_path, stats, validation_run

from validation.compare import calibrate_run
from validation.run_folder import load_run
from validation.time_to_target import predict_time_to_target

ROOT = Path(__file__).resolve().parent.parent
POLICIES = "equal,dynamic,dynamic-enhanced,adaptive,goodput"


def run_once(args: argparse.Namespace, seed: int, out: Path) -> None:
    """One real run into ``out`` (skipped when ``out`` holds a finished one)."""
    validation_run(out, ["--workload", args.workload, "--epochs", str(args.epochs), "--policies", args.policies,
                         "--noise-scale", "--target-accuracy", str(args.target), "--seed", str(seed), *args.extra],
                   ROOT)  # fmt: skip


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="digits-cnn")
    parser.add_argument("--repeats", type=count, default=5)
    parser.add_argument("--epochs", type=count, default=8)
    parser.add_argument("--target", type=float, default=0.8, help="held-out accuracy to reach")
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--out", type=out_path, required=True, help="folder for the runs (reused: a rerun resumes)")
    parser.add_argument("extra", nargs="*", help="more options for validation run (after --)")
    args = parser.parse_args()
    repeats: list[dict[str, Any]] = []
    pooled: list[float] = []
    for seed in range(args.repeats):
        out = args.out / f"seed-{seed}"
        run_once(args, seed, out)
        run = load_run(out)
        targets = predict_time_to_target(run, calibrate_run(run))
        rows = {t.policy: {"measured_s": t.measured_s, "predicted_s": t.predicted_s, "error": t.error} for t in targets}
        errors = [t.error for t in targets if t.error is not None]
        pooled += errors
        repeats.append({"seed": seed, "policies": rows, "median_abs_error": float(np.median(np.abs(errors)))
                        if errors else None, "missing": [t.policy for t in targets if t.error is None]})  # fmt: skip
    result = {
        "command": " ".join(sys.argv),
        "workload": args.workload,
        "repeats": repeats,
        "per_repeat_median": [r["median_abs_error"] for r in repeats],
        "pooled_abs_error": stats(abs(e) for e in pooled) if pooled else None,
        "predictions": len(pooled),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    entry(main, "time_to_target_runs")
