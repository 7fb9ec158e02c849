"""Do ``torch.profiler`` traces, imported, say what the run itself measured? Prints JSON.

Each repetition runs ``python -m validation run --policies equal --epochs 1 --probe-repeats 1
--profile STEPS`` (a subprocess, seed = the repetition's index) in each configuration: flat
all-reduce and DDP, 2 and 3 CPU ranks under gloo, rank 1 slowed by noisy neighbours
(``--contention 1=LOAD``, ranks pinned with ``--cpus``, validation's default injected delay
removed). The load makes rank 1 the slowest by a margin: with 2 ranks (one CPU each) one
always-busy neighbour leaves it half of its CPU; with 3 ranks, ranks 0 and 2 share CPU 0 (half
each), so rank 1 gets two neighbours and a third of CPU 1 (``--load`` scales both).
Then, in this process, ``import-trace --format torch-profiler`` of
RUN/profiler/equal-rank*.json.gz (:func:`hetsim.traces.torch_profiler.import_traces`) and, per run:

* ``compute_error``: the median over the profiled steps and ranks of |imported compute_s / the
  run's own compute_s - 1| (the run's trace.parquet, policy ``equal``, the same steps);
* ``slow_rank_largest``: the share of profiled steps in which rank 1 (the slowed one) has the
  largest imported compute (target: 1, every step), beside ``own_slow_rank_largest``, the same
  share in the run's own trace (on a shared 2-core machine a neighbour does not always make its
  rank the slowest), and ``same_slowest_rank``: the share of steps whose slowest rank is the one
  the run's own trace has slowest (the importer's part);
* ``trace_step_error``: the imported trace's mean step time (a step: rank 0's ``ProfilerStep``)
  against the run's own over the same steps;
* ``step_error``: ``hetsim calibrate`` on the imported trace, its scenario's predicted mean step
  time (:func:`hetsim.analysis.analytic.predict`, policy equal) against the run's measured mean step time
  over the profiled steps (|predicted / measured - 1|, target within 5%).

Summaries are mean, median and 90th percentile over the repetitions and configurations; the
machine's load average is recorded (it is shared).

    .venv/bin/python benchmarks/import_trace_fidelity.py [--repetitions 3] [--steps 10] [--load 1]
        [--configs flat-2,ddp-2,flat-3,ddp-3] [--out DIR] [--run-options '--global-batch 512 --epochs 5']

``--run-options "--workload transformer"`` (steps of a few hundred milliseconds) is the setting
the docs report: a neighbour that shares rank 1's CPU takes it in scheduler slices of a few
milliseconds, so a step of a few milliseconds (digits, the default) can fall between two slices
and run at full speed, and rank 1 is then not the slowest in that step.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from bench_common import Parser, count, entry, out_path, overridden, stats

from hetsim.analysis.analytic import predict
from hetsim.calibrate import calibrate
from hetsim.policies import Equal
from hetsim.scenario.config import build_scenario
from hetsim.traces.torch_profiler import import_traces

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900
SLOW_RANK = 1
CPUS = {2: "0=0,1=1", 3: "0=0,1=1,2=0"}  # rank 1 alone on CPU 1, beside its neighbours
NEIGHBOUR_CORES = {2: 1.0, 3: 2.0}  # rank 1's --contention at --load 1 (see the module docstring)


def record(out: Path, comm: str, world: int, seed: int, steps: int, load: float, more: list[str]) -> None:
    """One profiled validation run into ``out`` (``more``: further options of ``validation run``;
    one it gives replaces this function's)."""
    command = [sys.executable, "-m", "validation", "run", *overridden(
        ["--policies", "equal", "--epochs", "1", "--probe-repeats", "1", "--world-size", str(world), "--comm", comm,
         "--seed", str(seed), "--delay", "1=0", "--per-sample-delay", "1=0", "--cpus", CPUS[world],
         "--contention", f"{SLOW_RANK}={load * NEIGHBOUR_CORES[world]}", "--profile", str(steps),
         "--out", str(out)], more)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-2:]
        sys.exit(f"validation run ({comm}, {world} ranks) failed: {' | '.join(tail)}")


def compare(run: Path) -> dict[str, Any]:
    """The imported trace of ``run``'s profiled steps against the run's own trace."""
    files = sorted((run / "profiler").glob("equal-rank*.json.gz"))
    imported = import_traces(files)
    mine = imported.trace.to_frame().set_index(["step", "worker"])
    own = pd.read_parquet(run / "trace.parquet")
    own = own[own["policy"] == "equal"].set_index(["step", "worker"]).loc[mine.index]
    errors = (mine["compute_s"] / own["compute_s"] - 1).abs()
    by_step = mine["compute_s"].unstack("worker")
    own_by_step = own["compute_s"].unstack("worker")
    fit = calibrate(imported.trace, "imported", policy=imported.trace.policy)
    predicted = predict(build_scenario(fit.scenario), Equal()).mean_step_s
    measured = float((own["compute_s"] + own["wait_s"] + own["comm_s"]).groupby("step").max().mean())
    steps = (mine["compute_s"] + mine["wait_s"] + mine["comm_s"]).groupby("step").max()
    return {
        "compute_error": float(errors.median()),
        "slow_rank_largest": float((by_step.idxmax(axis=1) == SLOW_RANK).mean()),
        "own_slow_rank_largest": float((own_by_step.idxmax(axis=1) == SLOW_RANK).mean()),
        "same_slowest_rank": float((by_step.idxmax(axis=1) == own_by_step.idxmax(axis=1)).mean()),
        "trace_step_error": abs(float(steps.mean()) / measured - 1),
        "step_error": abs(predicted / measured - 1),
        "predicted_step_s": predicted,
        "measured_step_s": measured,
        "offsets_ms": [1e3 * o for o in imported.offsets_s],
        "mean_compute_ms": {int(w): 1e3 * float(v) for w, v in by_step.mean().items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=count, default=3)
    parser.add_argument("--steps", type=count, default=10, help="profiled steps of the policy (default 10, at most 10)")
    parser.add_argument(
        "--load", type=float, default=1.0, help="scales rank 1's neighbours' load (default 1: see the docstring)"
    )
    parser.add_argument("--configs", default="flat-2,ddp-2,flat-3,ddp-3", help="COMM-RANKS,... (default: all four)")
    parser.add_argument("--out", type=out_path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument(
        "--run-options", default="", help="more options of every validation run, e.g. '--global-batch 512 --epochs 5'"
    )
    args = parser.parse_args(argv)
    more = shlex.split(args.run_options)
    configs = [(c.split("-")[0], int(c.split("-")[1])) for c in args.configs.split(",")]
    base = args.out or Path(tempfile.mkdtemp(prefix="import-trace-"))
    rows = []
    load_before = os.getloadavg()[0]
    for rep in range(args.repetitions):
        for comm, world in configs:
            run = base / f"{comm}-{world}-rep{rep}"
            record(run, comm, world, rep, args.steps, args.load, more)
            rows.append({"comm": comm, "ranks": world, "repetition": rep, **compare(run)})
    result = {
        "what": "torch.profiler traces of validation runs, imported, against the runs' own traces",
        "repetitions": args.repetitions, "profiled_steps": args.steps, "load": args.load,
        "run_options": more,
        "compute_error": stats([r["compute_error"] for r in rows]),
        "slow_rank_largest": stats([r["slow_rank_largest"] for r in rows]),
        "own_slow_rank_largest": stats([r["own_slow_rank_largest"] for r in rows]),
        "same_slowest_rank": stats([r["same_slowest_rank"] for r in rows]),
        "trace_step_error": stats([r["trace_step_error"] for r in rows]),
        "step_error": stats([r["step_error"] for r in rows]),
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
        "runs": rows,
    }  # fmt: skip
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    entry(main, "import_trace_fidelity")
