"""Every worker of a trace -> a fit, or what little is known of a worker too idle to fit.

A policy may leave a worker without samples (``optimal`` and ``adaptive`` on a cluster with a
device too slow to help), or a backup policy may cut it every step. Such a worker cannot be
fitted, yet it is part of the cluster: the calibrated scenario keeps it, with a cost that is a
lower bound (:class:`IdleWorker`), and the calibration says which workers those are.

* Offered samples but cut every time: its compute at the smallest batch it was offered took
  longer than the time it ran before it was cut (the median of those times is the bound kept).
* Too few complete computes to fit (fewer than two, or than three at two or more batch sizes:
  a fit needs one more row than it has parameters, or it has no noise to speak of): the mean
  time at its smallest such batch is kept, said to be a measurement.
* Never offered samples: a min-max split (``optimal``, ``adaptive``) leaves a worker idle when
  even a small batch would make it the slowest, so its time is at least the step's compute
  time without it (the median over steps of the slowest complete compute). Under any other
  policy the bound is only what the split implies, and the warning says so.

The bound is written as a flat cost (overhead at the bound, a negligible per-sample cost), so
a simulation of the scenario leaves the worker idle, as the trace did, rather than guessing a
speed the trace never showed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hetsim.calibrate.worker_fit import MIN_COMPLETE, WorkerFit, fit_worker
from hetsim.core.errors import ConfigError
from hetsim.model.costs import CostModel

FLAT = 1e-9  # the per-sample cost of a bound written as a flat curve, relative to the bound per sample


@dataclass(frozen=True)
class IdleWorker:
    """A worker with too few complete computes: its time at ``batch`` samples (None: it was never
    given samples) is ``time_s``, at least (``lower_bound``) or as measured on its few complete
    computes, and ``basis`` says why."""

    worker: int
    rows: int
    offered_rows: int  # rows with samples (all of them cut, or one complete)
    batch: int | None
    time_s: float
    basis: str
    lower_bound: bool = True  # false: time_s is the mean of complete computes

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "rows": self.rows,
            "offered_rows": self.offered_rows,
            "batch": self.batch,
            "time_s": self.time_s,
            "lower_bound": self.lower_bound,
            "basis": self.basis,
        }

    @property
    def summary(self) -> str:
        """What the scenario keeps of it and why (its ``unfitted`` key and its warning)."""
        return (
            f"not fitted ({self.basis}); kept with a flat cost of {self.time_s:.4g} s, so a policy that gives it "
            "samples gets an optimistic answer"
        )

    def to_scenario(self, name: str) -> dict[str, Any]:
        per_sample = FLAT * self.time_s / max(self.batch or 1, 1)
        return {
            "name": name, "count": 1, "overhead_s": self.time_s, "per_sample_s": per_sample, "unfitted": self.summary,
        }  # fmt: skip


def fit_workers(
    frame: pd.DataFrame, done: np.ndarray, workers: list[int], model: type[CostModel] | None, warnings: list[str]
) -> tuple[list[WorkerFit], list[IdleWorker]]:
    """Each worker's fit, rows in step order, or its :class:`IdleWorker` (with a warning line);
    ConfigError when no worker can be fitted (a one-row trace, say: one step fits nothing)."""
    fits, left = [], []
    column = frame["worker"].to_numpy()
    batch, compute = frame["local_batch"].to_numpy(), frame["compute_s"].to_numpy()
    for w in workers:
        rows = column == w
        complete = rows & (batch > 0) & done
        if int(complete.sum()) >= (MIN_COMPLETE if np.unique(batch[complete]).size < 2 else MIN_COMPLETE + 1):
            fit, notes = fit_worker(w, batch[rows], compute[rows], done[rows], model)
            fits.append(fit)
            warnings.extend(notes)
        else:
            left.append(w)
    if not fits:
        raise ConfigError(
            "compute_s",
            f"no worker has {MIN_COMPLETE} complete computes (rows with samples, included): one step fits neither a "
            "worker's noise nor two parameters",
        )
    slowest = frame.loc[done & (batch > 0)].groupby("step")["compute_s"].max().median() if left else 0.0
    policy = str(frame["policy"].iloc[0]) if "policy" in frame.columns else "the policy"
    idle = [_idle(w, column == w, batch, compute, done, float(slowest), policy) for w in left]
    warnings.extend(_idle_line(i) for i in idle)
    return fits, idle


def _idle(w: int, rows: np.ndarray, batch: np.ndarray, compute: np.ndarray, done: np.ndarray, slowest: float,
          policy: str) -> IdleWorker:  # fmt: skip
    """What is known of worker ``w`` (the module docstring's three cases); ``slowest``: the median
    over steps of the slowest complete compute."""
    offered = rows & (batch > 0)
    complete = offered & done
    if not offered.any():
        basis = (
            f"never given samples by {policy}; where a split by speed (optimal, adaptive) left it idle, its time "
            f"would have exceeded the others' step ({slowest:.4g} s, the median slowest compute), a lower bound; "
            "where the split was set by hand, the trace tells nothing of its cost"
        )
        return IdleWorker(w, int(rows.sum()), 0, None, slowest, basis)
    if complete.any():  # too few to fit: the mean time at its smallest batch with a complete compute
        smallest = int(batch[complete].min())
        mean = float(compute[complete & (batch == smallest)].mean())
        basis = (
            f"{int(complete.sum())} complete compute(s), too few to fit: kept at its mean time {mean:.4g} s at "
            f"batch {smallest}, a measurement, not a bound"
        )
        return IdleWorker(w, int(rows.sum()), int(offered.sum()), smallest, mean, basis, lower_bound=False)
    smallest = int(batch[offered].min())
    times = compute[offered & (batch == smallest)]
    median = float(np.median(times))
    basis = (
        f"cut at the barrier in all {times.size} of its steps at batch {smallest}, after a median {median:.4g} s: "
        "its time there is longer, that is a lower bound"
    )
    return IdleWorker(w, int(rows.sum()), int(offered.sum()), smallest, median, basis)


def _idle_line(idle: IdleWorker) -> str:
    return f"worker {idle.worker}: {idle.summary}"


def scenario_workers(fits: list[WorkerFit], idle: list[IdleWorker], caps: Mapping[int, int]) -> list[dict[str, Any]]:
    """The ``[[workers]]`` entries in worker order, fitted and idle alike, with the ``caps``
    (worker -> max_batch) the trace shows."""
    entries = [(f.worker, f.to_scenario(f"w{f.worker}")) for f in fits]
    entries += [(i.worker, i.to_scenario(f"w{i.worker}")) for i in idle]
    return [entry | ({"max_batch": caps[w]} if w in caps else {}) for w, entry in sorted(entries, key=lambda e: e[0])]
