"""The batch sweep's plot: steps to the target against the global batch, measured (every seed and
the median) beside two predictions, the plain single-noise-scale model from the base runs and
the model fitted on every batch (:mod:`hetsim.calibrate.efficiency_runs`), on log-log axes. It draws from
``results.json`` alone, so a results folder's plot can be redrawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from hetsim.calibrate.efficiency_runs import fitted_model, load_sweeps, missed, plain_model, reached
from hetsim.core.errors import ConfigError
from validation.batch_sweep import median_of_every_run
from validation.workloads.plugins import short_spec


def plot(results: Path, out: Path) -> Path:
    """Draw ``results`` (a results.json) into the PNG ``out``."""
    sweep = load_sweeps([results])
    fig = Figure(figsize=(6.0, 4.2))
    ax = fig.add_subplot()
    runs, cut = reached(sweep), [p for p in missed(sweep) if p.steps_run]
    batches = sorted({p.batch for p in sweep.points})
    ax.scatter(
        [p.batch for p in runs], [float(p.steps or 0) for p in runs], s=14, color="0.55", label="measured (each seed)"
    )
    if cut:  # a run that missed the target needs more steps than it ran
        ax.scatter([p.batch for p in cut], [float(p.steps_run or 0) for p in cut], s=22, marker="^", color="0.55",
                   label="missed the target: more than the steps it ran")  # fmt: skip
    # the median over every seed, a missed run counted as more than it ran (none drawn where that is the middle)
    middle = [median_of_every_run([p.steps for p in sweep.points if p.batch == b]) for b in batches]
    medians = [m if np.isfinite(m) else np.nan for m in middle]
    ax.plot(batches, medians, "o-", color="black", label="measured (median of every seed)")
    grid = np.geomspace(min(batches), max(batches), 60)
    try:  # each model where the runs allow it (too few reached the target: the measurements alone)
        plain = plain_model(sweep)
        ax.plot(grid, [plain.steps_to_target(b) for b in grid], "--", color="tab:blue",
                label=f"plain model (B_noise {plain.noise_scale:.0f}, from the base runs)")  # fmt: skip
    except ConfigError:
        pass
    try:
        e = fitted_model(sweep).efficiency
        ax.plot(grid, [e.steps_to_target(b) for b in grid], "-", color="tab:orange",
                label=f"fitted on every batch (B_noise {e.noise_scale:.0f}, alpha {e.batch_exponent:.2f})")  # fmt: skip
    except ConfigError:
        pass
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("global batch (samples)")
    ax.set_ylabel(f"steps to held-out accuracy {sweep.target:g}")
    optimizer = {"sgd": "SGD", "adam": "Adam"}.get(sweep.optimizer, sweep.optimizer)
    shown = short_spec(sweep.workload)  # a plug-in's FILE.py:ATTR: the file's name, not its path
    ax.set_title(f"{shown}, {optimizer}, learning rate scaled by {sweep.lr_scaling}", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out
