"""Rank 0's run folder: everything a run writes, each file replaced atomically.

    meta.json      the configuration, world, devices, backend, versions; ``status`` running/complete
    trace.parquet  the trace (docs/architecture.md schema, columns exactly ``hetsim.model.trace.COLUMNS``), one segment
    trace.csv      per policy plus the calibration probe (``policy = "probe"``); ``step`` counts
                   from 0 in every segment and ``start_s`` is the segment's own elapsed step
                   time, as in a simulated run of that policy alone
    epochs.csv     per policy and epoch: training loss, held-out loss and accuracy, elapsed step time,
                   and on a CUDA rank 0 the most device memory its tensors held in the epoch
    evals.csv      every held-out evaluation: each epoch's end, and with ``--eval-every K`` every K
                   steps of an epoch too (policy, epoch, the policy's steps so far, elapsed step time)
    summary.json   per policy: hetsim's Summary of the measured trace and the final accuracy

The trace and the epoch and evaluation tables are rewritten after every epoch (and after the
probe), so a run that dies keeps everything up to its last finished epoch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hetsim.core.files import write_frame, write_json
from hetsim.core.provenance import provenance
from hetsim.model.trace import COLUMNS, Trace, write_trace_table
from hetsim.run.metrics import summarize
from validation.allreduce import gradient_bytes
from validation.config import RunConfig
from validation.workloads.base import Dataset

if TYPE_CHECKING:  # pandas is imported where a frame is made: rank 0's writer; a rank's start-up skips it
    import pandas as pd

    from validation.uneven.plan_file import PlanChoice

EPOCH_COLUMNS = ("policy", "epoch", "train_loss", "test_loss", "test_accuracy", "elapsed_s", "split", "global_batch",
                 "noise_scale", "device_peak_mb")  # fmt: skip
EVAL_COLUMNS = ("policy", "epoch", "step", "elapsed_s", "test_loss", "test_accuracy")


def device_peak_mb() -> float | None:
    """The most CUDA memory this process's tensors held on its current device since the last call
    (its epoch, called once an epoch: what gpu-check's flat-memory check compares across epochs);
    None in a process that has not used CUDA."""
    if not torch.cuda.is_initialized():
        return None
    peak = torch.cuda.max_memory_allocated() / 1e6
    torch.cuda.reset_peak_memory_stats()
    return float(peak)


@dataclass(frozen=True)
class RankTiming:
    """One rank's measured times of one step."""

    compute_s: float
    wait_s: float
    comm_s: float


def step_rows(
    policy: str, epoch: int, step: int, start_s: float, split: Sequence[int], timings: Sequence[RankTiming]
) -> list[dict[str, Any]]:
    """The trace rows of one step, in the simulator's terms: every rank's row adds up to the
    step's duration, as rank 0 measured it (rank 0 starts every step: it decides the split and
    broadcasts it), and every row's ``comm_s`` is the step's exposed communication as rank 0
    saw it, the barrier's own latency included (the least time any rank spent in it: the last
    to arrive waited for nobody). A rank's ``wait_s`` is the rest: its idle time in the step.
    (The ranks' own wall times differ by when each received the split; rank 0's is the step's.)

    Two cases where rank 0's parts do not line up with the slowest rank's:

    * A peer can start computing while rank 0 is still in the step's first communication (the
      split's broadcast returned on the peer first, or rank 0 was descheduled before its own
      compute): then rank 0's communication and the peer's compute overlap, the slowest compute
      plus rank 0's communication exceeds rank 0's wall, and only the part beyond the slowest
      compute was exposed. The step is rank 0's wall; its communication what the slowest compute
      leaves of it.
    * Rank 0's clock can start after a peer began computing (after a new size's warm-up, each
      rank restarts its clock when it leaves the meeting, and rank 0 may leave it last): its
      wall is then shorter than the slowest compute and its communication negative. The step
      then lasts the slowest compute and the barrier's latency, its communication beyond that
      unknown and counted as none.

    No row has a negative part, and no step is longer than rank 0's wall unless that wall is
    shorter than the slowest compute and the barrier's latency."""
    latency_s = min(t.wait_s for t in timings)
    slowest_s = max(t.compute_s for t in timings)
    step_s = max(timings[0].compute_s + timings[0].wait_s + timings[0].comm_s, slowest_s + latency_s)
    comm_s = min(max(0.0, timings[0].comm_s) + latency_s, step_s - slowest_s)
    return [
        {
            "policy": policy,
            "epoch": epoch,
            "step": step,
            "worker": rank,
            "local_batch": int(split[rank]),
            "start_s": start_s,
            "compute_s": t.compute_s,
            "wait_s": max(0.0, step_s - comm_s - t.compute_s),
            "comm_s": comm_s,
            "included": bool(split[rank] > 0),
        }
        for rank, t in enumerate(timings)
    ]


def run_meta(
    config: RunConfig,
    backend: str,
    rank0_device: str,
    data: Dataset,
    steps_per_epoch: int,
    model: torch.nn.Module,
    placements: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """meta.json's content (before its ``status``): the configuration, the world, the workload's
    size (``gradient_mb``: float32 gradients, which the calibrated scenario uses), the versions,
    each rank's threads and CPUs as they really were, and the injected delays."""
    n_params = sum(p.numel() for p in model.parameters())
    return {
        **provenance(),  # hetsim's version and commit, the command typed, the host, the date
        "config": config.to_dict(),
        "world_size": config.world_size,
        "backend": backend,
        "devices": list(config.devices),
        "rank0_device": rank0_device,
        "workload": config.workload,
        "comm": config.comm,
        "global_batch": config.global_batch,
        "steps_per_epoch": steps_per_epoch,
        "epochs": config.epochs,
        "policies": list(config.policies),
        "n_train": data.n_train,
        "n_test": int(data.test_y.shape[0]),
        "parameters": n_params,
        "gradient_mb": gradient_bytes(model.parameters()) / 1e6,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "placement": {str(rank): p for rank, p in enumerate(placements)},
        "injection": {
            name: {str(k): v for k, v in getattr(config, name).items()}
            for name in ("delay", "per_sample_delay", "slowdown")
        },
    }


def script_meta(
    *,
    world_size: int,
    global_batch: int,
    steps_per_epoch: int,
    epochs: int,
    policies: Sequence[str],
    model: torch.nn.Module,
    n_train: int,
    n_test: int,
    seed: int,
    backend: str,
    devices: Sequence[str],
    workload: str,
    comm: str,
    extra: dict[str, Any] | None = None,
    plan: PlanChoice | None = None,
    slowdown: Mapping[int, float] | None = None,
) -> dict[str, Any]:
    """meta.json's content for a run of a user's own script (:mod:`validation.uneven`): the fields
    ``validation compare`` reads, as :func:`run_meta` writes them for ``validation run``
    (``config`` holds the seed and whatever else ``extra`` adds). ``plan``: the plan the run
    applies (:func:`~validation.uneven.load_plan`), so that ``compare`` simulates the plan's split
    where the run kept it; ``slowdown``: every rank's emulated slowdown factor (rank -> factor,
    as :func:`~validation.profile_config.slowdowns` reads ``--slowdown``), recorded as
    ``validation run`` records its own (a script injects no delays)."""
    n_params = sum(p.numel() for p in model.parameters())
    slowed = {r: f for r, f in (slowdown or {}).items() if f != 1.0}
    return {
        **provenance(),
        "config": {"seed": seed, "global_batch": global_batch, "epochs": epochs, "comm": comm, **(extra or {})},
        "world_size": world_size,
        "backend": backend,
        "devices": list(devices),
        "rank0_device": devices[0] if devices else "cpu",
        "workload": workload,
        "comm": comm,
        "global_batch": global_batch,
        "steps_per_epoch": steps_per_epoch,
        "epochs": epochs,
        "policies": list(policies),
        "n_train": n_train,
        "n_test": n_test,
        "parameters": n_params,
        "gradient_mb": gradient_bytes(model.parameters()) / 1e6,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "injection": {"delay": {}, "per_sample_delay": {}, "slowdown": {str(r): float(f) for r, f in slowed.items()}},
        **({"plan": plan.record()} if plan is not None else {}),
    }


class RunWriter:
    """Collects rows on rank 0 and rewrites the run folder's files; with no folder (``out`` None)
    it keeps the rows and writes nothing (the probe's costs are still read back from it)."""

    def __init__(self, out: Path | None, meta: dict[str, Any]) -> None:
        self.out = None if out is None else Path(out)
        self.meta = dict(meta)
        self.rows: list[dict[str, Any]] = []
        self.epochs: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self._flushed: tuple[int, int, int] | None = None  # the rows, epochs and evals the files hold
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
        self.write_meta("running")

    def write_meta(self, status: str, failure: str | None = None) -> None:
        """meta.json with ``status`` (running, complete, interrupted, failed) and, for the last
        two, ``failure``: why."""
        self.meta["status"] = status
        if failure is not None:
            self.meta["failure"] = failure
        if self.out is not None:
            write_json(self.out / "meta.json", self.meta)

    def add_steps(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows.extend(rows)

    def add_epoch(self, row: Callable[[], dict[str, Any]]) -> None:
        """Add the epoch's row, made by ``row()`` (which evaluates the model: only this writer calls
        it), and its evaluation's."""
        values = {**row(), "device_peak_mb": device_peak_mb()}
        self.epochs.append({c: values[c] for c in EPOCH_COLUMNS})
        self._add_eval(values)

    def add_eval(self, row: Callable[[], dict[str, Any]]) -> None:
        """Add a held-out evaluation within an epoch, made by ``row()`` (only this writer calls it):
        ``policy``, ``epoch``, ``elapsed_s``, ``test_loss`` and ``test_accuracy``."""
        self._add_eval(row())

    def _add_eval(self, values: dict[str, Any]) -> None:
        """evals.csv's row, at the steps the policy's trace rows count so far (its last row is
        almost always the trace's last: an evaluation follows the policy's steps)."""
        last = next((r["step"] for r in reversed(self.rows) if r["policy"] == values["policy"]), -1)
        self.evals.append({**{c: values.get(c) for c in EVAL_COLUMNS}, "step": int(last) + 1})

    def trace_frame(self) -> pd.DataFrame:
        """Every step row so far as a trace table (hetsim's trace columns)."""
        import pandas as pd

        frame = pd.DataFrame(self.rows, columns=list(COLUMNS))
        return frame.astype(
            {"epoch": np.int64, "step": np.int64, "worker": np.int64, "local_batch": np.int64, "included": np.bool_}
        )

    def flush(self) -> None:
        """Rewrite trace.parquet, trace.csv, epochs.csv and evals.csv with everything so far (not
        again when nothing was added since: :meth:`finish` flushes after the last epoch's flush)."""
        import pandas as pd

        held = (len(self.rows), len(self.epochs), len(self.evals))  # the writer only ever appends
        if self.out is None or held == self._flushed:
            return
        write_trace_table(self.trace_frame(), self.out / "trace.parquet", self.out / "trace.csv")
        write_frame(self.out / "epochs.csv", pd.DataFrame(self.epochs, columns=list(EPOCH_COLUMNS)))
        write_frame(self.out / "evals.csv", pd.DataFrame(self.evals, columns=list(EVAL_COLUMNS)))
        self._flushed = held

    def finish(self, policies: Sequence[str]) -> dict[str, Any]:
        """Write every file (:meth:`flush`) and summary.json, and mark the run complete; returns the
        summary."""
        import pandas as pd

        self.flush()  # a folder marked complete holds the whole trace, whether or not its script flushed

        frame = self.trace_frame()
        epochs = pd.DataFrame(self.epochs, columns=list(EPOCH_COLUMNS))
        evals = pd.DataFrame(self.evals, columns=list(EVAL_COLUMNS))
        summary: dict[str, Any] = {"policies": []}
        for name in policies:
            rows = frame[frame["policy"] == name]
            if rows.empty:
                continue
            entry = summarize(Trace.from_frame(rows)).to_dict()
            last = epochs[epochs["policy"] == name].tail(1)
            entry["final_test_accuracy"] = float(last["test_accuracy"].iloc[0]) if not last.empty else None
            entry["final_test_loss"] = float(last["test_loss"].iloc[0]) if not last.empty else None
            target = self.meta.get("config", {}).get("target_accuracy")
            entry["target_accuracy"] = target
            entry["time_to_target_s"] = time_to_accuracy(evals[evals["policy"] == name], target)
            scales = pd.to_numeric(epochs.loc[epochs["policy"] == name, "noise_scale"], errors="coerce").dropna()
            entry["noise_scale"] = float(scales.median()) if not scales.empty else None
            summary["policies"].append(entry)
        if self.out is not None:
            write_json(self.out / "summary.json", summary)
        self.write_meta("complete")
        return summary


def time_to_accuracy(evals: pd.DataFrame, target: float | None) -> float | None:
    """The policy's elapsed step time at its first held-out evaluation (``evals``, in the order
    made) that reached ``target`` (None without a target, or when none reached it): the end of an
    epoch, or with ``--eval-every`` the step after which it was evaluated."""
    if target is None:
        return None
    reached = evals[evals["test_accuracy"] >= target]
    return float(reached["elapsed_s"].iloc[0]) if not reached.empty else None


class NullWriter:
    """The writer of every rank but 0: RunWriter's methods, doing nothing. Its trace is empty, so
    anything read back from it (the probe's fit, the summary) is empty on those ranks."""

    def write_meta(self, status: str, failure: str | None = None) -> None:
        """Nothing to write."""

    def add_steps(self, rows: Sequence[dict[str, Any]]) -> None:
        """The rows are dropped."""

    def add_epoch(self, row: Callable[[], dict[str, Any]]) -> None:
        """The row is never made (so the model is not evaluated)."""

    def add_eval(self, row: Callable[[], dict[str, Any]]) -> None:
        """The row is never made (so the model is not evaluated)."""

    def trace_frame(self) -> pd.DataFrame:
        """An empty trace with the trace's columns."""
        import pandas as pd

        return pd.DataFrame(columns=list(COLUMNS))

    def flush(self) -> None:
        """Nothing to write."""

    def finish(self, policies: Sequence[str]) -> dict[str, Any]:
        """A summary of no policies."""
        return {"policies": []}


Writer = RunWriter | NullWriter
