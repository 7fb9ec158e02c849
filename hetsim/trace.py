"""The Trace: one row per worker per step, the table every part of hetsim speaks.

Columns (DESIGN.md): policy, epoch, step, worker, local_batch, start_s, compute_s, wait_s,
comm_s, included; simulated traces add ``slowdown`` (the episode factor applied to that
worker's compute; 1 outside episodes) and ``up`` (whether the worker was up at the step's
start); a table without them reads as 1 and True. Engines fill a
:class:`TraceBuilder` with plain numbers (no pandas on the hot path); the finished
:class:`Trace` holds NumPy columns in step-major order and converts to a DataFrame or
CSV/Parquet files on demand.

A trace without a barrier (``synchronous = False``, the async policy) has one row per update
instead: ``step`` is the update index, ``worker`` the worker that pushed it, ``wait_s`` the
time it spent down before computing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("policy", "epoch", "step", "worker", "local_batch", "start_s", "compute_s", "wait_s", "comm_s", "included")
_NUMERIC = {
    "epoch": np.int64,
    "step": np.int64,
    "worker": np.int64,
    "local_batch": np.int64,
    "start_s": np.float64,
    "compute_s": np.float64,
    "wait_s": np.float64,
    "comm_s": np.float64,
    "included": np.bool_,
    "slowdown": np.float64,
    "up": np.bool_,
}


@dataclass(frozen=True)
class Trace:
    policy: str
    n_workers: int
    epoch: np.ndarray
    step: np.ndarray
    worker: np.ndarray
    local_batch: np.ndarray
    start_s: np.ndarray
    compute_s: np.ndarray
    wait_s: np.ndarray
    comm_s: np.ndarray
    included: np.ndarray
    slowdown: np.ndarray | None = None  # None: no episodes (all ones)
    up: np.ndarray | None = None  # None: no failures (all True)
    synchronous: bool = True

    def __post_init__(self) -> None:
        if self.slowdown is None:
            object.__setattr__(self, "slowdown", np.ones(len(self.step)))
        if self.up is None:
            object.__setattr__(self, "up", np.ones(len(self.step), dtype=np.bool_))

    @property
    def n_steps(self) -> int:
        if not self.synchronous:
            return len(self.step)
        return len(self.step) // self.n_workers if self.n_workers else 0

    def per_step(self, column: str) -> np.ndarray:
        """A column reshaped to (steps, workers)."""
        return getattr(self, column).reshape(self.n_steps, self.n_workers)

    def to_frame(self) -> "pd.DataFrame":
        import pandas as pd

        data = {"policy": np.full(len(self.step), self.policy, dtype=object)}
        data.update({c: getattr(self, c) for c in _NUMERIC})
        return pd.DataFrame(data, columns=["policy", *_NUMERIC])

    @classmethod
    def from_frame(cls, frame: "pd.DataFrame") -> "Trace":
        """A trace from a table with the trace columns, one policy, rows in any order."""
        frame = frame.sort_values(["step", "worker"], kind="stable")
        n_workers = int(frame["worker"].nunique())
        policies = frame["policy"].unique() if "policy" in frame else ["unknown"]
        if len(policies) != 1:
            raise ValueError(f"a Trace holds one policy, this table has {len(policies)}")
        frame = frame.assign(**{c: v for c, v in (("slowdown", 1.0), ("up", True)) if c not in frame})
        cols = {c: frame[c].to_numpy(dtype=t) for c, t in _NUMERIC.items()}
        synchronous = bool((frame.groupby("step").size() == n_workers).all())
        return cls(policy=str(policies[0]), n_workers=n_workers, synchronous=synchronous, **cols)


class TraceBuilder:
    """Preallocated (steps x workers) arrays an engine fills in place; :meth:`finish` freezes
    them into a :class:`Trace` (rows step-major)."""

    def __init__(self, policy: str, n_workers: int, n_steps: int) -> None:
        self.policy, self.n_workers, self.n_steps = policy, n_workers, n_steps
        shape = (n_steps, n_workers)
        self.local_batch = np.zeros(shape, dtype=np.int64)
        self.compute_s = np.zeros(shape)
        self.wait_s = np.zeros(shape)
        self.included = np.zeros(shape, dtype=np.bool_)
        self.slowdown = np.ones(shape)
        self.up = np.ones(shape, dtype=np.bool_)
        self.epoch = np.zeros(n_steps, dtype=np.int64)
        self.start_s = np.zeros(n_steps)
        self.comm_s = np.zeros(n_steps)

    def finish(self, n_steps: int | None = None) -> Trace:
        """The trace of the first ``n_steps`` steps (all by default)."""
        k, n = self.n_steps if n_steps is None else n_steps, self.n_workers
        per_step = lambda a: np.repeat(a[:k], n)  # noqa: E731
        return Trace(
            policy=self.policy,
            n_workers=n,
            epoch=per_step(self.epoch),
            step=np.repeat(np.arange(k, dtype=np.int64), n),
            worker=np.tile(np.arange(n, dtype=np.int64), k),
            local_batch=self.local_batch[:k].ravel(),
            start_s=per_step(self.start_s),
            compute_s=self.compute_s[:k].ravel(),
            wait_s=self.wait_s[:k].ravel(),
            comm_s=per_step(self.comm_s),
            included=self.included[:k].ravel(),
            slowdown=self.slowdown[:k].ravel(),
            up=self.up[:k].ravel(),
        )


def async_trace(policy: str, n_workers: int, rows: list[tuple[int, int, float, float, float, float]],
                comm_s: float, updates_per_epoch: int) -> Trace:
    """A barrier-free trace from ``(worker, local_batch, start_s, compute_s, down_s, slowdown)``
    rows in the order their updates were applied."""
    cols = np.array(rows, dtype=float).reshape(-1, 6)
    k = len(cols)
    return Trace(
        policy=policy,
        n_workers=n_workers,
        epoch=np.arange(k, dtype=np.int64) // updates_per_epoch,
        step=np.arange(k, dtype=np.int64),
        worker=cols[:, 0].astype(np.int64),
        local_batch=cols[:, 1].astype(np.int64),
        start_s=cols[:, 2],
        compute_s=cols[:, 3],
        wait_s=cols[:, 4],
        comm_s=np.full(k, comm_s),
        included=np.ones(k, dtype=np.bool_),
        slowdown=cols[:, 5],
        synchronous=False,
    )
