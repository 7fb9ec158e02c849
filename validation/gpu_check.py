"""``python -m validation gpu-check [--out DIR]``: on a machine with one or more CUDA GPUs, the
runs that decide whether the GPU path measures right, in under 10 minutes; one pass/fail line
per check, and ``DIR/gpu-check.json`` (written atomically). Without CUDA: one line, exit 2.

The checks (each a real ``python -m validation run`` in ``DIR/runs/<name>``, or ``matrix``):

* ``nccl-flat``, ``nccl-flat-delay``, ``nccl-ddp``, ``nccl-ddp-delay``: ResNet-18, one rank on
  ``cuda:0`` over NCCL, the flat all-reduce and DDP (the CUDA-event clock), without and with an
  injected 20 ms a step; ``delay-adds-the-same``: the delay adds 20 ms (within 4 ms) to the
  median compute of both (it overlapped queued GPU work under DDP before the hook synchronised).
* ``transformer-ddp``: the small GPT under DDP on ``cuda:0``.
* ``gpu-beside-cpu``: ``cuda:0`` beside two CPU ranks of 1 and 2 threads, over gloo.
* ``refuse-two-on-one-gpu``: ``--devices cuda:0,cuda:0`` refused in one line, exit 2.
* ``failing-rank``: rank 1 dies at run step 20 (NCCL across two GPUs when there are two, else
  ``cuda:0,cpu``): the run fails within 60 s naming rank 1, no rank left running.
* ``profiler-trace``: ``nccl-ddp-profiled`` (``nccl-ddp`` with ``--profile 5``): its torch.profiler traces read back by
  ``python -m hetsim import-trace --format torch-profiler``, a row per profiled step.
* ``own-job-profile``, ``own-job-plan``, ``own-job-example-nccl``: docs/guide/own-job.md on the
  GPUs (:func:`own_job_checks`): the example's model profiled, planned, and trained by the
  example under torchrun over NCCL.
* ``matrix-quick-gpu``: ``python -m validation matrix --quick --gpu`` finishes.
* ``trace:<run>``: every run folder above passes :mod:`validation.trace_check` (no negative
  time; first uses and first steps within 1.2x of their medians; rank 0's device memory as
  much in a policy's last epoch as in its first, by its allocator's peak).

Importing this module does not import torch (the CLI's parser is built without it).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hetsim.core.console import path_argument
from hetsim.core.errors import ConfigError
from hetsim.core.files import check_empty_folder, write_json
from validation.backend import free_port
from validation.contention import die_with_parent

DELAY_S = 0.02
DELAY_TOLERANCE_S = 0.004
RUN_TIMEOUT_S = 240
ONE_GPU = ("--world-size", "1", "--devices", "cuda:0", "--policies", "equal", "--probe-repeats", "1")
RESNET = ("--workload", "resnet18", "--global-batch", "64", "--epochs", "2", *ONE_GPU)
NO_DEFAULT_DELAY = ("--delay", "1=0", "--per-sample-delay", "1=0")
PROFILED_STEPS = 5  # torch.profiler steps of nccl-ddp-profiled, read back by import-trace
EXAMPLE = "examples/train_your_model.py"  # the own-job walkthrough's model and training script


@dataclass
class Outcome:
    """One check: its name, whether it passed, what was seen, how long it took."""

    name: str
    passed: bool
    detail: str
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail} ({self.wall_s:.1f} s)"


def require_cuda() -> tuple[int, str]:
    """The number of CUDA devices and the first one's name; ConfigError without any."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise ConfigError("gpu-check", f"no CUDA device on this machine (torch {torch.__version__}); it checks GPUs")
    return torch.cuda.device_count(), torch.cuda.get_device_name(0)


def run_validation(command: str, argv: Sequence[str], timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, str, float]:
    """``python -m validation COMMAND *argv``: its exit status, its stderr and its wall time."""
    return run_command([sys.executable, "-m", "validation", command, *argv], timeout_s)


def run_command(argv: Sequence[str], timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, str, float]:
    """Any command (``hetsim``, torchrun): its exit status, its stderr and its wall time."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=die_with_parent,
        )
        return done.returncode, done.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr if isinstance(exc.stderr, str) else (exc.stderr or b"").decode(errors="replace")
        return 124, stderr + f"\ntimed out after {timeout_s:g} s", time.monotonic() - t0
    except OSError as exc:  # it could not start: one check fails, the others still run
        return 127, f"cannot run {argv[0]}: {exc.strerror or exc}", time.monotonic() - t0


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def checked_run(name: str, argv: Sequence[str], runs: Path) -> Outcome:
    """One run that must finish."""
    status, stderr, wall = run_validation("run", [*argv, "--out", str(runs / name)])
    detail = "finished" if status == 0 else f"exit status {status}: {last_line(stderr)}"
    return Outcome(name, status == 0, detail, wall)


def median_compute_s(folder: Path, policy: str = "equal") -> float:
    from validation.trace_check import read_trace

    trace = read_trace(folder)
    return float(trace.loc[(trace["policy"] == policy) & (trace["local_batch"] > 0), "compute_s"].median())


def delay_check(runs: Path) -> Outcome:
    """The injected delay adds the same time to the median compute under the flat path and DDP."""
    try:
        added = {
            comm: median_compute_s(runs / f"nccl-{comm}-delay") - median_compute_s(runs / f"nccl-{comm}")
            for comm in ("flat", "ddp")
        }
    except (OSError, ValueError, KeyError) as exc:
        return Outcome("delay-adds-the-same", False, f"runs missing: {exc}")
    ok = all(abs(v - DELAY_S) <= DELAY_TOLERANCE_S for v in added.values())
    detail = ", ".join(f"{k} +{1e3 * v:.1f} ms" for k, v in added.items()) + f" (injected {1e3 * DELAY_S:.0f} ms)"
    return Outcome("delay-adds-the-same", ok, detail)


def refusal_check() -> Outcome:
    """Two ranks on one GPU: one line, exit 2, before any rank starts."""
    status, stderr, wall = run_validation("run", ["--world-size", "2", "--devices", "cuda:0,cuda:0"], 60)
    lines = stderr.strip().splitlines()
    ok = status == 2 and len(lines) == 1 and "both on cuda:0" in stderr
    return Outcome("refuse-two-on-one-gpu", ok, f"exit status {status}: {last_line(stderr)}", wall)


def failure_check(runs: Path, n_gpus: int) -> Outcome:
    """A rank that dies: the run fails within 60 s, naming it first, and every rank ends."""
    devices = ("--world-size", "2", "--devices", "cuda" if n_gpus >= 2 else "cuda:0,cpu")
    argv = [*devices, "--workload", "digits-cnn", "--epochs", "2", "--policies", "equal", "--probe-repeats", "1",
            *NO_DEFAULT_DELAY, "--crash-at", "1=20", "--timeout-s", "20",
            "--out", str(runs / "failing-rank")]  # fmt: skip
    status, stderr, wall = run_validation("run", argv, 120)
    ok = status == 1 and "rank 1 failed first" in stderr and wall < 60 and "Traceback" not in stderr
    return Outcome("failing-rank", ok, f"exit status {status} after {wall:.1f} s: {last_line(stderr)}", wall)


def run_checks(out: Path, n_gpus: int) -> list[Outcome]:
    """Every check in turn (see the module's docstring)."""
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    delay = ("--delay", f"0={DELAY_S}")
    plan = {
        "nccl-flat": RESNET,
        "nccl-flat-delay": (*RESNET, *delay),
        "nccl-ddp": (*RESNET, "--comm", "ddp"),
        # apart from nccl-ddp, the delay check's baseline: the profiler's own cost is in its first steps
        "nccl-ddp-profiled": (*RESNET, "--comm", "ddp", "--profile", str(PROFILED_STEPS)),
        "nccl-ddp-delay": (*RESNET, "--comm", "ddp", *delay),
        "transformer-ddp": ("--workload", "transformer", "--global-batch", "64", "--epochs", "1", *ONE_GPU,
                            "--comm", "ddp"),
        "gpu-beside-cpu": ("--workload", "digits-cnn", "--global-batch", "128", "--epochs", "2", "--world-size", "3",
                           "--devices", "cuda:0,cpu,cpu", "--threads", "1=1,2=2", *NO_DEFAULT_DELAY,
                           "--policies", "equal,dynamic,optimal"),
    }  # fmt: skip
    outcomes = []
    for name, argv in plan.items():
        outcomes.append(checked_run(name, argv, runs))
        print(outcomes[-1].line(), flush=True)
    checks = (delay_check(runs), profiler_check(runs / "nccl-ddp-profiled"),
              *own_job_checks(out / "own-job", n_gpus), refusal_check(), failure_check(runs, n_gpus),
              matrix_check(out))  # fmt: skip
    for outcome in checks:
        outcomes.append(outcome)
        print(outcome.line(), flush=True)
    folders = [runs / name for name in plan] + sorted((out / "matrix" / "runs").glob("*/"))
    for folder in folders:
        outcomes.append(trace_outcome(folder))
        print(outcomes[-1].line(), flush=True)
    return outcomes


def profiler_check(run: Path) -> Outcome:
    """The torch.profiler traces of a DDP run on CUDA read back by ``hetsim import-trace``: a
    row per rank and profiled step, each with compute time."""
    import pandas as pd

    out = run.parent / f"{run.name}-imported.csv"
    argv = ["-m", "hetsim", "import-trace", "--format", "torch-profiler", str(run / "profiler"), "--policy", "equal"]
    status, stderr, wall = run_command([sys.executable, *argv, "-o", str(out)], 120)
    if status != 0:
        return Outcome("profiler-trace", False, f"exit status {status}: {last_line(stderr)}", wall)
    rows = pd.read_csv(out)
    ok = len(rows) >= PROFILED_STEPS - 1 and bool((rows["compute_s"] > 0).all())
    return Outcome("profiler-trace", ok, f"{len(rows)} steps imported from {run.name}'s traces", wall)


def own_job_checks(out: Path, n_gpus: int) -> list[Outcome]:
    """docs/guide/own-job.md on CUDA: ``validation profile`` of examples/train_your_model.py's model
    (on cuda:0,cuda:1; with one GPU, cuda:0 beside a CPU rank over the flat all-reduce, as a plan
    needs two workers), ``hetsim plan`` of its scenario, and the example under torchrun over NCCL
    on the GPUs: with the plan on two, with ``--policy equal`` on one (a plan for a GPU and a CPU
    is not a world of GPUs)."""
    two = n_gpus >= 2
    devices = ["--devices", "cuda:0,cuda:1"] if two else ["--devices", "cuda:0,cpu", "--comm", "flat"]
    prof, plan = out / "profile", out / "plan.json"
    status, stderr, wall = run_validation("profile", ["--workload", f"{EXAMPLE}:WORKLOAD", *devices, "--budget-s",
                                                      "20", "--out", str(prof)])  # fmt: skip
    outcomes = [Outcome("own-job-profile", status == 0, f"exit status {status}: {last_line(stderr)}", wall)]
    if not outcomes[-1].passed:  # the plan, and the run of it, would only fail on the missing files
        skipped = Outcome("own-job-example-nccl", False, "not run: own-job-profile failed")
        example = skipped if two else own_job_example(out, two)  # one GPU: --policy equal needs no profile
        return [*outcomes, Outcome("own-job-plan", False, "not run: own-job-profile failed"), example]
    status, stderr, wall = run_command([sys.executable, "-m", "hetsim", "plan", str(prof / "scenario.toml"),
                                        "--wait-for-all", "--out", str(plan)], 120)  # fmt: skip
    outcomes.append(Outcome("own-job-plan", status == 0, f"exit status {status}: {last_line(stderr)}", wall))
    if two and not outcomes[-1].passed:
        return [*outcomes, Outcome("own-job-example-nccl", False, "not run: own-job-plan failed")]
    return [*outcomes, own_job_example(out, two)]


def own_job_example(out: Path, two: bool) -> Outcome:
    """The example under torchrun over NCCL: with the plan on two GPUs, ``--policy equal`` on one."""
    how = ["--plan", str(out / "plan.json")] if two else ["--policy", "equal"]
    torchrun = [sys.executable, "-m", "torch.distributed.run"]  # torchrun's module: no script on PATH needed
    status, stderr, wall = run_command([*torchrun, "--nproc-per-node", "2" if two else "1", "--master-addr",
                                        "127.0.0.1", "--master-port", str(free_port()), EXAMPLE, *how, "--device",
                                        "cuda", "--epochs", "3", "--out", str(out / "run")])  # fmt: skip
    return Outcome("own-job-example-nccl", status == 0, f"exit status {status}: {last_line(stderr)}", wall)


def matrix_check(out: Path) -> Outcome:
    status, stderr, wall = run_validation("matrix", ["--quick", "--gpu", "--out", str(out / "matrix")], 420)
    return Outcome("matrix-quick-gpu", status == 0, f"exit status {status}: {last_line(stderr)}", wall)


def trace_outcome(folder: Path) -> Outcome:
    """:func:`validation.trace_check.check_folder` of one run folder, as a check."""
    from validation.trace_check import check_folder

    try:
        problems = check_folder(folder)
    except (OSError, ValueError) as exc:
        return Outcome(f"trace:{folder.name}", False, f"unreadable: {exc}")
    detail = "no negative time, no first-use spike, memory flat" if not problems else problems[0]
    return Outcome(f"trace:{folder.name}", not problems, detail, problems=problems)


def cmd_gpu_check(args: argparse.Namespace) -> int:
    """The command: refuse without CUDA; else every check, the JSON, 0 when all passed."""
    import torch

    n_gpus, device = require_cuda()
    out = (args.out or Path("runs") / time.strftime("gpu-check-%Y%m%d-%H%M%S")).resolve()
    check_empty_folder(out, "--out")
    print(f"gpu-check: {n_gpus} CUDA device(s), {device}; torch {torch.__version__}", flush=True)
    t0 = time.monotonic()
    outcomes = run_checks(out, n_gpus)
    data: dict[str, Any] = {
        "device": device,
        "cuda_devices": n_gpus,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "wall_s": time.monotonic() - t0,
        "passed": all(o.passed for o in outcomes),
        "checks": [asdict(o) for o in outcomes],
    }
    write_json(out / "gpu-check.json", data)
    print(f"gpu-check: {sum(o.passed for o in outcomes)}/{len(outcomes)} passed; wrote {out / 'gpu-check.json'}")
    return 0 if data["passed"] else 1


def add_parser(sub: Any) -> None:
    """The ``gpu-check`` subcommand on the CLI's subparsers."""
    parser = sub.add_parser("gpu-check", help="on a CUDA machine: the checks that the GPU path measures right")
    parser.add_argument(
        "--out", type=path_argument, default=None, metavar="DIR", help="results (default runs/gpu-check-<time>)"
    )
