"""Rank 0's run folder: everything a run writes, each file replaced atomically.

    meta.json      the configuration, world, devices, backend, versions; ``status`` running/complete
    trace.parquet  the trace (docs/architecture.md schema, columns exactly ``hetsim.trace.COLUMNS``), one segment
    trace.csv      per policy plus the calibration probe (``policy = "probe"``); ``step`` counts
                   from 0 in every segment and ``start_s`` is the segment's own elapsed step
                   time, as in a simulated run of that policy alone
    epochs.csv     per policy and epoch: training loss, held-out loss and accuracy, elapsed step time
    summary.json   per policy: hetsim's Summary of the measured trace and the final accuracy

The trace and the epoch table are rewritten after every epoch (and after the probe), so a run
that dies keeps everything up to its last finished epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hetsim.files import write_frame, write_json
from hetsim.metrics import summarize
from hetsim.trace import COLUMNS, Trace, write_trace_table

EPOCH_COLUMNS = ("policy", "epoch", "train_loss", "test_loss", "test_accuracy", "elapsed_s", "split")


@dataclass(frozen=True)
class RankTiming:
    """One rank's measured times of one step."""

    compute_s: float
    wait_s: float
    comm_s: float


def step_rows(
    policy: str, epoch: int, step: int, start_s: float, split: Sequence[int], timings: Sequence[RankTiming]
) -> list[dict[str, Any]]:
    """The trace rows of one step. The barrier's own latency (the least time any rank spent in
    it: the last rank to arrive waited for nobody) moves from ``wait_s`` to ``comm_s``, so
    ``wait_s`` is pure idle time and ``compute_s + wait_s + comm_s`` is every rank's wall time."""
    latency_s = min(t.wait_s for t in timings)
    return [
        {
            "policy": policy,
            "epoch": epoch,
            "step": step,
            "worker": rank,
            "local_batch": int(split[rank]),
            "start_s": start_s,
            "compute_s": t.compute_s,
            "wait_s": t.wait_s - latency_s,
            "comm_s": t.comm_s + latency_s,
            "included": bool(split[rank] > 0),
        }
        for rank, t in enumerate(timings)
    ]


class RunWriter:
    """Collects rows on rank 0 and rewrites the run folder's files."""

    def __init__(self, out: Path, meta: dict[str, Any]) -> None:
        self.out = Path(out)
        self.meta = dict(meta)
        self.rows: list[dict[str, Any]] = []
        self.epochs: list[dict[str, Any]] = []
        self.out.mkdir(parents=True, exist_ok=True)
        self.write_meta("running")

    def write_meta(self, status: str) -> None:
        self.meta["status"] = status
        write_json(self.out / "meta.json", self.meta)

    def add_steps(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows.extend(rows)

    def add_epoch(self, row: Callable[[], dict[str, Any]]) -> None:
        """Add the epoch's row, made by ``row()`` (which evaluates the model: only this writer calls it)."""
        values = row()
        self.epochs.append({c: values[c] for c in EPOCH_COLUMNS})

    def trace_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self.rows, columns=list(COLUMNS))
        return frame.astype(
            {"epoch": np.int64, "step": np.int64, "worker": np.int64, "local_batch": np.int64, "included": np.bool_}
        )

    def flush(self) -> None:
        """Rewrite trace.parquet, trace.csv and epochs.csv with everything so far."""
        write_trace_table(self.trace_frame(), self.out / "trace.parquet", self.out / "trace.csv")
        write_frame(self.out / "epochs.csv", pd.DataFrame(self.epochs, columns=list(EPOCH_COLUMNS)))

    def finish(self, policies: Sequence[str]) -> dict[str, Any]:
        """Write summary.json and mark the run complete; returns the summary."""
        frame = self.trace_frame()
        epochs = pd.DataFrame(self.epochs, columns=list(EPOCH_COLUMNS))
        summary: dict[str, Any] = {"policies": []}
        for name in policies:
            rows = frame[frame["policy"] == name]
            if rows.empty:
                continue
            entry = summarize(Trace.from_frame(rows)).to_dict()
            last = epochs[epochs["policy"] == name].tail(1)
            entry["final_test_accuracy"] = float(last["test_accuracy"].iloc[0]) if not last.empty else None
            entry["final_test_loss"] = float(last["test_loss"].iloc[0]) if not last.empty else None
            summary["policies"].append(entry)
        write_json(self.out / "summary.json", summary)
        self.write_meta("complete")
        return summary


class NullWriter:
    """The writer of every rank but 0: RunWriter's methods, doing nothing. Its trace is empty, so
    anything read back from it (the probe's fit, the summary) is empty on those ranks."""

    def write_meta(self, status: str) -> None:
        """Nothing to write."""

    def add_steps(self, rows: Sequence[dict[str, Any]]) -> None:
        """The rows are dropped."""

    def add_epoch(self, row: Callable[[], dict[str, Any]]) -> None:
        """The row is never made (so the model is not evaluated)."""

    def trace_frame(self) -> pd.DataFrame:
        """An empty trace with the trace's columns."""
        return pd.DataFrame(columns=list(COLUMNS))

    def flush(self) -> None:
        """Nothing to write."""

    def finish(self, policies: Sequence[str]) -> dict[str, Any]:
        """A summary of no policies."""
        return {"policies": []}


Writer = RunWriter | NullWriter
