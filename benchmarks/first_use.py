"""One-off costs in timed steps (issue 25 items 1 and 5), measured in real runs, repeated.

    python benchmarks/first_use.py --repetitions 3 --out runs/first-use
    python benchmarks/first_use.py --repetitions 3 --out runs/first-use -- --comm flat

Each repetition is one ``python -m validation run --comm ddp`` of ``equal``, ``dynamic`` and
``adaptive`` (seed = the repetition's index; arguments after ``--`` are passed on). From its
trace: for every (policy, rank, local batch) run at least 3 times, the first use's compute time
over that size's median (``first_use_ratio``), and for every policy the largest, over the
ranks, of a rank's compute in the policy's first step over its median at the same local batch
in that policy (``first_step_ratio``; a rank whose first size runs fewer than 3 times is left
out). Not the first step's slowest compute over the policy's median step: a re-splitting
policy's first step runs the initial split, which its later steps improve on by design. Prints one JSON object: per
repetition the median, 90th percentile and maximum of the first-use ratios and each policy's
first-step ratio; pooled over repetitions, the mean, median and 90th percentile of both; and,
as the noise floor, the share of first, second and third uses above 1.2x their size's median
(``uses_above_1_2``, pooled; the probe left out): a one-off cost shows as the first use's share
above the later ones'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from bench_common import Parser, count, entry, out_path, overridden, stats

from validation.trace_check import MIN_ROWS, first_uses, use_ratios

ROOT = Path(__file__).resolve().parent.parent


def ratios(trace: pd.DataFrame) -> tuple[list[float], dict[str, float]]:
    """The trace's first-use ratios (per policy, rank and size: :func:`validation.trace_check.first_uses`,
    what ``gpu-check`` judges) and each policy's first-step ratio, the largest of its sizes' whose
    first use is the policy's first step."""
    uses = first_uses(trace)
    starts = trace.groupby("policy")["step"].min()
    first_step: dict[str, float] = {}
    for u in uses:
        if u.policy != "probe" and u.step == starts[u.policy]:
            first_step[u.policy] = max(first_step.get(u.policy, 0.0), u.ratio)
    return [u.ratio for u in uses], first_step


def later_uses(trace: pd.DataFrame) -> dict[int, list[float]]:
    """Per use k (0 = the first) of every size :func:`validation.trace_check.use_ratios` judges
    (the probe left out), its compute over that size's median: the noise floor against which a
    first use is judged. A one-off cost shows as use 0 above uses 1, 2, ...; step-to-step noise
    puts every use above 1.2x now and then."""
    out: dict[int, list[float]] = {k: [] for k in range(MIN_ROWS)}
    for policy, _, _, _, ratios, _ in use_ratios(trace):
        if policy != "probe":
            for k, ratio in enumerate(ratios[:MIN_ROWS]):
                out[k].append(float(ratio))
    return out


def share_above(values: list[float], ratio: float = 1.2) -> float:
    return float(np.mean(np.asarray(values) > ratio)) if values else float("nan")


def run_once(seed: int, out: Path, extra: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "validation", "run", *overridden(
        ["--comm", "ddp", "--epochs", "2", "--probe-repeats", "1", "--policies", "equal,dynamic,adaptive",
         "--seed", str(seed), "--out", str(out)], extra)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"first_use: run {seed} failed: {done.stderr.strip().splitlines()[-1:]}")
    trace = pd.read_parquet(out / "trace.parquet")
    first_use, first_step = ratios(trace)
    return {
        "seed": seed,
        "first_use_ratio": {
            "median": float(np.median(first_use)),
            "p90": float(np.percentile(first_use, 90)),
            "max": float(max(first_use)),
            "sizes": len(first_use),
        },  # fmt: skip
        "first_step_ratio": first_step,
        "use_ratios": later_uses(trace),
    }


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=count, default=3)
    parser.add_argument("--out", type=out_path, default="runs/first-use")  # a string: argparse resolves it too
    parser.add_argument("extra", nargs="*", help="after --: options for validation run")
    args = parser.parse_args()
    reps = [run_once(seed, args.out / f"rep{seed}", args.extra) for seed in range(args.repetitions)]
    steps = [r for rep in reps for r in rep["first_step_ratio"].values()]
    print(json.dumps({
        "repetitions": reps,
        "first_use_ratio_median": stats([rep["first_use_ratio"]["median"] for rep in reps]),
        "first_use_ratio_max": stats([rep["first_use_ratio"]["max"] for rep in reps]),
        "first_step_ratio": stats(steps),
        "uses_above_1_2": {  # pooled: the share of each use k above 1.2x its size's median
            str(k): share_above([v for rep in reps for v in rep["use_ratios"][k]]) for k in range(MIN_ROWS)
        },
        "load_average": os.getloadavg()[0],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    entry(main, "first_use")
