"""Does ``goodput`` reach a target accuracy as soon as the best fixed global batch? Real runs:
issue 28's second target.

    python benchmarks/goodput_runs.py --seeds 3 --out runs/goodput-runs
    python benchmarks/goodput_runs.py --seeds 3 --out runs/goodput-runs -- --delay 1=0.02
    python benchmarks/goodput_runs.py --seeds 5 --out runs/goodput-fitted -- --delay 1=0.01 --efficiency EFF.toml

(the last: goodput told the efficiency that ``hetsim calibrate-efficiency`` fitted to a
``batch-sweep`` at 1x and 2x the base batch, instead of the run's own noise-scale estimate)

For each seed, ``python -m validation run`` of ``adaptive`` and ``goodput`` at the base global
batch ``B`` (goodput free to choose up to ``8B``), then ``adaptive`` alone at ``2B``, ``4B`` and
``8B``, each with the learning rate the square-root rule gives its batch (the rule goodput's
batches get in the trainer), every run with ``--target-accuracy`` and the options after ``--``
(by default rank 1 pays a fixed delay every step, a slow device's fixed cost that a larger batch
spreads over more samples). A seed's runs share its data split, shuffles and initial weights.

The time to the target is each run's own (``summary.json``'s ``time_to_target_s``: the step
time elapsed at the first held-out evaluation that reached the target: an epoch's end, or with
``-- --eval-every K`` after every K steps of an epoch too).

The best fixed batch is one batch of the ladder, chosen in hindsight over the seeds (as
``benchmarks/goodput.py`` chooses it in simulation): the lowest mean time, a run that missed
the target counting as never reaching it. Per seed: goodput's time against that batch's run of
the same seed, and against ``adaptive`` at ``B``. Also reported: against each seed's fastest
fixed run, the minimum of four noisy runs, which no single run matches on average. Prints one
JSON object with every run's time, the ratios per seed and their mean, median and p90 (a
goodput run that missed the target counts as never reaching it: it raises the median). A run
folder that already holds a finished run is reused.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import Parser, count, entry, out_path, stats, validation_run

from hetsim.core.files import finite

ROOT = Path(__file__).resolve().parent.parent
LADDER = (1, 2, 4, 8)


def run_once(out: Path, common: list[str], policies: str, batch: int, lr: float, extra: list[str]) -> dict[str, Any]:
    """One real run into ``out`` (reused when it finished before); its summary's policies by name."""
    validation_run(out, [*common, "--policies", policies, "--global-batch", str(batch), "--lr", f"{lr:.6g}", *extra],
                   ROOT)  # fmt: skip
    entries = json.loads((out / "summary.json").read_text(encoding="utf-8"))["policies"]
    return {e["policy"]: e for e in entries}


def one_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    common = ["--workload", args.workload, "--epochs", str(args.epochs), "--target-accuracy", str(args.target),
              "--seed", str(seed), "--noise-scale"]  # fmt: skip
    folder = args.out / f"seed-{seed}"
    base = run_once(folder / "base", common, "adaptive,goodput", args.base_batch, args.lr,
                    ["--max-batch", str(LADDER[-1] * args.base_batch), *args.extra])  # fmt: skip
    times = {f"adaptive@{args.base_batch}": base["adaptive"]["time_to_target_s"]}
    for k in LADDER[1:]:
        batch = k * args.base_batch
        got = run_once(folder / f"x{k}", common, "adaptive", batch, args.lr * math.sqrt(k), args.extra)
        times[f"adaptive@{batch}"] = got["adaptive"]["time_to_target_s"]
    fixed = {name: t for name, t in times.items() if t is not None}
    goodput = base["goodput"]["time_to_target_s"]
    best = min(fixed, key=lambda name: fixed[name]) if fixed else None
    row: dict[str, Any] = {"seed": seed, "goodput_s": goodput, "fixed_s": times, "fastest_fixed_run": best,
                           "goodput_final_batch": sum(base["goodput"].get("final_batches") or [])}  # fmt: skip
    if best is not None:
        row["vs_fastest_fixed_run"] = _ratio(goodput, fixed[best])
    if times[f"adaptive@{args.base_batch}"] is not None:
        row["vs_adaptive_base"] = _ratio(goodput, times[f"adaptive@{args.base_batch}"])
    return row


def _ratio(goodput_s: float | None, other_s: float) -> float:
    """goodput's time over another run's; a goodput run that missed the target never reached it."""
    return math.inf if goodput_s is None else goodput_s / other_s


def summary(ratios: list[float]) -> dict[str, Any] | None:
    """Mean, median and p90 of ``ratios``, a run that missed the target counted as never reaching
    it (infinite: None where a figure is; JSON has no infinity), and how many missed."""
    if not ratios:
        return None
    out = finite(stats(ratios))
    return {**out, "runs": len(ratios), "missed_target": sum(not math.isfinite(r) for r in ratios)}


def best_batch(rows: list[dict[str, Any]]) -> str:
    """The fixed batch of the lowest mean time to the target over the seeds (a run that missed
    it counts as never reaching it; if every batch missed once, the lowest median)."""
    names = list(rows[0]["fixed_s"])
    times = {n: [math.inf if r["fixed_s"][n] is None else r["fixed_s"][n] for r in rows] for n in names}
    return min(names, key=lambda n: (float(np.mean(times[n])), float(np.median(times[n]))))


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="digits-cnn")
    parser.add_argument("--seeds", type=count, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--base-batch", type=count, default=16)
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate at the base batch")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--epochs", type=count, default=8)
    parser.add_argument("--out", type=out_path, required=True, help="folder for the runs (reused: a rerun resumes)")
    parser.add_argument("extra", nargs="*", help="more options for validation run (after --)")
    args = parser.parse_args()
    args.extra = args.extra or ["--delay", "1=0.01"]
    rows = [one_seed(args, seed) for seed in range(args.first_seed, args.first_seed + args.seeds)]
    best = best_batch(rows)
    for r in rows:
        if r["fixed_s"][best] is not None:
            r["vs_best_fixed"] = _ratio(r["goodput_s"], r["fixed_s"][best])
    versus_best = [r["vs_best_fixed"] for r in rows if "vs_best_fixed" in r]
    versus_fastest = [r["vs_fastest_fixed_run"] for r in rows if "vs_fastest_fixed_run" in r]
    versus_adaptive = [r["vs_adaptive_base"] for r in rows if "vs_adaptive_base" in r]
    result = {
        "command": " ".join(sys.argv), "workload": args.workload, "base_batch": args.base_batch,
        "target_accuracy": args.target, "options": args.extra, "seeds": [finite(r) for r in rows],
        "best_fixed": best,
        "goodput_over_best_fixed": summary(versus_best),
        "goodput_over_fastest_fixed_run": summary(versus_fastest),
        "goodput_over_adaptive_base": summary(versus_adaptive),
        "met": {"within_5pct_of_best_fixed": bool(versus_best) and float(np.median(versus_best)) <= 1.05,
                "no_later_than_adaptive_base": bool(versus_adaptive) and float(np.median(versus_adaptive)) <= 1.0},
    }  # fmt: skip
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    entry(main, "goodput_runs")
