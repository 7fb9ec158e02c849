"""``python -m validation matrix``: the fidelity benchmark. A fixed, documented set of real runs,
each compared with hetsim's prediction.

Every configuration is one ``python -m validation run`` (its own process tree, its own run
folder under ``<out>/runs/<name>``; its output in ``<name>.log``). Predictions are of two kinds:

* **same-run**: calibrated on the run's own probe, predicting the run's policies;
* **cross-run**: calibrated on one configuration's probe, predicting another that differs in
  one controlled way (:data:`CROSS`: a delay value, the global batch, the policies, the
  contention level is *not* among them: hetsim has no model of a noisy neighbour's share).

A rerun into the same folder resumes: a run whose folder says ``complete`` is not run again,
an unfinished one is run afresh. The results (``results.json``, ``predictions.csv``,
``load.csv``, ``matrix.png``) are written by :mod:`validation.matrix_report` once every run has
ended; a run that failed is reported and makes the command exit 1 after the others.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validation.contention import die_with_parent
from validation.machine_load import LoadSampler

if TYPE_CHECKING:  # compare brings scipy and pandas: imported when the runs are predicted, not to check the input
    from hetsim.calibrate import Calibration
    from validation.compare import Comparison

Echo = Callable[[str], None]


@dataclass(frozen=True)
class MatrixRun:
    """One configuration: a name, the ``validation run`` options, what it tests."""

    name: str
    argv: tuple[str, ...]
    what: str
    quick: bool = False  # part of ``--quick``
    gpus: int = 0  # CUDA devices it needs (``--gpu`` only)


@dataclass(frozen=True)
class CrossRun:
    """Calibrated on ``source``'s probe, predicting ``target``'s policies."""

    source: str
    target: str
    change: str


DIGITS = ("--workload", "digits-cnn", "--global-batch", "128", "--epochs", "4")
# Two emulated devices, rank 1 about 2.5 times slower: per step 2 / 4 ms plus 0.1 / 0.3 ms per sample.
INJECTED = (
    "--delay",
    "0=0.002",
    "--delay",
    "1=0.004",
    "--per-sample-delay",
    "0=0.0001",
    "--per-sample-delay",
    "1=0.0003",
)
# Rank 2 too slow to help: pinned to core 1 beside a neighbour busy 70% of the time, 10 times its
# measured compute (a slowdown follows the machine's load, as the others' compute does) plus 25 ms
# a step: at 1 sample it takes longer than the other two at the whole batch, so ``optimal`` gives it 0.
LEAVE_OUT = ("--slowdown", "2=10", "--delay", "2=0.025", "--cpus", "2=1", "--contention", "2=0.7")
REAL_ONLY = ("--delay", "1=0", "--per-sample-delay", "1=0")  # the default run's injected delay removed

CPU_RUNS: tuple[MatrixRun, ...] = (
    MatrixRun("digits-injected", (*DIGITS, *INJECTED), "2 ranks emulating two devices by injected delays", quick=True),
    MatrixRun(
        "digits-injected-2x",
        (
            *DIGITS,
            "--delay",
            "0=0.002",
            "--delay",
            "1=0.008",
            "--per-sample-delay",
            "0=0.0001",
            "--per-sample-delay",
            "1=0.0006",
        ),
        "as digits-injected with rank 1's delays doubled (cross-run: a delay value)",
        quick=True,
    ),
    MatrixRun(
        "digits-batch-256",
        ("--workload", "digits-cnn", "--global-batch", "256", "--epochs", "8", *INJECTED),
        "as digits-injected with twice the global batch (cross-run: the batch)",
    ),
    MatrixRun("digits-ddp", (*DIGITS, *INJECTED, "--comm", "ddp"), "as digits-injected with DistributedDataParallel"),
    MatrixRun(
        "digits-3-ranks",
        (*DIGITS, "--world-size", "3", *INJECTED, "--delay", "2=0.003", "--per-sample-delay", "2=0.0002"),
        "3 ranks on 2 cores emulating three devices by injected delays",
    ),  # fmt: skip
    MatrixRun(
        "digits-leave-out",
        (*DIGITS, "--world-size", "3", "--policies", "equal,adaptive,optimal", *INJECTED, *LEAVE_OUT),
        "3 ranks, rank 2 pinned beside a neighbour busy 70% of its core, 10x slower and 25 ms a step "
        "later: the fastest split leaves it out",
        quick=True,
    ),  # fmt: skip
    MatrixRun(
        "resnet18-contention",
        (
            "--workload",
            "resnet18",
            "--global-batch",
            "32",
            "--epochs",
            "1",
            *REAL_ONLY,
            "--cpus",
            "0=0,1=1",
            "--contention",
            "1=0.5",
        ),
        "ResNet-18, each rank pinned to a core, a noisy neighbour busy half the time on rank 1's",
        quick=True,
    ),  # fmt: skip
    MatrixRun(
        "transformer-ddp-contention",
        (
            "--workload",
            "transformer",
            "--global-batch",
            "64",
            "--epochs",
            "1",
            *REAL_ONLY,
            "--comm",
            "ddp",
            "--cpus",
            "0=0,1=1",
            "--contention",
            "1=0.3",
        ),
        "a small GPT on Python's own source under DDP, each rank pinned to a core, a noisy neighbour "
        "busy 30% of the time on rank 1's",
    ),  # fmt: skip
    MatrixRun(
        "transformer-slowdown",
        ("--workload", "transformer", "--global-batch", "64", "--epochs", "2", *REAL_ONLY, "--slowdown", "1=2"),
        "the small GPT, rank 1 a device twice as slow (it sleeps as long as its measured compute)",
    ),
)

RESNET_GPU = ("--workload", "resnet18", "--global-batch", "128", "--epochs", "2")
GPT_GPU = ("--workload", "transformer", "--global-batch", "128", "--epochs", "2")
BUSY_HOST = ("--cpus", "0=0", "--contention", "0=0.5")  # the GPU rank's host thread on a core busy half the time


def gpu_runs(n_gpus: int) -> tuple[MatrixRun, ...]:
    """The GPU configurations for a machine with ``n_gpus`` CUDA devices, one rank per GPU (NCCL
    refuses two on one; validation.backend.check_one_rank_per_gpu). One GPU: NCCL, DDP on CUDA
    and the CUDA-event clock in a world of one, made uneven by a noisy neighbour on the rank's
    pinned host core (a launch-bound GPU step waits for its host thread), and a GPU rank beside a
    CPU rank over gloo. Two or more: NCCL across all of them, the last rank delayed (every other
    injected delay set to 0 explicitly: the default run's 0.1 ms per sample on rank 1 is not kept)."""
    runs = []
    if n_gpus >= 1:
        runs += [
            MatrixRun(
                "gpu-mixed",
                ("--workload", "resnet18", "--global-batch", "64", "--epochs", "2", "--devices", "cuda:0,cpu",
                 *REAL_ONLY),
                "ResNet-18 on a GPU and a CPU rank over gloo (mixed devices)",
                quick=True,
                gpus=1,
            ),
            MatrixRun(
                "gpu-nccl-1",
                (*RESNET_GPU, "--world-size", "1", "--devices", "cuda:0", *BUSY_HOST),
                "ResNet-18 on one GPU over NCCL, its host core shared with a neighbour busy half the time",
                quick=True,
                gpus=1,
            ),
            MatrixRun(
                "gpu-nccl-1-ddp",
                (*GPT_GPU, "--world-size", "1", "--devices", "cuda:0", "--comm", "ddp", *BUSY_HOST),
                "the small GPT on one GPU under DDP over NCCL (the CUDA-event clock), its host core shared",
                quick=True,
                gpus=1,
            ),
        ]  # fmt: skip
    if n_gpus >= 2:
        last = n_gpus - 1
        quiet = () if last == 1 else ("--delay", "1=0")  # the default delay of rank 1 off, unless last
        slow = (*quiet, "--per-sample-delay", "1=0", "--delay", f"{last}=0.01")
        many = ("--world-size", str(n_gpus), "--devices", "cuda")
        runs += [
            MatrixRun("gpu-nccl", (*RESNET_GPU, *many, *slow),
                      f"ResNet-18 on {n_gpus} GPUs over NCCL, rank {last} slowed by an injected 10 ms", gpus=2),
            MatrixRun("gpu-nccl-ddp", (*GPT_GPU, *many, "--comm", "ddp", *slow),
                      f"the small GPT on {n_gpus} GPUs, DDP over NCCL, rank {last} slowed by an injected 10 ms",
                      gpus=2),
        ]  # fmt: skip
    return tuple(runs)


RUNS = CPU_RUNS + gpu_runs(2)  # every configuration, as listed in validation/README.md (GPU ones for two GPUs)

CROSS: tuple[CrossRun, ...] = (
    CrossRun("digits-injected", "digits-injected-2x", "the injected delay doubled"),
    CrossRun("digits-injected-2x", "digits-injected", "the injected delay halved"),
    CrossRun("digits-injected", "digits-batch-256", "the global batch doubled"),
    CrossRun("digits-injected", "digits-ddp", "DDP instead of the flat all-reduce"),
)


def select(quick: bool, gpus: int) -> tuple[list[MatrixRun], list[CrossRun]]:
    """The runs of the matrix (``quick``: the quick ones), with the GPU runs made for ``gpus``
    devices (:func:`gpu_runs`), and the cross-run predictions whose two runs are both in it."""
    runs = [r for r in (*CPU_RUNS, *gpu_runs(gpus)) if r.quick or not quick]
    names = {r.name for r in runs}
    return runs, [c for c in CROSS if c.source in names and c.target in names]


def is_complete(folder: Path) -> bool:
    """A run folder whose meta.json says the run finished."""
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8")).get("status") == "complete"
    except (OSError, ValueError, AttributeError):
        return False


MATRIX_FILES = ("runs", "results.json", "predictions.csv", "load.csv", "matrix.png")
EXPORTED = "trace.json"  # `hetsim export-trace RUN`'s default output, in the run folder (the Perfetto guide's)
RUN_FILES = ("meta.json", "trace.parquet", "trace.csv", "epochs.csv", "evals.csv", "summary.json", "profiler", EXPORTED)


def check_matrix_folder(out: Path) -> None:
    """``--out`` may hold a matrix's own files only (a rerun resumes it, and replaces every
    unfinished run's folder): anything else, a run folder's own files above all, is refused
    before a run starts, so that nothing of the user's is deleted. Any configuration's folder
    may be there (a full matrix's, resumed with ``--quick``)."""
    from hetsim.core.files import check_own_folder

    check_own_folder(out, "--out", MATRIX_FILES, "validation matrix")
    names = [r.name for r in RUNS]
    check_own_folder(out / "runs", "--out", [*names, *(f"{n}.log" for n in names)], "validation matrix")
    for name in names:
        check_own_folder(out / "runs" / name, "--out", RUN_FILES, "validation run")


def run_one(run: MatrixRun, runs_dir: Path, echo: Echo) -> bool:
    """``python -m validation run`` for one configuration (skipped when its folder is complete)."""
    folder = runs_dir / run.name
    if is_complete(folder):
        echo(f"{run.name}: complete already, kept")
        return True
    shutil.rmtree(folder, ignore_errors=True)
    echo(f"{run.name}: {run.what}")
    log = runs_dir / f"{run.name}.log"
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(  # the launcher dies with the matrix (its ranks and neighbours follow it)
            [sys.executable, "-m", "validation", "run", *run.argv, "--out", str(folder)],
            stdout=out,
            stderr=out,
            preexec_fn=die_with_parent,
        )
    if done.returncode != 0:
        echo(f"{run.name}: failed (exit status {done.returncode}; see {log})")
    return done.returncode == 0


@dataclass(frozen=True)
class Prediction:
    """One policy of one configuration, predicted one way."""

    config: str
    kind: str  # same-run | cross-run
    calibrated_on: str
    change: str
    comparison: Comparison

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "kind": self.kind,
            "calibrated_on": self.calibrated_on,
            "change": self.change,
            **self.comparison.to_dict(),
        }


def predictions(runs: Sequence[MatrixRun], cross: Sequence[CrossRun], runs_dir: Path) -> list[Prediction]:
    """Every same-run prediction of the runs that finished, then every cross-run one."""
    from validation.compare import compare_across, compare_run
    from validation.run_folder import load_run

    done = {r.name: load_run(runs_dir / r.name) for r in runs if is_complete(runs_dir / r.name)}
    out: list[Prediction] = []
    calibrations: dict[str, Calibration] = {}
    for name, run in done.items():  # each run calibrated once, for its own and the cross-run predictions
        comparisons, calibrations[name] = compare_run(run)
        out.extend(Prediction(name, "same-run", name, "", c) for c in comparisons)
    for pair in cross:
        if pair.source in done and pair.target in done:
            source, target = done[pair.source], done[pair.target]
            comparisons = compare_across(source, target, calibration=calibrations[pair.source])
            out.extend(Prediction(pair.target, "cross-run", pair.source, pair.change, c) for c in comparisons)
    return out


def run_matrix(
    out: Path, runs: Sequence[MatrixRun], cross: Sequence[CrossRun], echo: Echo
) -> tuple[list[Prediction], list[str], LoadSampler]:
    """Run (or resume) every configuration while sampling the machine's load; the predictions,
    the configurations that failed, and the load samples."""
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    with LoadSampler() as load:
        for run in runs:
            load.label = run.name
            if not run_one(run, runs_dir, echo):
                failed.append(run.name)
        load.label = ""
    return predictions(runs, cross, runs_dir), failed, load
