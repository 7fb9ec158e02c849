"""Does a training step take longer when the process did something else just before it? Prints JSON.

    python benchmarks/cold_step.py [--cases digits-cnn:16,digits-cnn:64,transformer:8,resnet18:16]
        [--gaps-ms 0,1,5,20,100] [--modes sleep,spin] [--trials 20] [--rounds 3]

A rank of a synchronous data-parallel job waits every step (for the slowest rank, for the
all-reduce, for rank 0's split), and at each policy's start for longer (the held-out evaluation,
the trace being written). ``validation profile`` times steps back to back. This measures, in one
process on one thread (as a profiled or training CPU rank runs), one workload's step as
``validation profile`` times it (``validation.profile_measure.Stepper.step_s``: forward and
backward, the optimizer's update outside the time, as the trainer's ``compute_s``) after a gap
against the same step back to back. Each trial: a step, a timed step back to back (the
reference), the gap (``sleep``: the process idle, as a rank blocked in a collective; ``spin``: a
Python loop on the clock, the core kept busy), a timed step; its ratio is the second time over the
reference, so that the machine's drift falls on both. Per case, mode and gap: the mean, median and
90th percentile of the trials' ratios, each round's and pooled over the rounds (``--rounds``, the
order of the gaps rotated from round to round).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from bench_common import Parser, checked_seed, count, entry, refuse, rotated, stats

from hetsim.sweep.results import provenance
from validation.profile_measure import Stepper
from validation.workloads import WORKLOADS


def parse_cases(text: str) -> list[tuple[str, int]]:
    """``NAME:BATCH,...`` as (workload, local batch) pairs."""
    out = []
    for item in text.split(","):
        name, _, batch = item.partition(":")
        if name not in WORKLOADS or not batch.isdigit() or int(batch) < 1:
            raise SystemExit(f"cold_step: --cases: {item!r} is not WORKLOAD:BATCH (workloads: {', '.join(WORKLOADS)})")
        out.append((name, int(batch)))
    return out


def spin(seconds: float) -> None:
    """The core kept busy for ``seconds`` by a loop on the clock."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def trial_ratios(step: Callable[[], float], wait: Callable[[float], None], gap_s: float, trials: int) -> list[float]:
    """``trials`` ratios of a step after ``wait(gap_s)`` over the step just before it (back to back)."""
    out = []
    for _ in range(trials):
        step()
        reference = step()
        wait(gap_s)
        out.append(step() / reference)
    return out


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="digits-cnn:16,digits-cnn:64,transformer:8,resnet18:16")
    parser.add_argument("--gaps-ms", default="0,1,5,20,100")
    parser.add_argument("--modes", default="sleep,spin")
    parser.add_argument("--trials", type=count, default=20, help="trials per case, mode and gap in a round")
    parser.add_argument("--rounds", type=count, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    waits = {"sleep": time.sleep, "spin": spin}
    modes = args.modes.split(",")
    if any(m not in waits for m in modes) or min(gaps) < 0 or args.trials < 1 or args.rounds < 1:
        refuse("cold_step", "--modes takes sleep and spin, --gaps-ms non-negative, --trials and --rounds >= 1")
    checked_seed("cold_step", args.seed)
    torch.set_num_threads(1)
    result: dict[str, Any] = {"benchmark": "cold_step", "config": vars(args), **provenance(), "cases": {}}
    for name, batch in parse_cases(args.cases):
        step = functools.partial(Stepper(WORKLOADS[name], args.seed, torch.device("cpu"), rank=0).step_s, batch)
        for _ in range(10):  # the batch size's first uses
            step()
        rounds: dict[str, list[list[float]]] = {}
        for r in range(args.rounds):
            for key in rotated([f"{m}/{g:g}" for m in modes for g in gaps], r):
                mode, gap = key.split("/")
                rounds.setdefault(key, []).append(trial_ratios(step, waits[mode], float(gap) / 1e3, args.trials))
        result["cases"][f"{name}:{batch}"] = {
            key: {"pooled": stats(x for one in per for x in one), "rounds": [stats(one) for one in per]}
            for key, per in sorted(rounds.items(), key=lambda kv: (kv[0].split("/")[0], float(kv[0].split("/")[1])))
        }
        print(f"cold_step: {name}:{batch} done", file=sys.stderr)
    result["load_average_after"] = list(os.getloadavg())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    entry(main, "cold_step")
