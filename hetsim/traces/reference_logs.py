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

What the trace leaves out: a step here is the slowest ``batch.process`` and the exchange, what the
DP rule and hetsim's policies act on. The logs time more work per step outside those two labels
(``batch.step``, the optimizer; ``batch.evaluate``, which on the delayed rank also waits for the
GPU work its unsynchronised timers let run on), and their ``batch`` timer, the whole step, reads
longer than the trace's step (docs/guide/analysis.md gives the figures): compare step times with
the logs' through this trace, not with their ``batch``.
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

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param, first_repeat, typename
from hetsim.model.trace import Trace
from hetsim.scenario.config import MAX_COUNT, MAX_STEP_S

DATA_PACKAGE = "hetsim"
_TIMER = re.compile(r"timer_summary_(\d+)\.json$")
MIN_DP_TIME_S = 1e-9  # under DP a logged time is a divisor: below a nanosecond it is no measurement


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
        return int(self.config["batch_size"])

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
    i = first_repeat([Path(d).resolve() for d in dirs])
    if i is not None:  # as two nodes, it would double the workers
        raise ConfigError(str(dirs[i]), "given twice (several folders are the nodes of one run, each once)")
    config: dict[str, Any] = {}
    files: list[Path] = []
    timers: list[dict[str, Any]] = []
    for run_dir in dirs:
        root = Path(run_dir)
        if not root.is_dir():
            raise ConfigError(str(run_dir), "a file, not a folder (a reference run's folder holds success.txt)"
                              if root.exists() else "no such folder")  # fmt: skip
        success = root / "success.txt"
        if not success.is_file():
            raise ConfigError(str(success), "missing (a reference run folder holds success.txt)")
        if not files:  # the first folder's success.txt is the run's configuration
            config = _check_config(parse_success(success.read_text(encoding="utf-8", errors="replace")), success)
            if "batch_size" not in config:  # every reference run logs it; without it the import would guess
                raise ConfigError(f"{success}:batch_size", "missing (the run's global batch, 'batch_size : B')")
        ranks = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _TIMER.search(p.name)))
        if not ranks:
            raise ConfigError(str(root), "no timer_summary_<rank>.json files")
        files.extend(path for _, path in ranks)
        timers.extend(_read_timer(path, bool(config.get("dynamic_partition", False))) for _, path in ranks)
    _check_lengths(files, timers)
    run = RunLog(tuple(Path(d) for d in dirs), config, tuple(timers))
    source = f"{Path(dirs[0]) / 'success.txt'}:num_epochs"
    lacking = [path for path, t in zip(files, timers) if "mean_batch_process_times" not in t]
    if lacking:
        if run.step_compute_s is None:
            field = f"{lacking[0]}:mean_batch_process_times"
            raise ConfigError(field, "missing (and no per-step process_times to compute it from)")
        if "num_epochs" not in config:
            raise ConfigError(source, "missing (the timer summaries have no mean_batch_process_times)")
        if run.epochs > len(run.step_compute_s):
            raise ConfigError(source, f"must be <= the {len(run.step_compute_s)} steps logged, got {run.epochs}")
    return run


def _check_config(config: dict[str, Any], source: Path) -> dict[str, Any]:
    """``config`` with the values the import reads checked: counts within MAX_COUNT, switches
    True or False."""
    for key in ("batch_size", "num_epochs"):  # numbers the import divides and counts by
        if key in config:
            config[key] = _number(config[key], f"{source}:{key}", count=True, low=1)
    for key in ("dynamic_partition", "enhance"):
        if not isinstance(config.get(key, False), bool):
            raise ConfigError(f"{source}:{key}", f"must be True or False, got {typename(config[key])}")
    return config


def _number(value: Any, field: str, *, count: bool = False, low: float = 0, why: str = "") -> Any:
    """The one check of a number read from a run's logs: a count is an integer in
    ``[low, MAX_COUNT]``; a time is a finite number of seconds in ``[low, MAX_STEP_S]``
    (``why`` says why ``low``). Booleans, strings and null are refused."""
    if value is None:
        raise ConfigError(field, f"must be {'an integer' if count else 'a number'}, got null")
    if count:
        return Param(field, "integer", low=int(low), high=MAX_COUNT).check(value)
    seconds = Param(field).check(value)  # a finite number, not a boolean
    if seconds < low:
        raise ConfigError(field, f"must be >= {low:g} s, got {seconds:g}{why}")
    if seconds > MAX_STEP_S:
        raise ConfigError(field, f"{seconds:g} s is longer than {MAX_STEP_S:g} s: check the units")
    return seconds


def _times(values: Any, field: str, low: float = 0, why: str = "") -> list[float]:
    """A logged list of times, each checked by :func:`_number`."""
    if not isinstance(values, list):
        raise ConfigError(field, f"must be a list of numbers, got {'null' if values is None else typename(values)}")
    if not values:
        raise ConfigError(field, "needs at least one value")
    return [_number(v, f"{field}.{i}", low=low, why=why) for i, v in enumerate(values)]


def _read_json(path: Path) -> Any:
    """A JSON file's content; an unreadable or invalid file is a ConfigError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ConfigError(str(path), "not valid JSON: nested too deeply") from None
    except ValueError as exc:  # bad syntax, bad UTF-8, an integer past Python's digit limit
        raise ConfigError(str(path), f"not valid JSON: {exc}") from None
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read: {exc.strerror or exc}") from None


def _read_timer(path: Path, dynamic: bool) -> dict[str, Any]:
    """A rank's timer summary, with every number the import reads checked. Under
    ``dynamic``, the times the DP rule divides by must be at least :data:`MIN_DP_TIME_S`."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "must hold a JSON object")
    for label in ("batch.process", "batch.reduce"):
        if not isinstance(data.get(label), dict) or "average_duration" not in data[label]:
            raise ConfigError(f"{path}:{label}", "missing")
    for label in ("batch.process", "batch.reduce"):
        data[label]["average_duration"] = _number(data[label]["average_duration"], f"{path}:{label}.average_duration")
    if "n_events" not in data["batch.process"]:
        raise ConfigError(f"{path}:batch.process.n_events", "missing")
    events = _number(data["batch.process"]["n_events"], f"{path}:batch.process.n_events", count=True)
    data["batch.process"]["n_events"] = events
    for key in ("mean_batch_process_times", "process_times", "reduce_times"):
        if key in data:
            divides = dynamic and key != "reduce_times"
            why = " (the DP rule divides by each epoch's mean)" if divides else ""
            data[key] = _times(data[key], f"{path}:{key}", MIN_DP_TIME_S if divides else 0, why)
    return data


def _check_lengths(files: Sequence[Path], timers: Sequence[dict[str, Any]]) -> None:
    """Every rank logged as many epochs and steps as the first; a rank's ``reduce_times`` has
    one value per ``process_times`` value."""
    for path, t in zip(files, timers):
        if "process_times" in t and "reduce_times" in t and len(t["process_times"]) != len(t["reduce_times"]):
            raise ConfigError(
                f"{path}:reduce_times",
                f"length {len(t['reduce_times'])}, but process_times has length {len(t['process_times'])}",
            )
    for key in ("mean_batch_process_times", "process_times", "reduce_times"):
        have = [(path, len(t[key])) for path, t in zip(files, timers) if key in t]
        for path, n in have[1:]:
            if n != have[0][1]:
                problem = f"length {n}, but {have[0][0]} has length {have[0][1]}"
                raise ConfigError(f"{path}:{key}", f"{problem}: the ranks must log the same epochs or steps")


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
