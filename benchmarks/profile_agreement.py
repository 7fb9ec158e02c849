"""How far ``python -m validation profile`` can be trusted: do two profiles of the same ranks
agree, and does a profile predict the batch sizes it did not measure? Prints JSON.

Each repetition runs three profiles of the same ranks, one after another, as a user would
(``python -m validation profile`` in a subprocess):

* A and B, the same command: **agreement** is, over every rank and every batch either measured,
  ``|A(b) - B(b)| / B(b)``, each profile's ``table`` cost (hetsim's ``Table``, as the scenario
  holds it) against the other's, and its median over those batch sizes;
* H, with the hidden ``--batches`` option: the same ranks measure, with the same warm-up,
  repeats and budget, a fixed set of *held-out* batch sizes, the geometric midpoints of A's
  neighbouring grid points that no rank of A measured; **prediction** is, over every rank and
  held-out size, ``|A(b) - H(b)| / H(b)``, A's table against H's measured median (times H's
  rank's mean over median, as a table is read), and its median.

Over the repetitions: mean, median and 90th percentile of each repetition's median (and of its
90th percentile over batch sizes). The load average before and after is recorded: other work on
the machine changes step times between profiles, which is part of what is measured.

    .venv/bin/python benchmarks/profile_agreement.py [--repetitions 3] [--budget-s 10]
        [--workload digits-cnn] [--devices cpu,cpu] [--max-batch 64] [--threads 1,1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import Parser, count, entry, stats

from hetsim.model.costs import Table

ROOT = Path(__file__).resolve().parents[1]
MAX_HELD_OUT = 8


def profile(out: Path, args: argparse.Namespace, batches: list[int] | None = None) -> dict[str, Any]:
    """One ``validation profile`` run: each rank's table cost and measured curve."""
    command = [sys.executable, "-m", "validation", "profile", "--workload", args.workload, "--devices", args.devices,
               "--budget-s", str(args.budget_s), "--max-batch", args.max_batch, "--seed", str(args.seed),
               "--out", str(out)]  # fmt: skip
    if args.threads:
        command += ["--threads", args.threads]
    if batches:
        command += ["--batches", ",".join(map(str, batches))]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"profile failed: {done.stderr.strip()}")
    scenario = tomllib.loads((out / "scenario.toml").read_text(encoding="utf-8"))
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    return {
        "tables": [Table(points=[tuple(p) for p in w["cost"]["points"]]) for w in scenario["workers"]],
        "medians": [{c["batch"]: c["median_s"] for c in r["curve"]} for r in meta["ranks"]],
        "scales": [float(r.get("mean_over_median", 1.0)) for r in meta["ranks"]],  # the table's median to mean
        "wall_s": meta["wall_s"],
    }


def agreement(a: dict[str, Any], b: dict[str, Any]) -> list[float]:
    """Each profile's table against the other's, at every batch either measured (every rank)."""
    errors = []
    for rank, (ta, tb) in enumerate(zip(a["tables"], b["tables"])):
        for batch in sorted(set(a["medians"][rank]) | set(b["medians"][rank])):
            errors.append(abs(float(ta.time_s(batch)) - float(tb.time_s(batch))) / float(tb.time_s(batch)))
    return errors


def held_out(a: dict[str, Any]) -> list[int]:
    """Geometric midpoints of A's neighbouring grid points that no rank of A measured."""
    measured = set().union(*(set(m) for m in a["medians"]))
    candidates = set()
    for medians in a["medians"]:
        xs = sorted(medians)
        candidates |= {round(math.sqrt(lo * hi)) for lo, hi in zip(xs, xs[1:]) if hi - lo >= 2}
    chosen = sorted(candidates - measured)
    if len(chosen) > MAX_HELD_OUT:  # evenly through the range
        chosen = [chosen[round(k * (len(chosen) - 1) / (MAX_HELD_OUT - 1))] for k in range(MAX_HELD_OUT)]
    return chosen


def prediction(a: dict[str, Any], h: dict[str, Any]) -> list[float]:
    """A's table against H's measured medians at the held-out batch sizes (every rank), each read
    as a mean step as the tables are (times H's rank's mean over median)."""
    return [
        abs(float(table.time_s(batch)) - scale * measured) / (scale * measured)
        for table, medians, scale in zip(a["tables"], h["medians"], h["scales"])
        for batch, measured in medians.items()
    ]


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=count, default=3)
    parser.add_argument("--budget-s", type=float, default=10.0)
    parser.add_argument("--workload", default="digits-cnn")
    parser.add_argument("--devices", default="cpu,cpu")
    parser.add_argument("--max-batch", default="64")
    parser.add_argument("--threads", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    load_before = os.getloadavg()
    reps: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="profile-agreement-") as tmp:
        for rep in range(args.repetitions):
            a = profile(Path(tmp) / f"a{rep}", args)
            b = profile(Path(tmp) / f"b{rep}", args)
            batches = held_out(a)
            h = profile(Path(tmp) / f"h{rep}", args, batches)
            agree, predict = agreement(a, b), prediction(a, h)
            reps.append({
                "agreement_median": float(np.median(agree)), "agreement_p90": float(np.quantile(agree, 0.9)),
                "prediction_median": float(np.median(predict)), "prediction_p90": float(np.quantile(predict, 0.9)),
                "held_out_batches": batches, "grid": [sorted(m) for m in a["medians"]],
                "wall_s": [a["wall_s"], b["wall_s"], h["wall_s"]],
            })  # fmt: skip
            print(f"repetition {rep}: {json.dumps(reps[-1])}", file=sys.stderr, flush=True)
    print(json.dumps({
        "benchmark": "profile_agreement",
        "config": vars(args),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "agreement": {key: stats([r[f"agreement_{key}"] for r in reps]) for key in ("median", "p90")},
        "prediction": {key: stats([r[f"prediction_{key}"] for r in reps]) for key in ("median", "p90")},
        "repetitions": reps,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    entry(main, "profile_agreement")
