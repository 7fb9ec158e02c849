"""Whether a run folder's trace measured what it should: the checks ``gpu-check`` makes over
every run it starts, as pure functions of the folder (so they run, and are tested, on CPU runs).

* **No negative time**: every ``compute_s``, ``wait_s`` and ``comm_s`` at least 0, every
  segment's ``start_s`` non-decreasing with its step.
* **No one-off cost in a timed step**: per policy, rank and local batch, the first row of that
  size (the size's first use in the segment) within :data:`FIRST_USE_RATIO` of the median of its
  rows; and each policy's first step (step 0) the same against its size's median. A spike there
  is a cost the warm-up did not pay (cuDNN building a plan for a new shape, DDP rebuilding its
  buckets) measured as compute, which the calibration and the policies then see as speed.
  Only sizes with at least :data:`MIN_ROWS` rows are judged (a median of two is not one), and a
  first use only where it is also :data:`FIRST_USE_FLOOR_S` above the median; the steps a run's
  ``--profile`` recorded are left out (the profiler's own cost).
* **Flat memory**: on a CUDA rank 0, the most device memory its tensors held in a policy's last
  epoch at most :data:`MEMORY_GROWTH` of its first epoch's plus :data:`MEMORY_SLACK_MB`
  (``epochs.csv``'s ``device_peak_mb``; the first epoch holds every one-off allocation, the
  optimizer's state among them): a run that leaks (a kept graph, a growing cache) would slow as
  it goes. Measured by the rank's allocator, not by sampling the device from outside: on a GPU a
  run's start-up is most of its wall time, and a sampled peak would grow as the rank starts.

Each check returns the problems it found as lines (empty: passed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from hetsim.model.trace import read_trace_table

FIRST_USE_RATIO = 1.2
# ... and by this much: a one-off cost (cuDNN's plan for a new shape, DDP's bucket rebuild) takes
# milliseconds, while a step of a fraction of a millisecond reads 1.2x by a timer's jitter
FIRST_USE_FLOOR_S = 0.5e-3
MIN_ROWS = 3
MEMORY_GROWTH = 1.10
MEMORY_SLACK_MB = 64.0
TIMES = ("compute_s", "wait_s", "comm_s")


def read_trace(folder: Path) -> pd.DataFrame:
    """The run folder's trace (parquet, else csv)."""
    for name in ("trace.parquet", "trace.csv"):
        if (Path(folder) / name).exists():
            return read_trace_table(Path(folder) / name)
    raise FileNotFoundError(f"{folder}: no trace.parquet or trace.csv")


def negative_times(trace: pd.DataFrame) -> list[str]:
    """Rows with a negative time, and segments whose ``start_s`` goes back."""
    problems = []
    for column in TIMES:
        bad = trace[trace[column] < 0]
        if len(bad):
            row = bad.iloc[0]
            problems.append(
                f"{len(bad)} row(s) with negative {column}, first: {row['policy']} step {row['step']} "
                f"rank {row['worker']} ({row[column]:.6f} s)"
            )
    for policy, rows in trace.groupby("policy", sort=False):
        starts = rows.sort_values(["step", "worker"]).groupby("step")["start_s"].first().to_numpy()
        if starts.size > 1 and np.any(np.diff(starts) < 0):
            problems.append(f"{policy}: start_s goes back between steps")
    return problems


class FirstUse(NamedTuple):
    """A (policy, rank, local batch)'s first row in its segment against that size's median."""

    policy: str
    worker: int
    batch: int
    step: int  # the first row's step: a policy's first step (0) is the first use of its sizes there
    ratio: float  # the first row's compute over the median of the size's rows
    median_s: float


def size_uses(trace: pd.DataFrame) -> Iterator[tuple[str, int, int, np.ndarray, np.ndarray]]:
    """Every (policy, rank, local batch) with at least :data:`MIN_ROWS` rows: ``(policy, worker,
    batch, steps, compute_s)``, its rows in the order they ran (the uses of that size)."""
    working = trace[trace["local_batch"] > 0]
    for (policy, worker, batch), rows in working.groupby(["policy", "worker", "local_batch"], sort=False):
        if len(rows) >= MIN_ROWS:
            ordered = rows.sort_values(["epoch", "step"])
            yield str(policy), int(worker), int(batch), ordered["step"].to_numpy(), ordered["compute_s"].to_numpy()


def use_ratios(trace: pd.DataFrame) -> Iterator[tuple[str, int, int, np.ndarray, np.ndarray, float]]:
    """Every size of :func:`size_uses` with a positive median (a size that took no time has no
    ratio): ``(policy, worker, batch, steps, each use's compute over the median, the median)``."""
    for policy, worker, batch, steps, compute in size_uses(trace):
        median = float(np.median(compute))
        if median > 0:
            yield policy, worker, batch, steps, compute / median, median


def first_uses(trace: pd.DataFrame) -> list[FirstUse]:
    """Every size of :func:`use_ratios`: its first row's compute over the median of its rows.
    Every trace segment starts at step 0, so a policy's first step is the first use of its sizes
    in its segment."""
    return [FirstUse(policy, worker, batch, int(steps[0]), float(ratios[0]), median)
            for policy, worker, batch, steps, ratios, median in use_ratios(trace)]  # fmt: skip


def first_use_spikes(trace: pd.DataFrame, ratio: float = FIRST_USE_RATIO,
                     floor_s: float = FIRST_USE_FLOOR_S) -> list[str]:  # fmt: skip
    """Each (policy, rank, local batch)'s first row above ``ratio`` times the median of that size's
    rows and more than ``floor_s`` above it (:func:`first_uses`); a policy's first step is judged
    here too."""
    return [
        f"{u.policy}, rank {u.worker}: first use of local batch {u.batch} (step {u.step}) took "
        f"{u.ratio:.2f}x its median ({1e3 * u.median_s:.2f} ms)"
        for u in first_uses(trace)
        if u.ratio > ratio and (u.ratio - 1.0) * u.median_s > floor_s
    ]


def unprofiled(trace: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """``trace`` without the steps a run's ``--profile`` recorded (meta.json's config): each
    policy's first ones, warm-up included, which carry the profiler's own cost."""
    from validation.uneven.profiling import WARMUP_STEPS

    meta = Path(folder) / "meta.json"
    config = json.loads(meta.read_text(encoding="utf-8")).get("config", {}) if meta.is_file() else {}
    profiled = int(config.get("profile") or 0)
    return trace[trace["step"] >= WARMUP_STEPS + profiled] if profiled else trace


def memory_growth(epochs: pd.DataFrame) -> list[str]:
    """Per policy, its last epoch's ``device_peak_mb`` against its first's (where two or more
    epochs have one: a CPU rank 0's are empty)."""
    if "device_peak_mb" not in epochs.columns:
        return []
    problems = []
    for policy, rows in epochs.sort_values("epoch", kind="stable").groupby("policy", sort=False):
        peaks = pd.to_numeric(rows["device_peak_mb"], errors="coerce").dropna().to_numpy()
        if peaks.size >= 2 and peaks[-1] > MEMORY_GROWTH * peaks[0] + MEMORY_SLACK_MB:
            problems.append(f"{policy}: device memory grew from a peak of {peaks[0]:.0f} MB in its first epoch to "
                            f"{peaks[-1]:.0f} MB in its last")  # fmt: skip
    return problems


def check_folder(folder: Path) -> list[str]:
    """Every check of one run folder."""
    trace = unprofiled(read_trace(folder), folder)
    epochs = Path(folder) / "epochs.csv"
    return negative_times(trace) + first_use_spikes(trace) + (memory_growth(pd.read_csv(epochs)) if epochs.is_file()
                                                               else [])  # fmt: skip
