"""Calibration over seeds: are the fitted costs unbiased and their standard errors honest?

    python benchmarks/calibration_coverage.py [--seeds 30] [--steps 500] [--quick] [--json]

Five kinds of trace, each with affine and with hinge costs, each calibrated (``--model`` the
truth's) over ``--seeds`` seeds:

* ``backup-fixed``: ``backup`` (one backup worker) on 4 workers (one 1.3x slower), lognormal
  sigma 0.2; a fixed split per run, four runs at global batches 64..256 pooled (a probe);
* ``backup-random``: 3 workers, each step's batch drawn per worker from {50, 100, 150} (and 200
  for hinge costs), the slowest of each step cut at the second finish (the issue's reproducer;
  built here, since no policy draws random splits);
* ``ksync``: ``ksync`` with k = 2 of the same 4 workers as backup-fixed, pooled the same way;
* ``adaptive-idle``: ``adaptive`` on 4 workers, one of them far too slow to help (left idle);
* ``equal-shared``: ``equal`` on 3 workers whose noise has a shared factor that persists
  (own sigma 0.08, shared sigma 0.06 with persistence 0.5), pooled over four global batches.

Per fitted parameter: the truth, the mean estimate, the spread over seeds (sd), the mean
reported standard error (se), ``bias_se`` = (mean - truth) / se, ``z_mean`` = (mean - truth)
/ (sd / sqrt(seeds)), and ``se_ratio`` = se / sd (1 is honest; with 30 seeds sd itself is known
to about 13%). Per case: ``pooled_z_sd``, the spread of (estimate - truth) / its own se over all
parameters and seeds (1 is honest, known to a few %), and the reported shared noise (its
truth: 0 except equal-shared, whose truth is the correlation tau^2 / sigma^2). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np
import pandas as pd

from hetsim.calibrate import calibrate
from hetsim.config import load_scenario
from hetsim.simulate import simulate

AFFINE = ({"overhead_s": 0.010, "per_sample_s": 0.0010}, {"overhead_s": 0.006, "per_sample_s": 0.0014},
          {"overhead_s": 0.020, "per_sample_s": 0.0008}, {"overhead_s": 0.013, "per_sample_s": 0.0013})  # fmt: skip
HINGE = tuple({"floor_s": a["overhead_s"] + 26 * a["per_sample_s"], **a} for a in AFFINE)  # bent at 26 samples
GLOBAL_BATCHES = (64, 128, 192, 256)  # 16, 32, 48, 64 samples a worker on 4 workers
RANDOM_AFFINE = ({"overhead_s": 0.005, "per_sample_s": 0.001}, {"overhead_s": 0.005, "per_sample_s": 0.001},
                 {"overhead_s": 0.01, "per_sample_s": 0.002})  # fmt: skip
RANDOM_HINGE = tuple({"floor_s": 0.012 + 60 * c["per_sample_s"], **c} for c in RANDOM_AFFINE)


def run_seed(seed: int, k: int) -> int:
    """The seed of run ``k`` of replication ``seed``, spawned so that no two runs share a stream."""
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0])


def _cost(entry: dict[str, float]) -> dict[str, Any]:
    if "floor_s" in entry:
        return {"cost": {"model": "hinge", **entry}}
    return dict(entry)


def _time(entry: dict[str, float], b: np.ndarray) -> np.ndarray:
    line = entry["overhead_s"] + entry["per_sample_s"] * b
    return np.maximum(entry.get("floor_s", 0.0), line)


def _pooled(
    costs: tuple[dict[str, float], ...], policy: dict[str, Any], seed: int, steps: int, slow: float = 1.0
) -> pd.DataFrame:
    """Runs of ``policy`` at each global batch, steps numbered on (one trace of several splits)."""
    frames, offset = [], 0
    for k, batch in enumerate(GLOBAL_BATCHES):
        workers = [{**_cost(c), "noise": {"dist": "lognormal", "sigma": 0.2}} for c in costs]
        if slow != 1.0:
            workers[-1] = {**_cost({key: v * slow for key, v in costs[-1].items()}), "noise": workers[-1]["noise"]}
        raw = {
            "name": "coverage", "seed": run_seed(seed, k),
            "workload": {"global_batch": batch, "dataset_size": batch * steps, "epochs": 1},
            "network": {"kind": "constant", "time_s": 0.0}, "workers": workers, "policy": policy,
        }  # fmt: skip
        frame = simulate(load_scenario(raw)).to_frame()
        frame["step"] += offset
        offset = int(frame["step"].max()) + 1
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def random_backup(costs: tuple[dict[str, float], ...], seed: int, steps: int) -> pd.DataFrame:
    """Each step, each worker's batch drawn from the sizes; the slowest cut at the second finish."""
    rng = np.random.default_rng(run_seed(seed, 0))
    sizes = [50, 100, 150] + ([200] if "floor_s" in costs[0] else [])
    n, sigma = len(costs), 0.3
    b = rng.choice(sizes, size=(steps, n)).astype(float)
    mean = np.stack([_time(c, b[:, i]) for i, c in enumerate(costs)], axis=1)
    y = mean * np.exp(sigma * rng.standard_normal((steps, n)) - sigma**2 / 2)
    second = np.sort(y, axis=1)[:, n - 2 : n - 1]
    kept = y <= second
    return pd.DataFrame({
        "step": np.repeat(np.arange(steps), n), "worker": np.tile(np.arange(n), steps),
        "local_batch": b.ravel().astype(int), "compute_s": np.where(kept, y, second).ravel(), "included": kept.ravel(),
    })  # fmt: skip


def _idle(cost: dict[str, float]) -> dict[str, float]:
    return {key: v * 20 for key, v in cost.items()}


def adaptive_idle(costs: tuple[dict[str, float], ...], seed: int, steps: int) -> pd.DataFrame:
    workers = [{**_cost(c), "noise": {"dist": "lognormal", "sigma": 0.15}} for c in (*costs[:3], _idle(costs[-1]))]
    raw = {
        "name": "coverage", "seed": run_seed(seed, 0),
        "workload": {"global_batch": 96, "dataset_size": 96 * steps, "epochs": 4},
        "network": {"kind": "constant", "time_s": 0.0}, "workers": workers, "policy": {"name": "adaptive"},
    }  # fmt: skip
    return simulate(load_scenario(raw)).to_frame()


SHARED = {"group": "host", "dist": "lognormal", "sigma": 0.06, "persistence": 0.5}  # own sigma 0.08 beside it


def equal_shared(costs: tuple[dict[str, float], ...], seed: int, steps: int) -> pd.DataFrame:
    frames, offset = [], 0
    for k, batch in enumerate(b * 3 // 4 for b in GLOBAL_BATCHES):
        shared = dict(SHARED)
        workers = [{**_cost(c), "noise": {"dist": "lognormal", "sigma": 0.08}, "shared_noise": shared}
                   for c in costs[:3]]  # fmt: skip
        raw = {
            "name": "coverage", "seed": run_seed(seed, k),
            "workload": {"global_batch": batch, "dataset_size": batch * steps, "epochs": 1},
            "network": {"kind": "constant", "time_s": 0.0}, "workers": workers, "policy": {"name": "equal"},
        }  # fmt: skip
        frame = simulate(load_scenario(raw)).to_frame()
        frame["step"] += offset
        offset = int(frame["step"].max()) + 1
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def cases(hinge: bool) -> dict[str, tuple[Any, tuple[dict[str, float], ...], float]]:
    """Name -> (trace of (seed, steps), the fitted workers' true costs, the true shared correlation)."""
    fixed = HINGE if hinge else AFFINE
    slow = ({k: v * 1.3 for k, v in fixed[-1].items()},)
    rand = RANDOM_HINGE if hinge else RANDOM_AFFINE
    shared = 0.06**2 / (0.08**2 + 0.06**2)
    return {
        "backup-fixed": (lambda s, n: _pooled(fixed, {"name": "backup"}, s, n, slow=1.3), fixed[:3] + slow, 0.0),
        "backup-random": (lambda s, n: random_backup(rand, s, 3 * n), rand, 0.0),
        "ksync": (lambda s, n: _pooled(fixed, {"name": "ksync", "k": 2}, s, n, slow=1.3), fixed[:3] + slow, 0.0),
        "adaptive-idle": (lambda s, n: adaptive_idle(fixed, s, n), (*fixed[:3], _idle(fixed[-1])), 0.0),
        "equal-shared": (lambda s, n: equal_shared(fixed, s, n), fixed[:3], shared),
    }


def one_case(make: Any, truth: tuple[dict[str, float], ...], shared_truth: float, model: str,
             seeds: int, steps: int) -> dict[str, Any]:  # fmt: skip
    estimates: dict[str, list[float]] = {}
    errors: dict[str, list[float]] = {}
    shared, idle = [], []
    for seed in range(seeds):
        cal = calibrate(make(seed, steps), model=model)
        shared.append(cal.noise.shared or 0.0)
        idle.append([i.worker for i in cal.idle])
        for fit in cal.workers:
            params = fit.cost_curve().params()
            for key, value in params.items():
                name = f"w{fit.worker}.{key}"
                estimates.setdefault(name, []).append(value)
                errors.setdefault(name, []).append(fit.se.get(key) or math.nan)
    rows, z_all = {}, []
    for name, values in estimates.items():
        worker, key = name[1:].split(".")
        true = truth[int(worker)][key]
        est, se = np.array(values), np.array(errors[name])
        sd = float(est.std(ddof=1))
        mean_se = float(np.nanmean(se))
        z_all.extend(((est - true) / se).tolist())
        rows[name] = {
            "truth": true, "mean": float(est.mean()), "sd": sd, "se": mean_se,
            "bias_se": float((est.mean() - true) / mean_se),
            "z_mean": float((est.mean() - true) / (sd / math.sqrt(est.size))),
            "se_ratio": mean_se / sd,
        }  # fmt: skip
    z = np.array(z_all)
    return {
        "params": rows,
        "pooled_z_sd": float(np.nanstd(z, ddof=1)),
        "worst_bias_se": max(abs(r["bias_se"]) for r in rows.values()),
        "se_ratio_range": [min(r["se_ratio"] for r in rows.values()), max(r["se_ratio"] for r in rows.values())],
        "shared": {"truth": shared_truth, "mean": float(np.mean(shared)), "max": float(np.max(shared))},
        "idle_workers": sorted({w for ws in idle for w in ws}),
    }


def run(seeds: int, steps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"settings": {"seeds": seeds, "steps": steps}, "cases": {}}
    for model in ("affine", "hinge"):
        for name, (make, truth, shared) in cases(model == "hinge").items():
            out["cases"][f"{name}/{model}"] = one_case(make, truth, shared, model, seeds, steps)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=500, help="steps per run (per global batch where pooled)")
    parser.add_argument("--quick", action="store_true", help="5 seeds of 200 steps (a smoke run, not the figure)")
    parser.add_argument("--json", action="store_true", help="the full JSON (default: one summary line per case)")
    args = parser.parse_args()
    result = run(5, 200) if args.quick else run(args.seeds, args.steps)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    summary = {
        name: {k: case[k] for k in ("worst_bias_se", "se_ratio_range", "pooled_z_sd", "shared", "idle_workers")}
        for name, case in result["cases"].items()
    }
    print(json.dumps({"settings": result["settings"], "cases": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
