"""``python -m validation batch-sweep``: one workload trained to a target accuracy at a ladder of
global batches (multiples of a base), under a named learning-rate rule, over seeds; the
measurement that tests :mod:`hetsim.model.efficiency`'s model of how steps to a target change with the
batch (issue 28).

Each (batch, seed) run is :func:`validation.batch_sweep_train.train_to_target` on one thread,
one after another in this process, or ``--jobs`` at once in as many processes (each run's
recorded times then share the machine; its steps do not depend on it). The results folder,
written atomically (:func:`hetsim.core.files.atomic_folder`): ``results.json`` (the settings,
provenance, one entry per run: steps and time to the target, the noise scale over training),
``curve.csv`` (the held-out curves), ``noise.csv`` (the estimator's block sums) and
``steps_to_target.png`` (measured steps against the batch, with the plain model's prediction
from the base runs and the model fitted on every batch, :mod:`hetsim.calibrate.efficiency_runs`).
Each run is also kept as it finishes (:mod:`validation.batch_sweep_resume`): the same command
after a stop reruns only the runs not kept.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetsim.core.console import parse_counts
from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_LR, Param, typename
from validation.batch_sweep_cli import MAX_FIRST_SEED, OPTIMIZER_NAMES
from validation.batch_sweep_resume import KEPT
from validation.workloads.sweep_defaults import UNDECLARED, SweepDefaults

MAX_STEPS = 1_000_000  # --max-steps, --eval-gap: a run's steps at most (days of a small model's steps)
RESULT_FILES = ("results.json", "curve.csv", "noise.csv", "steps_to_target.png", KEPT)  # what a results folder holds


@dataclass(frozen=True)
class SweepConfig:
    workload: str
    multiples: tuple[int, ...]
    base_batch: int
    optimizer: str  # a key of validation.batch_sweep_train.OPTIMIZERS
    lr: float
    lr_scaling: str
    seeds: int
    target: float
    max_steps: int
    eval_gap: int
    out: Path
    jobs: int = 1  # runs at once, each in its own process
    first_seed: int = 0  # seeds first_seed .. first_seed + seeds - 1 (a second set beside a first)


def build_config(args: argparse.Namespace) -> SweepConfig:
    from validation.workloads import resolve_workload
    from validation.workloads.plugins import canonical_spec

    workload = resolve_workload(args.workload)  # an unknown name or a broken file first, in one line
    spec = canonical_spec(args.workload)  # a file's absolute path: the same sweep from any folder, resumed or fitted
    given = _declared(workload.sweep_defaults, args.workload)
    if given is None:  # a workload that declares none: what the sweep cannot guess is the user's to give
        for option, value in (("--base-batch", args.base_batch), ("--lr", args.lr), ("--target", args.target)):
            if value is None:
                raise ConfigError(option, f"needed for {args.workload!r}, which declares no sweep defaults "
                                  "(Workload.sweep_defaults)")  # fmt: skip
        given = UNDECLARED
    if not workload.has_accuracy():
        raise ConfigError("--workload", f"{args.workload}'s held-out labels are not classes: batch-sweep trains to a "
                          "held-out accuracy (--target), which a regression's loss does not have")  # fmt: skip
    multiples = _multiples(args.batches)
    out = args.out or Path("runs") / time.strftime("batch-sweep-%Y%m%d-%H%M%S")
    pick = lambda value, default: default if value is None else value  # noqa: E731
    base = int(LIMITS["base_batch"].check(pick(args.base_batch, given.base_batch)))
    n_train = workload.train_size()
    if base > n_train:
        raise ConfigError("--base-batch", f"{base} samples, more than {args.workload}'s training set ({n_train})")
    if max(multiples) * base > n_train:  # a step would cut one epoch's permutation short of its batch
        raise ConfigError("--batches", f"{max(multiples)} x the base batch {base} is {max(multiples) * base} samples, "
                          f"more than {args.workload}'s training set ({n_train})")  # fmt: skip
    cap = given.quick_max_steps if args.quick else given.max_steps
    return SweepConfig(
        spec, multiples, base,
        pick(args.optimizer, given.optimizer),
        float(LIMITS["lr"].check(pick(args.lr, given.lr))),
        args.lr_scaling, int(Param("--seeds", "integer", low=1, high=100).check(args.seeds)),
        float(LIMITS["target"].check(pick(args.target, given.target))),
        int(LIMITS["max_steps"].check(pick(args.max_steps, cap))),
        int(LIMITS["eval_gap"].check(pick(args.eval_gap, given.eval_gap))), out,
        int(Param("--jobs", "integer", low=1, high=64).check(args.jobs)),
        int(Param("--first-seed", "integer", low=0, high=MAX_FIRST_SEED).check(args.first_seed)),
    )  # fmt: skip


# Each setting's check, on its option; a workload's declared default (SweepDefaults' field) passes the same one
LIMITS = {
    "base_batch": Param("--base-batch", "integer", low=1),
    "optimizer": Param("--optimizer", "choice", choices=OPTIMIZER_NAMES),
    "lr": Param("--lr", low=0.0, low_open=True, high=MAX_LR),
    "target": Param("--target", low=0.0, low_open=True, high=1.0),
    "max_steps": Param("--max-steps", "integer", low=1, high=MAX_STEPS),
    "quick_max_steps": Param("--max-steps", "integer", low=1, high=MAX_STEPS),
    "eval_gap": Param("--eval-gap", "integer", low=1, high=MAX_STEPS),
}


def _declared(given: object, name: str) -> SweepDefaults | None:
    """A workload's ``sweep_defaults``, each value checked as its option would be, and refused on
    ``--workload`` naming the workload (the user typed no option to blame)."""
    if given is not None and not isinstance(given, SweepDefaults):
        raise ConfigError("--workload", f"{name}'s sweep_defaults must be a SweepDefaults "
                          f"(validation.workloads.sweep_defaults), got {typename(given)}")  # fmt: skip
    if given is None:
        return None
    for key, check in LIMITS.items():
        try:
            check.check(getattr(given, key))
        except ConfigError as exc:
            raise ConfigError("--workload", f"{name}'s sweep_defaults.{key} {exc.problem}") from None
    return given


def _multiples(text: str) -> tuple[int, ...]:
    """``--batches``: distinct whole multiples of the base batch, 1 among them, in order."""
    multiples = parse_counts(text, "--batches")
    if 1 not in multiples:
        raise ConfigError("--batches", "must include 1 (the base batch the models are fitted at)")
    return tuple(sorted(multiples))


def point_entry(result: Any, noise_rows: list[dict[str, float]]) -> dict[str, Any]:
    """A run's entry in ``results.json``: its figures and its noise scale over training (whole
    run; first quarter of the progress to the target and the shape after it)."""
    from hetsim.model.efficiency_fit import noise_shape

    g = sum(r["grad_sq"] for r in noise_rows)
    t = sum(r["trace"] for r in noise_rows)
    end = result.steps_to_target or result.steps_run
    first, shape = noise_shape([r["step"] for r in noise_rows], [r["grad_sq"] for r in noise_rows],
                               [r["trace"] for r in noise_rows], end)  # fmt: skip
    whole = t / g if g > 0 and t > 0 else None
    return {**result.to_dict(), "noise_scale": whole, "noise_first": first, "noise_shape": [list(k) for k in shape]}


def run_point(config: SweepConfig, seed: int, multiple: int) -> Any:
    """One (seed, batch) run in this process, on one thread: its
    :class:`~validation.batch_sweep_train.PointResult`."""
    import torch

    from validation.batch_sweep_train import OPTIMIZERS, scaled_lr, train_to_target
    from validation.workloads import resolve_workload

    torch.set_num_threads(1)  # one core a run: the time per step is the step's, not the machine's
    workload = resolve_workload(config.workload)
    batch = multiple * config.base_batch
    lr = scaled_lr(config.lr, batch, config.base_batch, config.lr_scaling)
    data = workload.load(seed, torch.device("cpu"))
    return train_to_target(workload, data, seed, batch, lr, OPTIMIZERS[config.optimizer], config.target,
                           config.max_steps, config.eval_gap)  # fmt: skip


class RunFailed(Exception):
    """A run raised (the workload's code: its loss, its model), at ``batch`` and ``seed``."""

    def __init__(self, batch: int, seed: int, error: BaseException) -> None:
        from validation.workloads.plugins import first_line

        self.batch, self.seed = batch, seed
        super().__init__(first_line(error))


def _outcome(config: SweepConfig, task: tuple[int, int], run: Any) -> Any:
    """``run()``'s result; RunFailed where the workload's own code raised in it (its loss, its
    model), naming the run (a process that died, BrokenProcessPool, is not the run's)."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        return run()
    except (BrokenProcessPool, ConfigError):  # a process that died; a refusal, already one line
        raise
    except (Exception, SystemExit) as exc:
        raise RunFailed(task[1] * config.base_batch, task[0], exc) from exc


def _in_processes(config: SweepConfig, tasks: list[tuple[int, int]], done: Any) -> None:
    """The runs of ``tasks``, ``config.jobs`` at once, each in its own process; ``done(task,
    result)`` as each finishes. Ctrl-C, SIGTERM or a failed run stop the rest at once."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: a fresh interpreter per worker, not a fork of one that may hold torch's threads
    pool = ProcessPoolExecutor(config.jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(run_point, config, *task): task for task in tasks}
        for future in as_completed(futures):
            done(futures[future], _outcome(config, futures[future], future.result))
    except BaseException:  # Ctrl-C, SIGTERM, a run that failed: the finished runs are kept, the rest stopped now
        stop_workers(pool)
        raise
    pool.shutdown()


def run_sweep(
    config: SweepConfig, echo: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Every (batch, seed) run, ``config.jobs`` at once (each in its own process when more than
    one): the results' entries, the curve rows and the noise rows, in (seed, batch) order."""
    from validation.batch_sweep_resume import keep, kept
    from validation.workloads.plugins import short_spec

    seeds = range(config.first_seed, config.first_seed + config.seeds)
    tasks = [(seed, k) for seed in seeds for k in config.multiples]
    results: dict[tuple[int, int], Any] = {}
    for seed, k in tasks:  # a rerun of a sweep that stopped: the runs it finished are kept
        if (r := kept(config, k * config.base_batch, seed)) is not None:
            results[(seed, k)] = r
    if results:
        echo(f"{len(results)} of {len(tasks)} runs kept from an earlier start of this sweep in {config.out}")
    tasks_left = [t for t in tasks if t not in results]

    def done(task: tuple[int, int], r: Any) -> None:
        results[task] = r
        keep(config, r)
        to_target = f"{r.steps_to_target} steps" if r.steps_to_target else f"not reached in {r.steps_run} steps"
        echo(f"{short_spec(config.workload)} batch {r.batch} seed {r.seed}: {to_target} "
             f"({r.mean_step_s * 1e3:.1f} ms a step)")  # fmt: skip

    if config.jobs == 1:
        for task in tasks_left:
            done(task, _outcome(config, task, functools.partial(run_point, config, *task)))
    else:
        _in_processes(config, tasks_left, done)
    points, curve, noise = [], [], []
    for task in tasks:
        r = results[task]
        points.append(point_entry(r, r.noise))
        curve += [{"batch": r.batch, "seed": r.seed, **row} for row in r.curve]
        noise += [{"batch": r.batch, "seed": r.seed, **row} for row in r.noise]
    return points, curve, noise


def write_results(config: SweepConfig, points: list[dict[str, Any]], curve: list[dict[str, Any]],
                  noise: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """The results folder (see the module's docstring), atomically; returns results.json's data."""
    import pandas as pd

    from hetsim.core.files import atomic_folder, write_json
    from hetsim.core.provenance import provenance
    from validation.batch_sweep_plot import plot
    from validation.batch_sweep_train import MOMENTUM

    data = {
        "provenance": provenance(), "workload": config.workload, "base_batch": config.base_batch,
        "batches": [k * config.base_batch for k in config.multiples], "optimizer": config.optimizer,
        "momentum": MOMENTUM if config.optimizer == "sgd" else None, "lr": config.lr,
        "lr_scaling": config.lr_scaling, "seeds": config.seeds,
        "first_seed": config.first_seed, "target_accuracy": config.target,
        "max_steps": config.max_steps, "eval_gap": config.eval_gap, "jobs": config.jobs, "points": points,
    }  # fmt: skip
    with atomic_folder(config.out, "--out") as tmp:
        write_json(tmp / "results.json", data)
        pd.DataFrame(curve).to_csv(tmp / "curve.csv", index=False)
        pd.DataFrame(noise).to_csv(tmp / "noise.csv", index=False)
        plot(tmp / "results.json", tmp / "steps_to_target.png")
    return data


def stop_workers(pool: Any) -> None:
    """End a process pool's runs at once: its queued runs cancelled, its workers terminated (a
    pool left to its ``with`` block ran every queued run first, and a launcher killed by SIGTERM
    left its workers running, orphaned). Python 3.11's pool has no public way to end its workers."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def summary(data: dict[str, Any]) -> str:
    """Median steps to the target per batch."""
    lines = []
    for batch in data["batches"]:
        points = [p for p in data["points"] if p["batch"] == batch]
        got = sum(p["steps_to_target"] is not None for p in points)
        median = censored_median([p["steps_to_target"] for p in points], [p.get("steps_run") for p in points])
        lines.append(f"batch {batch}: median steps to {data['target_accuracy']:g} = {median} ({got}/{len(points)})")
    return "\n".join(lines)


def median_of_every_run(steps: Sequence[float | None]) -> float:
    """The median steps to the target, a run that missed it (None) counted as more than any:
    infinite where such a run is the middle."""
    return float(np.median([math.inf if s is None else float(s) for s in steps]))


def censored_median(steps: Sequence[float | None], steps_run: Sequence[float | None]) -> str:
    """The median steps to the target over every run, a run that missed it counted as more than it
    ran (leaving it out kept the fast seeds and read low); ``more than N`` where the middle is such
    a run, N the fewest steps any of them ran."""
    if not steps:
        return "-"
    middle = median_of_every_run(steps)
    if math.isfinite(middle):
        return f"{middle:.0f}"
    ran = [float(r) for s, r in zip(steps, steps_run) if s is None and r is not None]
    return f"more than {min(ran):.0f}" if ran else "not reached"
