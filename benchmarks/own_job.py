"""Your own job, measured: does the plan made from a profile predict the run that applies it, and
is the policy it recommends the one to run? Prints JSON.

Each repetition does what docs/guide/own-job.md walks through, as a user would (each command in
a subprocess), on two CPU ranks made different (``--slowdown 1,2`` by default: rank 1 emulates a
device twice as slow; each rank one thread):

1. ``python -m validation profile --workload examples/train_your_model.py:WORKLOAD`` (a fresh
   profile, seed = the repetition's index);
2. ``python -m hetsim plan`` of its scenario, over the synchronous policies the example trains
   with (``--plan-policies``; the default plan also lists ``backup``, ``ksync`` and ``async``:
   ``async`` is a per-update time, not a barrier step, and the example's DDP loop is synchronous);
3. ``examples/train_your_model.py`` under torchrun with ``--plan plan.json``, and with
   ``--policy P`` for each of ``--policies`` (``equal``, ``optimal``, ``dynamic``, ``adaptive``),
   in an order rotated by the repetition; each run's measured mean step time is its
   ``summary.json`` ``mean_step_s`` (the policy's steps: the probe is not counted).

Per repetition: (a) the plan's ``predicted_step_s`` against the plan run's measured mean step
(relative error, target within 5%), beside the noise floor: the plan run a second time
(``repeat_difference``: how far the two measured means are apart, relative to the first); (b)
the plan run's step over ``equal``'s (target at most 1) and over the fastest run's of the
repetition (target at most 1.03); and, to say where an error
comes from, each run's mean slowest compute and mean communication per step (from its trace)
beside the plan's: the profile's table at the plan's local batches, its all-reduce and its
network. Summaries
are mean, median and 90th percentile over the repetitions; the load average is recorded before
and after each repetition (the machine is shared).

    .venv/bin/python benchmarks/own_job.py [--repetitions 3] [--slowdown 1,2] [--budget-s 30]
        [--global-batch 128] [--epochs 60] [--policies equal,optimal,dynamic,adaptive] [--cost-error E]
        [--out DIR]

Runs of 60 epochs (660 steps) by default: at 10 epochs two runs of one plan differed by more
than the 5% the prediction is held to (the figures: docs/guide/own-job.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
from bench_common import Parser, count, entry, out_path, stats

from hetsim.model.costs import Table

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/train_your_model.py"
TIMEOUT_S = 900


def call(command: list[str], what: str) -> str:
    """Run ``command`` from the repository root; its stdout, or exit naming ``what`` failed."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
        said = [line for line in lines if "error:" in line][-1:] or lines[-1:]  # the rank's line, not torchrun's report
        raise SystemExit(f"own_job: {what} failed (status {done.returncode}): {' '.join(said)}")
    return done.stdout


def profile_and_plan(folder: Path, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh profile of the two ranks and the plan of its scenario (the plan.json object)."""
    prof, plan = folder / "prof", folder / "plan.json"
    call([sys.executable, "-m", "validation", "profile", "--workload", f"{EXAMPLE}:WORKLOAD",
          "--slowdown", args.slowdown, "--budget-s", str(args.budget_s), "--global-batch", str(args.global_batch),
          "--seed", str(seed), "--out", str(prof)], "profile")  # fmt: skip
    call([sys.executable, "-m", "hetsim", "plan", str(prof / "scenario.toml"), "--policy", args.plan_policies,
          "--cost-error", str(args.cost_error), "--out", str(plan)], "plan")  # fmt: skip
    return dict(json.loads(plan.read_text(encoding="utf-8")))


def train(folder: Path, how: list[str], seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run of the example under torchrun (``how``: ``--plan FILE`` or ``--policy P``): its
    measured mean step and, from its trace, the mean slowest compute and communication a step."""
    launch(folder, how, seed, args)
    return figures(folder, *policy_steps(folder))


def launch(folder: Path, how: list[str], seed: int, args: argparse.Namespace) -> None:
    """The example under torchrun into ``folder`` (``how``: ``--plan FILE`` or ``--policy P``)."""
    from validation.backend import free_port

    torchrun = str(Path(sys.executable).with_name("torchrun"))
    batch = [] if "--plan" in how else ["--global-batch", str(args.global_batch)]  # a plan brings its own
    call([torchrun, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
          EXAMPLE, *how, *batch, "--slowdown", args.slowdown, "--epochs", str(args.epochs), "--seed", str(seed),
          "--out", str(folder)], "the example with " + " ".join(how))  # fmt: skip


def policy_steps(folder: Path) -> tuple[pd.DataFrame, Any]:
    """A run's trace without the probe's rows, read once, and those rows grouped by step."""
    trace = pd.read_parquet(folder / "trace.parquet")
    trace = trace[trace["policy"] != "probe"]
    return trace, trace.groupby(["epoch", "step"])


def figures(folder: Path, trace: pd.DataFrame, steps: Any) -> dict[str, Any]:
    """What :func:`train` returns, from the run's summary and its policy's rows (:func:`policy_steps`)."""
    entry = json.loads((folder / "summary.json").read_text(encoding="utf-8"))["policies"][0]
    included = trace[trace["included"]]
    per_rank = included.groupby(["worker", "local_batch"])["compute_s"].median()
    return {
        "policy": str(entry["policy"]),
        "mean_step_s": float(entry["mean_step_s"]),
        "steps": int(entry["steps"]),
        "final_split": list(entry["final_batches"]),
        "mean_slowest_compute_s": float(steps["compute_s"].max().mean()),
        "mean_comm_s": float(steps["comm_s"].max().mean()),
        "median_compute_s": {f"rank{w}@{b}": float(v) for (w, b), v in per_rank.items()},
    }


def predicted_parts(plan: dict[str, Any], prof: Path) -> dict[str, Any]:
    """The plan's recommended split read off the profile: each rank's table cost at its local
    batch (0: left out), the slowest, the profiled all-reduce at the gradient's size, the
    communication of the profile's trainer steps, their mean step and the scenario's network
    (that step beyond the slowest compute the tables expect)."""
    scenario = tomllib.loads((prof / "scenario.toml").read_text(encoding="utf-8"))
    meta = json.loads((prof / "meta.json").read_text(encoding="utf-8"))
    split = plan["recommended"]["split"]
    tables = [Table(points=[tuple(p) for p in w["cost"]["points"]]) for w in scenario["workers"]]
    compute = [float(t.time_s(b)) if b > 0 else 0.0 for t, b in zip(tables, split, strict=True)]
    return {
        "table_compute_s": compute,
        "slowest_table_compute_s": max(compute),
        "allreduce_s": float(meta["allreduce"]["at_gradient_measured_s"]),
        "comm_s": meta["allreduce"].get("in_step_s"),  # the trainer's steps' communication
        "network_s": float(scenario["network"]["time_s"]),  # the scenario's: their step beyond the slowest compute
        "trainer_step_s": meta["allreduce"].get("trainer_step_s"),
    }


def repetition(index: int, args: argparse.Namespace) -> dict[str, Any]:
    """One repetition: profile, plan, the plan's run and each policy's (see the module's docstring)."""
    folder = args.out / f"rep{index}"
    load_before = os.getloadavg()[0]
    plan = profile_and_plan(folder, index, args)
    recommended = plan["recommended"]
    plan_run = ["--plan", str(folder / "plan.json")]
    runs = [("plan", plan_run), ("plan-again", plan_run)] + [(p, ["--policy", p]) for p in args.policies.split(",")]
    shift = index % len(runs)  # each repetition starts with another run: drift in the load is not always one run's
    measured = {name: train(folder / f"run-{name}", how, index, args) for name, how in runs[shift:] + runs[:shift]}
    plan_s, predicted_s = measured["plan"]["mean_step_s"], float(recommended["predicted_step_s"])
    again_s = measured.pop("plan-again")["mean_step_s"]  # the noise floor: the same plan run twice
    fastest = min(measured, key=lambda k: measured[k]["mean_step_s"])
    predicted = {row["policy"]: float(row["step_s"]["value"]) for row in plan["policies"]}
    return {
        "seed": index,
        "recommended": {k: recommended[k] for k in ("policy", "split", "global_batch", "predicted_step_s", "how")},
        "fragility": {w["name"]: w["factor"] for w in (plan.get("fragility") or {}).get("workers", [])},
        "predicted_parts": predicted_parts(plan, folder / "prof"),
        "runs": measured,
        "relative_error": (predicted_s - plan_s) / plan_s,
        "repeat_difference": abs(again_s - plan_s) / plan_s,
        "plan_over_equal": plan_s / measured["equal"]["mean_step_s"] if "equal" in measured else None,
        "plan_over_fastest": plan_s / measured[fastest]["mean_step_s"],
        "fastest": fastest,
        "policy_error": {
            p: (predicted[p] - m["mean_step_s"]) / m["mean_step_s"] for p, m in measured.items() if p in predicted
        },
        "load_average": [load_before, os.getloadavg()[0]],
    }


def summary(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures over the repetitions, each against its target."""
    error = [abs(r["relative_error"]) for r in reps]
    over_equal = [r["plan_over_equal"] for r in reps if r["plan_over_equal"] is not None]
    over_fastest = [r["plan_over_fastest"] for r in reps]
    return {
        "abs_relative_error": {**stats(error), "target": 0.05, "met_in": sum(e <= 0.05 for e in error)},
        "plan_over_equal": {**stats(over_equal), "target": 1.0, "met_in": sum(x <= 1.0 for x in over_equal)},
        "plan_over_fastest": {**stats(over_fastest), "target": 1.03, "met_in": sum(x <= 1.03 for x in over_fastest)},
        "repeat_difference": stats([r["repeat_difference"] for r in reps]),
        "repetitions": len(reps),
    }


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The options of the profile, the plan and the runs (this script's and run_spread.py's)."""
    parser.add_argument("--slowdown", default="1,2", help="emulated slowness of rank 0 and rank 1 (default 1,2)")
    parser.add_argument("--budget-s", type=float, default=30.0, help="the profile's budget per rank (default 30)")
    parser.add_argument("--global-batch", type=count, default=128)
    parser.add_argument("--epochs", type=count, default=60, help="epochs of each run (default 60: 660 steps)")
    parser.add_argument("--plan-policies", default="equal,proportional,dynamic,dynamic-enhanced,optimal,adaptive")
    parser.add_argument("--cost-error", type=float, default=0.0, help="the plan's --cost-error (default 0)")
    parser.add_argument("--out", type=out_path, default=None, help="keep the folders here (default: a temporary one)")


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=count, default=3)
    parser.add_argument("--policies", default="equal,optimal,dynamic,adaptive", help="runs beside the plan's")
    add_job_options(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="own-job-") as tmp:
        args.out = args.out or Path(tmp)
        reps = [repetition(i, args) for i in range(args.repetitions)]
    print(json.dumps({
        "command": " ".join(sys.argv),
        "config": {k: str(v) for k, v in vars(args).items()},
        "summary": summary(reps),
        "per_repetition": reps,
        "cpu_count": os.cpu_count(),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    entry(main, "own_job")
