"""Batch-sweep results (``python -m validation batch-sweep``'s ``results.json``) as fits of
``[workload.efficiency]``: what ``hetsim calibrate-efficiency``, the sweep's plot and
``benchmarks/batch_scaling.py`` share.

A results file holds one workload's runs to a target accuracy at several global batches and
seeds, under one optimizer and learning-rate rule: per run (``points``) the batch, the seed, the steps to the
target (None: not reached; such a run enters a fit as censored at the steps it ran, when the
results say how many) and the estimator's noise scale over training
(``noise_first`` and ``noise_shape``, :func:`hetsim.model.efficiency_fit.noise_shape`). Two models are
fitted from the runs at chosen batches: the plain one (today's: one noise scale, the median of
the base runs' estimates over the whole run, and the target from their steps) and the fitted
one (:func:`hetsim.model.efficiency_fit.fit`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_COUNT, MAX_LR, Param, first_repeat, typename
from hetsim.model.efficiency import LR_RULES, OPTIMIZERS, Efficiency
from hetsim.model.efficiency_fit import Fit, Shape, fit

RESULTS = "results.json"


@dataclass(frozen=True)
class Point:
    batch: int
    seed: int
    steps: float | None  # to the target (None: not reached)
    noise_scale: float | None  # the whole run's estimate
    noise_first: float | None  # the first quarter of progress's
    shape: Shape
    steps_run: float | None = None  # the steps it ran (None: not recorded)


@dataclass(frozen=True)
class Sweep:
    workload: str
    base_batch: int
    lr_scaling: str
    target: float
    points: tuple[Point, ...]
    optimizer: str = "sgd"  # results written before the sweep named its optimizer were all SGD's
    lr: float | None = None  # the learning rate at the base batch (None: not recorded)
    eval_gap: int | None = None  # the fewest steps between evaluations: steps known to that many (None: not recorded)


def _point(entry: Any, where: str) -> Point:
    if not isinstance(entry, dict):
        raise ConfigError(where, f"must be a table, got {typename(entry)}")
    get = lambda key, p: p.check(entry.get(key))  # noqa: E731
    shape = get("noise_shape", Param(f"{where}.noise_shape", "points", default=None)) or ()
    steps = get("steps_to_target", Param(f"{where}.steps_to_target", default=None, low=1.0, high=MAX_COUNT))
    run = get("steps_run", Param(f"{where}.steps_run", default=None, low=1.0, high=MAX_COUNT))
    if steps is not None and run is not None and run < steps:
        raise ConfigError(f"{where}.steps_run", f"{run:g} is fewer than its steps_to_target {steps:g}")
    noise = Param(f"{where}.noise_scale", default=None, low=0.0, low_open=True)  # samples: an estimate is > 0
    return Point(
        int(get("batch", Param(f"{where}.batch", "integer", low=1, high=MAX_COUNT))),
        int(get("seed", Param(f"{where}.seed", "integer", low=0))),
        steps,
        get("noise_scale", noise),
        get("noise_first", replace(noise, name=f"{where}.noise_first")),
        shape,
        run,
    )


def load_sweeps(paths: Sequence[Path]) -> Sweep:
    """The runs of one or more results folders (or files) of the same workload, base batch and
    learning-rate rule."""
    sweeps = []
    for path in paths:
        file = Path(path) / RESULTS if Path(path).is_dir() else Path(path)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError("RUN", f"cannot read {file}: {exc.strerror or exc}") from None
        except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested past the parser's depth
            raise ConfigError("RUN", f"{file} is not JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("points"), list):
            raise ConfigError(f"{file}:points", "missing (not a batch-sweep results file)")
        if not isinstance(data.get("workload"), str) or not data["workload"]:
            raise ConfigError(f"{file}:workload", f"must be the workload's name, got {typename(data.get('workload'))}")
        sweeps.append(Sweep(
            str(data.get("workload")), int(Param(f"{file}:base_batch", "integer", low=1).check(data.get("base_batch"))),
            Param(f"{file}:lr_scaling", "choice", choices=LR_RULES).check(data.get("lr_scaling")),
            float(Param(f"{file}:target_accuracy", low=0.0, low_open=True, high=1.0).check(
                data.get("target_accuracy"))),
            tuple(_point(e, f"{file}:points.{i}") for i, e in enumerate(data["points"])),
            str(Param(f"{file}:optimizer", "choice", choices=OPTIMIZERS).check(data.get("optimizer", "sgd"))),
            Param(f"{file}:lr", default=None, low=0.0, low_open=True, high=MAX_LR).check(data.get("lr")),
            Param(f"{file}:eval_gap", "integer", default=None, low=1).check(data.get("eval_gap")),
        ))  # fmt: skip
    first = sweeps[0]
    for other, path in zip(sweeps[1:], paths[1:]):
        for key in ("workload", "base_batch", "lr_scaling", "target", "optimizer", "lr", "eval_gap"):
            mine, theirs = getattr(other, key), getattr(first, key)
            if mine != theirs and not (key in ("lr", "eval_gap") and None in (mine, theirs)):  # None: not recorded
                raise ConfigError("RUN", f"{path}: {key} {mine!r} differs from the first's ({theirs!r})")
    _check_each_run_once(sweeps, paths)
    return Sweep(first.workload, first.base_batch, first.lr_scaling, first.target,
                 tuple(p for s in sweeps for p in s.points), first.optimizer,
                 next((s.lr for s in sweeps if s.lr is not None), None),  # the rate where any sweep recorded it
                 next((s.eval_gap for s in sweeps if s.eval_gap is not None), None))  # fmt: skip


def _check_each_run_once(sweeps: Sequence[Sweep], paths: Sequence[Path]) -> None:
    """A folder given twice, or a run (batch, seed) in two folders, would count one run twice and
    shrink every standard error by its weight."""
    i = first_repeat([Path(p).resolve() for p in paths])
    if i is not None:
        raise ConfigError("RUN", f"{paths[i]} is given twice")
    seen: dict[tuple[int, int], Path] = {}
    for sweep, path in zip(sweeps, paths):
        for p in sweep.points:
            first = seen.setdefault((p.batch, p.seed), Path(path))
            if first != Path(path) or sum(q.batch == p.batch and q.seed == p.seed for q in sweep.points) > 1:
                where = f"also in {first}" if first != Path(path) else "in it twice"
                raise ConfigError("RUN", f"{path}: the run at batch {p.batch}, seed {p.seed} is {where}")


def reached(sweep: Sweep, batches: Sequence[int] | None = None) -> list[Point]:
    """The runs that reached the target, at ``batches`` (None: all)."""
    return [p for p in sweep.points if p.steps is not None and (batches is None or p.batch in batches)]


def missed(sweep: Sweep, batches: Sequence[int] | None = None) -> list[Point]:
    """The runs that stopped before the target, at ``batches`` (None: all)."""
    return [p for p in sweep.points if p.steps is None and (batches is None or p.batch in batches)]


def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None and v > 0]
    return float(np.median(kept)) if kept else None


def plain_model(sweep: Sweep) -> Efficiency:
    """One noise scale (the base runs' median whole-run estimate) and the base runs' median steps."""
    base = reached(sweep, [sweep.base_batch])
    noise = _median([p.noise_scale for p in base])
    if not base or noise is None:
        raise ConfigError("RUN", f"no run at the base batch {sweep.base_batch} reached the target with a noise scale")
    return Efficiency(noise, sweep.base_batch, float(np.median([p.steps for p in base])), lr_scaling=sweep.lr_scaling,
                      fit_batches=(sweep.base_batch, sweep.base_batch))  # fmt: skip


def fitted_model(sweep: Sweep, batches: Sequence[int] | None = None, schedule: bool = False,
                 exponent: bool = True) -> Fit:  # fmt: skip
    """:func:`~hetsim.model.efficiency_fit.fit` on the runs at ``batches`` that reached the target,
    and as censored those that stopped before it after the steps they recorded, starting from the
    base runs' noise scale (``schedule``: their median shape over progress)."""
    if not sweep.points:
        raise ConfigError("RUN", "the sweep holds no runs (its results.json lists no points)")
    runs = reached(sweep, batches)
    if not runs:
        held = ", ".join(str(b) for b in sorted({p.batch for p in sweep.points}))
        asked = "" if batches is None else f" ({', '.join(map(str, batches))})"
        field = "RUN" if batches is None else "--batches"
        raise ConfigError(field, f"no run reached the target at the global batches asked for{asked}; the sweep "
                          f"holds {held}")  # fmt: skip
    base = reached(sweep, [sweep.base_batch])
    if schedule:  # a run whose first span of progress had no estimate measured a later span's "first"
        base = [p for p in base if p.shape and p.shape[0][0] == 0.0]
        if not base:
            raise ConfigError("RUN", f"--schedule: no run at the base batch {sweep.base_batch} that reached the "
                              "target measured its noise scale in the first span of its progress")  # fmt: skip
    noise = _median([(p.noise_first if schedule else p.noise_scale) for p in base])
    shape: Shape = ()
    if schedule:  # the median ratio at each point of the most common grid of progress (the longest among ties)
        grids = [tuple(at for at, _ in p.shape) for p in base]
        grid = max(set(grids), key=lambda g: (grids.count(g), len(g)))
        shapes = [p.shape for p in base if tuple(at for at, _ in p.shape) == grid]
        ratios = np.median([[r for _, r in s] for s in shapes], axis=0)
        shape = tuple((at, float(r)) for at, r in zip(grid, ratios))
    cut = [(float(p.batch), p.steps_run) for p in missed(sweep, batches) if p.steps_run]
    return fit([p.batch for p in runs], [float(p.steps or 0) for p in runs], sweep.base_batch, noise, shape,
               sweep.lr_scaling, exponent, cut)  # fmt: skip
