"""Calibration on the shipped device profiles: does the chosen cost curve predict unseen batch sizes?

    python benchmarks/calibration_profiles.py [--json] [--train 3] [--steps 200] [--sigma 0.05] [--seed 0]

For every device/workload curve of the Gavel profiles (``hetsim.model.costs.device_profiles()``:
15 curves, 4 or 5 batch sizes each) and every choice of ``--train`` (3) of its sizes, a
one-worker scenario with that ``profile`` cost and lognormal noise is simulated for ``--steps``
steps at each of those sizes (the runs pooled as one trace, steps kept apart), then calibrated
twice, ``model = "auto"`` and ``model = "affine"``. Each fitted curve predicts the sizes left
out (with three: two of five, or one of four); the error is ``predicted / profile - 1`` against the
noise-free profile. Prints the median and worst absolute error of both over all predictions,
split into interpolation (inside the three sizes' range) and extrapolation, and how often auto
chose each model; ``--json`` prints ``{"auto": {...}, "affine": {...}, "chosen": {...},
"curves": {...}, "settings": {...}}``.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
from bench_common import Parser, checked_seed, count, entry

from hetsim.calibrate import calibrate
from hetsim.engines import VectorEngine
from hetsim.model.costs import Affine, Profile, device_profiles
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario

FITS = {"auto": None, "affine": Affine}  # --model auto and affine


def trace_at(device: str, workload: str, batch: int, steps: int, sigma: float, seed: int) -> pd.DataFrame:
    """``steps`` steps of one worker with the profile's cost at local batch ``batch``."""
    raw = {
        "name": "profile",
        "seed": seed,
        "workload": {"global_batch": batch, "dataset_size": batch * steps, "epochs": 1},
        "network": {"kind": "constant", "time_s": 0.0},
        "workers": [
            {
                "cost": {"model": "profile", "device": device, "workload": workload},
                "noise": {"dist": "lognormal", "sigma": sigma},
            }
        ],
        "policy": {"name": "equal"},
    }
    return simulate(build_scenario(raw), engine=VectorEngine()).to_frame()


def pooled(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Several runs as one trace: each run's steps and epochs after the previous run's."""
    out = []
    for k, frame in enumerate(frames):
        frame = frame.copy()
        frame["step"] += k * len(frame)
        frame["epoch"] = k
        out.append(frame)
    return pd.concat(out, ignore_index=True)


def curve_errors(device: str, workload: str, train_sizes: int, steps: int, sigma: float, seed: int) -> dict[str, Any]:
    """Errors at the held-out sizes of every choice of ``train_sizes`` sizes, for auto and affine."""
    batches = [int(b) for b in device_profiles()[device, workload][0]]
    truth = Profile(device, workload)
    runs = {b: trace_at(device, workload, b, steps, sigma, seed + i) for i, b in enumerate(batches)}
    out: dict[str, Any] = {"auto": [], "affine": [], "inside": [], "chosen": []}
    for train in itertools.combinations(batches, train_sizes):
        frame = pooled([runs[b] for b in train])
        held = np.array([b for b in batches if b not in train], dtype=float)
        expected = truth.time_s(held)
        for model in ("auto", "affine"):
            fit = calibrate(frame, model=FITS[model]).workers[0]
            out[model].extend((fit.cost_curve().time_s(held) / expected - 1.0).tolist())
            if model == "auto":
                out["chosen"].append(fit.model)
        out["inside"].extend(((held > min(train)) & (held < max(train))).tolist())
    return out


def summary(errors: np.ndarray) -> dict[str, float]:
    size = np.abs(errors)
    return {"median": float(np.median(size)), "worst": float(size.max()), "n": int(size.size)}


def run(train_sizes: int, steps: int, sigma: float, seed: int) -> dict[str, Any]:
    per_curve = {
        f"{device}/{workload}": curve_errors(device, workload, train_sizes, steps, sigma, seed)
        for device, workload in sorted(device_profiles())
        if device_profiles()[device, workload][0].size > train_sizes
    }
    result: dict[str, Any] = {
        "settings": {"train_sizes": train_sizes, "steps_per_size": steps, "sigma": sigma, "seed": seed}
    }
    inside = np.concatenate([np.array(c["inside"], dtype=bool) for c in per_curve.values()])
    for model in ("auto", "affine"):
        errors = np.concatenate([np.array(c[model]) for c in per_curve.values()])
        result[model] = {
            **summary(errors),
            "interpolation": summary(errors[inside]),
            "extrapolation": summary(errors[~inside]),
        }
    result["chosen"] = dict(Counter(m for c in per_curve.values() for m in c["chosen"]))
    result["curves"] = {
        name: {
            "auto_median": float(np.median(np.abs(c["auto"]))),
            "affine_median": float(np.median(np.abs(c["affine"]))),
            "chosen": dict(Counter(c["chosen"])),
        }
        for name, c in per_curve.items()
    }
    return result


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--train", type=count, default=3, help="batch sizes calibrated on (the others predicted)")
    parser.add_argument("--steps", type=count, default=200, help="steps simulated at each batch size")
    parser.add_argument("--sigma", type=float, default=0.05, help="lognormal noise sigma")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    checked_seed("calibration_profiles", args.seed)
    result = run(args.train, args.steps, args.sigma, args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for model in ("auto", "affine"):
        r = result[model]
        print(
            f"{model:>6}: median |error| {r['median']:.1%}, worst {r['worst']:.1%} over {r['n']} predictions "
            f"(interpolation {r['interpolation']['median']:.1%} / {r['interpolation']['worst']:.1%}, "
            f"extrapolation {r['extrapolation']['median']:.1%} / {r['extrapolation']['worst']:.1%})"
        )
    print("auto chose: " + ", ".join(f"{k} {v}" for k, v in sorted(result["chosen"].items())))
    return 0


if __name__ == "__main__":
    entry(main, "calibration_profiles")
