"""Runs of the paper's reference implementation (arXiv 2110.08941) -> the trace schema.

A run folder holds ``success.txt`` (the run's configuration as ``key : value`` lines) and one
``timer_summary_<rank>.json`` per rank. In the JSON, each timer label (``batch.process``,
``batch.reduce``, ...) has ``average_duration``, ``n_events`` and ``total_time`` over the
whole run (the timer skips each label's first event), and ``mean_batch_process_times`` lists
the mean ``batch.process`` time of every epoch: the numbers that drove the DP rule. The
summary covers the last of the ``runs`` repetitions only.

Most runs log no per-step values, so the import gives one row per worker per epoch:

* ``compute_s``: that epoch's mean ``batch.process`` (forward, backward and the injected sleep);
* ``comm_s``: the smallest rank's run-average ``batch.reduce``. Each rank's ``batch.reduce``
  includes its wait for the others; the rank that arrives last waits least, so the minimum is
  the exchange itself (per-epoch values are not logged);
* ``wait_s``: the barrier wait implied by the epoch means, ``max_j compute_j - compute_i``;
* ``step``: the run's step count at the epoch's first step (epoch x steps per epoch, with
  steps per epoch = (``n_events`` + 1) / epochs), ``start_s`` accumulated from
  steps x (slowest compute + comm_s);
* ``local_batch``: ``max(floor(p_i * B), 1)``, the reference sampler's rounding of the shares.
  With ``dynamic_partition`` the shares are **a reconstruction**: the logs do not record them,
  so they are recomputed by replaying the DP rule ``p_i <- (p_i / t_i) / sum_j (p_j / t_j)``
  (docs/architecture.md) on the logged epoch means, from equal shares. Without it, the shares are 1/n.

Runs that also logged every step (``process_times`` and ``reduce_times``, the AWS runs) give
one row per worker per step, ``comm_s`` the step's smallest ``reduce_times`` over ranks. The
AWS P2 and P3 folders are the two nodes of one run (each logged as rank 0): pass both folders,
in rank order, to import them as one two-worker run.

``policy`` is ``equal`` (Sync-SGD), ``dynamic`` (DP-SGD) or ``dynamic-enhanced`` (EDP-SGD).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hetsim.errors import ConfigError
from hetsim.params import Param
from hetsim.trace import Trace

DATA_PACKAGE = "hetsim"
_TIMER = re.compile(r"timer_summary_(\d+)\.json$")


@dataclass(frozen=True)
class RunLog:
    """One reference run: its configuration, and per rank the timer summary."""

    paths: tuple[Path, ...]
    config: dict[str, Any]
    timers: tuple[dict[str, Any], ...]

    @property
    def n_workers(self) -> int:
        return len(self.timers)

    @property
    def global_batch(self) -> int:
        return int(self.config.get("batch_size", 256))

    @property
    def step_compute_s(self) -> np.ndarray | None:
        """(steps, ranks) ``batch.process`` of every step, where the run logged them
        (``process_times``, as in the AWS runs); else None."""
        if not all("process_times" in t for t in self.timers):
            return None
        return np.stack([np.asarray(t["process_times"], dtype=float) for t in self.timers], axis=1)

    @property
    def step_reduce_s(self) -> np.ndarray | None:
        if not all("reduce_times" in t for t in self.timers):
            return None
        return np.stack([np.asarray(t["reduce_times"], dtype=float) for t in self.timers], axis=1)

    @property
    def epochs(self) -> int:
        if all("mean_batch_process_times" in t for t in self.timers):
            return len(self.timers[0]["mean_batch_process_times"])
        return int(self.config["num_epochs"])

    @property
    def steps_per_epoch(self) -> int:
        steps = self.step_compute_s
        events = steps.shape[0] if steps is not None else int(self.timers[0]["batch.process"]["n_events"]) + 1
        return max(1, int(round(events / self.epochs)))  # the timer's totals skip each label's first event

    @property
    def epoch_means_s(self) -> np.ndarray:
        """(epochs, ranks) mean ``batch.process`` per epoch: logged, or from the per-step times."""
        if all("mean_batch_process_times" in t for t in self.timers):
            return np.stack([np.asarray(t["mean_batch_process_times"], dtype=float) for t in self.timers], axis=1)
        steps = self.step_compute_s
        assert steps is not None  # read_run checked that one of the two is there
        return np.stack([chunk.mean(axis=0) for chunk in np.array_split(steps, self.epochs)])

    @property
    def dynamic_partition(self) -> bool:
        """Whether the run re-split by the DP rule (the reference's ``dynamic_partition``)."""
        return bool(self.config.get("dynamic_partition", False))

    @property
    def policy(self) -> str:
        if not self.dynamic_partition:
            return "equal"
        return "dynamic-enhanced" if self.config.get("enhance", False) else "dynamic"

    def average_s(self, label: str) -> np.ndarray:
        """Run-average duration of a timer label, per rank."""
        return np.array([float(t[label]["average_duration"]) for t in self.timers])


def reference_runs() -> list[str]:
    """Names of the reference-log folders shipped with hetsim (``hetsim/data/reference-logs``)."""
    root = resources.files(DATA_PACKAGE).joinpath("data", "reference-logs")
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def reference_run_path(name: str) -> Path:
    """The folder of a shipped reference run."""
    path = Path(str(resources.files(DATA_PACKAGE).joinpath("data", "reference-logs", name)))
    if not path.is_dir():
        raise ConfigError("run", f"no shipped reference run {name!r} (known: {', '.join(reference_runs())})")
    return path


def parse_success(text: str) -> dict[str, Any]:
    """``key : value`` lines of ``success.txt`` with values as bool, int, float or string."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" : ")
        if not sep or not key.strip() or " " in key.strip():
            continue
        out[key.strip()] = _value(value.strip())
    return out


def _value(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_run(run_dirs: str | Path | Sequence[str | Path]) -> RunLog:
    """Read and check a run folder, or several folders of one run (one node each, as the AWS
    P2 and P3 logs: ranks in the order given). Every problem is a :class:`ConfigError`."""
    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    if not dirs:
        raise ConfigError("run", "no run folder given")
    config: dict[str, Any] = {}
    timers: list[dict[str, Any]] = []
    for run_dir in dirs:
        root = Path(run_dir)
        if not root.is_dir():
            raise ConfigError(str(run_dir), "no such folder")
        success = root / "success.txt"
        if not success.is_file():
            raise ConfigError(str(success), "missing (a reference run folder holds success.txt)")
        config = config or parse_success(success.read_text(encoding="utf-8", errors="replace"))
        ranks = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _TIMER.search(p.name)))
        if not ranks:
            raise ConfigError(str(root), "no timer_summary_<rank>.json files")
        timers.extend(_read_timer(path) for _, path in ranks)
    for key in ("batch_size", "num_epochs"):  # numbers the import divides and counts by
        if key in config:
            Param(key, "integer", low=1).check(config[key])
    run = RunLog(tuple(Path(d) for d in dirs), config, tuple(timers))
    if run.dynamic_partition and not (run.epoch_means_s > 0).all():
        raise ConfigError("mean_batch_process_times", "must be positive: the DP rule divides by each epoch's mean")
    if not all("mean_batch_process_times" in t for t in timers) and run.step_compute_s is None:
        raise ConfigError("mean_batch_process_times", "missing (and no per-step process_times to compute it from)")
    if "num_epochs" not in config and not all("mean_batch_process_times" in t for t in timers):
        raise ConfigError("num_epochs", "missing from success.txt")
    lengths = {len(t.get("mean_batch_process_times", t.get("process_times", []))) for t in timers}
    if len(lengths) != 1:
        raise ConfigError(str(dirs[0]), "the ranks logged different numbers of epochs or steps")
    return run


def _read_timer(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "must hold a JSON object")
    for key in ("batch.process", "batch.reduce"):
        if not isinstance(data.get(key), dict) or "average_duration" not in data[key]:
            raise ConfigError(f"{path}:{key}", "missing")
    for key in ("mean_batch_process_times", "process_times", "reduce_times"):
        values = data.get(key)
        if values is None:
            continue
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, (int, float)) and v >= 0 for v in values)
        ):
            raise ConfigError(f"{path}:{key}", "must be a non-empty list of non-negative numbers")
    return data


def replay_shares(epoch_means_s: np.ndarray) -> np.ndarray:
    """(epochs, ranks) shares each epoch ran with under the DP rule, replayed on the logged
    epoch means from equal shares (a reconstruction: the reference does not log them)."""
    epochs, n = epoch_means_s.shape
    shares = np.empty((epochs, n))
    p = np.full(n, 1.0 / n)
    for e in range(epochs):
        shares[e] = p
        p = p / epoch_means_s[e]
        p = p / p.sum()
    return shares


def reference_batches(shares: np.ndarray, global_batch: int) -> np.ndarray:
    """The reference sampler's local batches, ``max(floor(p_i * B), 1)`` (may sum to less than B)."""
    return np.maximum(np.floor(shares * global_batch + 1e-9), 1).astype(np.int64)


def import_run(run_dirs: str | Path | Sequence[str | Path] | RunLog) -> Trace:
    """A reference run as a trace (see the module doc): one row per worker per epoch, or per
    step where the run logged every step's times."""
    run = run_dirs if isinstance(run_dirs, RunLog) else read_run(run_dirs)
    means = run.epoch_means_s
    epochs, n = means.shape
    shares = replay_shares(means) if run.dynamic_partition else np.full((epochs, n), 1.0 / n)
    batches = reference_batches(shares, run.global_batch)
    spe = run.steps_per_epoch
    steps = run.step_compute_s
    if steps is not None:
        compute = steps
        reduce = run.step_reduce_s
        comm = reduce.min(axis=1) if reduce is not None and n > 1 else np.zeros(len(steps))
        epoch = np.minimum(np.arange(len(steps)) // spe, epochs - 1)
        batches = batches[epoch]
        step = np.arange(len(steps), dtype=np.int64)
        repeats = np.ones(len(steps))
    else:
        compute = means
        comm = np.full(epochs, float(run.average_s("batch.reduce").min()) if n > 1 else 0.0)
        epoch = np.arange(epochs, dtype=np.int64)
        step = epoch * spe
        repeats = np.full(epochs, float(spe))
    slowest = compute.max(axis=1)
    start = np.concatenate([[0.0], np.cumsum(repeats * (slowest + comm))[:-1]])
    rows = len(compute)
    rep = lambda a: np.repeat(np.asarray(a), n)  # noqa: E731
    return Trace(
        policy=run.policy,
        n_workers=n,
        epoch=rep(epoch.astype(np.int64)),
        step=rep(step),
        worker=np.tile(np.arange(n, dtype=np.int64), rows),
        local_batch=np.asarray(batches, dtype=np.int64).ravel(),
        start_s=rep(start),
        compute_s=compute.ravel(),
        wait_s=(slowest[:, None] - compute).ravel(),
        comm_s=rep(comm),
        included=np.ones(rows * n, dtype=bool),
    )


def steady_state(trace: Trace, skip_epochs: int) -> dict[str, Any]:
    """Per-worker means of ``compute_s`` and ``local_batch`` over the epochs from ``skip_epochs``
    on (each epoch weighted equally)."""
    frame = trace.to_frame()
    frame = frame[frame["epoch"] >= skip_epochs]
    per_epoch = frame.groupby(["epoch", "worker"])[["compute_s", "local_batch"]].mean().groupby("worker").mean()
    return {
        "compute_s": tuple(float(v) for v in per_epoch["compute_s"]),
        "local_batch": tuple(float(v) for v in per_epoch["local_batch"]),
        "epochs": int(frame["epoch"].nunique()),
    }


__all__ = [
    "RunLog",
    "import_run",
    "parse_success",
    "read_run",
    "reference_batches",
    "reference_run_path",
    "reference_runs",
    "replay_shares",
    "steady_state",
]
