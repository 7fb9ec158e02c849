"""The Trace: one row per worker per step, the table every part of hetsim speaks.

Columns (docs/architecture.md): policy, epoch, step, worker, local_batch, start_s, compute_s, wait_s,
comm_s, included; simulated traces add ``slowdown`` (the episode factor applied to that
worker's compute; 1 outside episodes) and ``up`` (whether the worker was up at the step's
start); a table without them reads as 1 and True. Engines fill a
:class:`TraceBuilder` with plain numbers (no pandas on the hot path); the finished
:class:`Trace` holds NumPy columns in step-major order and converts to a DataFrame or
CSV/Parquet files on demand.

This module is also the one home of trace *files*: :func:`write_trace_table` writes a trace
table to CSV and/or Parquet (atomically), :func:`read_trace_table` reads one back by its
extension, :func:`check_trace_table` is the schema check every table read from outside passes,
and :func:`fill_optional_columns` gives a table without ``slowdown``/``up`` their defaults.
pandas is imported inside the functions that need it: engines import this module and must not
pay for pandas.

A trace without a barrier (``synchronous = False``, the async policy) has one row per update
instead: ``step`` is the update index, ``worker`` the worker that pushed it, ``wait_s`` the
time it spent down before computing, ``comm_s`` its exchange (on a network with a shared link:
the time it queued for the link plus its transfer), so that it was applied at ``start_s +
wait_s + compute_s + comm_s``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.files import FRAME_FORMATS, frame_format, not_a_file, write_frame
from hetsim.core.params import MAX_COUNT, MAX_STEP_S

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
OPTIONAL_DEFAULTS = {"slowdown": 1.0, "up": True}  # what a table without these columns means
REQUIRED_COLUMNS = ("worker", "local_batch", "compute_s")  # the least a table needs (e.g. to be calibrated)
NUMERIC_COLUMNS = ("epoch", "step", "start_s", "wait_s", "comm_s", "slowdown", "gradient_mb")  # checked when present
INTEGER_COLUMNS = ("worker", "local_batch", "epoch", "step")
DURATION_COLUMNS = ("compute_s", "wait_s", "comm_s")  # one step's times, each at most MAX_STEP_S
FLAG_COLUMNS = ("included", "up")  # true or false, checked when present
FLAG_WORDS = {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False}  # as text, any case
TRACE_FORMATS = FRAME_FORMATS  # file suffix -> "csv" | "parquet"


@dataclass(frozen=True, eq=False)
class Trace:
    """One run's rows as NumPy columns. Two traces are equal when policy, worker count,
    synchronicity and every column are equal (element-wise).

    ``weighted`` is how the run combined its workers' gradients, recorded by the engine from the
    policy object's ``weighted_gradients`` trait: by batch (True) or as a plain mean (False);
    None where nothing recorded it (a trace read from a file or built by hand), and then the
    trait of the policy registered under ``policy`` is taken (:func:`hetsim.run.metrics.combines_by_batch`).
    It is not part of equality: a trace written and read back equals the one run."""

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
    weighted: bool | None = None

    def __post_init__(self) -> None:
        if self.slowdown is None:
            object.__setattr__(self, "slowdown", np.ones(len(self.step)))
        if self.up is None:
            object.__setattr__(self, "up", np.ones(len(self.step), dtype=np.bool_))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        if (self.policy, self.n_workers, self.synchronous) != (other.policy, other.n_workers, other.synchronous):
            return False
        return all(np.array_equal(getattr(self, c), getattr(other, c)) for c in _NUMERIC)

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside: not hashable

    @property
    def n_steps(self) -> int:
        if not self.synchronous:
            return len(self.step)
        return len(self.step) // self.n_workers if self.n_workers else 0

    def per_step(self, column: str) -> np.ndarray:
        """A column reshaped to (steps, workers)."""
        return getattr(self, column).reshape(self.n_steps, self.n_workers)

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        data = {"policy": np.full(len(self.step), self.policy, dtype=object)}
        data.update({c: getattr(self, c) for c in _NUMERIC})
        return pd.DataFrame(data, columns=["policy", *_NUMERIC])

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Trace:
        """A trace from a table with the trace columns, one policy, rows in any order."""
        frame = frame.sort_values(["step", "worker"], kind="stable")
        n_workers = int(frame["worker"].nunique())
        policies = frame["policy"].unique() if "policy" in frame else ["unknown"]
        if len(policies) != 1:
            raise ValueError(f"a Trace holds one policy, this table has {len(policies)}")
        frame = fill_optional_columns(frame)
        cols = {c: frame[c].to_numpy(dtype=t) for c, t in _NUMERIC.items()}
        synchronous = bool((frame.groupby("step").size() == n_workers).all())
        return cls(policy=str(policies[0]), n_workers=n_workers, synchronous=synchronous, **cols)


class Recorder(Protocol):
    """What a barrier engine hands its steps to, a block of consecutive steps at a time: the
    full trace (:class:`TraceBuilder`) or a summary that keeps O(steps + workers) numbers
    (:class:`hetsim.run.summary_recorder.SummaryRecorder`). Per-worker values are (workers,) rows that hold
    for every step of the block, or (steps x workers) arrays; ``comm_s`` one number or one per
    step; ``up`` None when every worker is up."""

    def add_block(self, first: int, epoch: np.ndarray, start_s: np.ndarray, local_batch: np.ndarray,
                  compute_s: np.ndarray, wait_s: np.ndarray, included: np.ndarray, slowdown: np.ndarray,
                  up: np.ndarray | None, comm_s: float | np.ndarray) -> None: ...  # fmt: skip


class TraceBuilder:
    """Preallocated (steps x workers) arrays an engine fills in place; :meth:`finish` freezes
    them into a :class:`Trace` (rows step-major)."""

    def __init__(self, policy: str, n_workers: int, n_steps: int, every: int = 1, weighted: bool | None = None) -> None:
        """Room for ``n_steps`` rows of steps: every step, or (``every`` > 1) each ``every``-th
        one, the others dropped as they are added (``--trace sample``); ``weighted``: the
        policy's ``weighted_gradients`` trait, recorded in the trace."""
        self.policy, self.n_workers, self.every, self.weighted = policy, n_workers, every, weighted
        self.n_steps = -(-n_steps // every)
        shape = (self.n_steps, n_workers)
        self.local_batch = np.zeros(shape, dtype=np.int64)
        self.compute_s = np.zeros(shape)
        self.wait_s = np.zeros(shape)
        self.included = np.zeros(shape, dtype=np.bool_)
        self.slowdown = np.ones(shape)
        self.up = np.ones(shape, dtype=np.bool_)
        self.epoch = np.zeros(n_steps, dtype=np.int64)
        self.start_s = np.zeros(n_steps)
        self.comm_s = np.zeros(n_steps)

    def add_block(self, first: int, epoch: np.ndarray, start_s: np.ndarray, local_batch: np.ndarray,
                  compute_s: np.ndarray, wait_s: np.ndarray, included: np.ndarray, slowdown: np.ndarray,
                  up: np.ndarray | None, comm_s: float | np.ndarray) -> None:  # fmt: skip
        """Write a block of steps from step ``first`` on (see :class:`Recorder`)."""
        if self.every > 1:
            keep = np.flatnonzero((first + np.arange(len(start_s))) % self.every == 0)
            if not keep.size:
                return

            def rows_of(x: np.ndarray) -> np.ndarray:  # a per-worker value: (steps x workers), or one row
                return x[keep] if x.ndim == 2 else x

            first = (first + int(keep[0])) // self.every
            epoch, start_s = epoch[keep], start_s[keep]
            comm_s = comm_s[keep] if isinstance(comm_s, np.ndarray) else comm_s
            local_batch, compute_s, wait_s = rows_of(local_batch), rows_of(compute_s), rows_of(wait_s)
            included, slowdown = rows_of(included), rows_of(slowdown)
            up = None if up is None else rows_of(up)
        rows = slice(first, first + len(start_s))
        self.local_batch[rows] = local_batch
        self.compute_s[rows] = compute_s
        self.wait_s[rows] = wait_s
        self.included[rows] = included
        if not (slowdown.ndim == 1 and (slowdown == 1.0).all()):  # the rows start at 1 and True
            self.slowdown[rows] = slowdown
        if up is not None:
            self.up[rows] = up
        self.epoch[rows] = epoch
        self.start_s[rows] = start_s
        self.comm_s[rows] = comm_s

    def finish(self) -> Trace:
        """The frozen trace: every row of every step."""
        k, n = self.n_steps, self.n_workers

        def per_step(column: np.ndarray) -> np.ndarray:
            return np.repeat(column[:k], n)

        return Trace(
            policy=self.policy,
            n_workers=n,
            epoch=per_step(self.epoch),
            step=np.repeat(np.arange(k, dtype=np.int64) * self.every, n),
            worker=np.tile(np.arange(n, dtype=np.int64), k),
            local_batch=self.local_batch[:k].ravel(),
            start_s=per_step(self.start_s),
            compute_s=self.compute_s[:k].ravel(),
            wait_s=self.wait_s[:k].ravel(),
            comm_s=per_step(self.comm_s),
            included=self.included[:k].ravel(),
            slowdown=self.slowdown[:k].ravel(),
            up=self.up[:k].ravel(),
            weighted=self.weighted,
        )


def async_trace(policy: str, n_workers: int, columns: Sequence[Any], updates_per_epoch: int) -> Trace:
    """A barrier-free trace from the columns ``(worker, local_batch, start_s, compute_s, down_s,
    slowdown, comm_s)`` of its updates, in the order they were applied. A worker down at its
    update's start waits ``down_s`` there (``wait_s``), and ``up`` says so."""
    worker, local_batch, start_s, compute_s, down_s, slowdown, comm_s = columns
    k = len(worker)
    down = np.asarray(down_s, dtype=float)
    return Trace(
        policy=policy,
        n_workers=n_workers,
        epoch=np.arange(k, dtype=np.int64) // updates_per_epoch,
        step=np.arange(k, dtype=np.int64),
        worker=np.asarray(worker, dtype=np.int64),
        local_batch=np.asarray(local_batch, dtype=np.int64),
        start_s=np.asarray(start_s, dtype=float),
        compute_s=np.asarray(compute_s, dtype=float),
        wait_s=down,
        comm_s=np.asarray(comm_s, dtype=float),
        included=np.ones(k, dtype=np.bool_),
        slowdown=np.asarray(slowdown, dtype=float),
        up=down == 0,
        synchronous=False,
    )


# ----------------------------------------------------------------------------- trace files


def trace_table(table: pd.DataFrame | Trace | Iterable[Trace]) -> pd.DataFrame:
    """A DataFrame as it is, or the rows of one or several traces concatenated."""
    import pandas as pd

    if isinstance(table, pd.DataFrame):
        return table
    if isinstance(table, Trace):
        return table.to_frame()
    return pd.concat([t.to_frame() for t in table], ignore_index=True)


def write_trace_table(table: pd.DataFrame | Trace | Iterable[Trace], *targets: str | Path) -> None:
    """``table`` to every target, CSV or Parquet by its suffix (see :data:`TRACE_FORMATS`), each
    replaced atomically. Every suffix is checked before anything is written; a DataFrame is
    written with exactly its own columns."""
    for target in targets:
        frame_format(target)
    frame = trace_table(table)
    for target in targets:
        write_frame(target, frame)


def read_trace_table(path: str | Path, required: Sequence[str] = REQUIRED_COLUMNS) -> pd.DataFrame:
    """A trace table from Parquet (``.parquet``, ``.pq``) or else CSV, checked by
    :func:`check_trace_table`. Any problem is one :class:`ConfigError` naming the file."""
    import pandas as pd

    p = Path(path)
    if p.is_dir():
        raise ConfigError(str(path), "a folder: name its trace file (a simulate --out or validation run folder holds "
                                     "trace.parquet)")  # fmt: skip
    if not p.is_file():
        raise ConfigError(str(path), not_a_file(p))
    if p.name.endswith((".json", ".json.gz", ".pt.trace.json")):
        raise ConfigError(str(path), "a JSON file, not a trace table: a torch.profiler trace goes through "
                                     "hetsim import-trace first (its CSV or Parquet output is the trace)")  # fmt: skip
    parquet = frame_format(p, default="csv") == "parquet"
    try:
        frame = pd.read_parquet(p) if parquet else pd.read_csv(p)
    except Exception as exc:  # pandas and pyarrow raise many types for unreadable files
        kind = "Parquet" if parquet else "CSV"
        raise ConfigError(str(path), f"not a readable {kind} table: {_first_line(exc)}") from None
    return check_trace_table(frame, required, source=str(path))


def check_trace_table(
    frame: pd.DataFrame, required: Sequence[str] = REQUIRED_COLUMNS, source: str | None = None
) -> pd.DataFrame:
    """The ``required`` columns present, rows present, every numeric column that is present
    numeric, finite and non-negative, integer columns integral, ``included`` and ``up`` true or
    false. Returns a copy with numeric and boolean dtypes. Errors name the column as their field
    and ``source`` (a file) in their text."""
    import pandas as pd

    where = f" in {source}" if source else ""
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ConfigError(missing[0], f"missing column{where} (a trace needs {', '.join(required)})")
    if frame.empty:
        raise ConfigError(source or "trace", "the table has no rows")
    out = frame.copy()
    if "policy" in out.columns:  # a row's policy names the run it belongs to: an empty one belongs to none
        names = out["policy"]
        blank = [v for v in names.dropna().unique() if not str(v).strip()]  # on the few names, not every row
        empty = names.isna() | names.isin(blank)
        if empty.any():
            row = int(np.flatnonzero(empty.to_numpy())[0])
            raise ConfigError("policy", f"empty in data row {row + 1}{where}: every row names the policy it ran")
    for column in (*REQUIRED_COLUMNS, *NUMERIC_COLUMNS):
        if column not in out.columns:
            continue
        raw = out[column]
        numeric = pd.api.types.is_numeric_dtype(raw)
        if not (numeric or pd.api.types.is_object_dtype(raw) or pd.api.types.is_string_dtype(raw)):
            raise ConfigError(column, f"holds {raw.dtype} values{where}, not numbers")  # dates: to_numeric takes them
        values = pd.to_numeric(raw, errors="coerce").astype(np.float64)  # float16 would overflow at the bounds
        bad = values.isna() | ~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ConfigError(column, f"non-numeric value {str(raw.iloc[row])!r} in data row {row + 1}{where}")
        if (values < 0).any():
            row = int(np.flatnonzero((values < 0).to_numpy())[0])
            raise ConfigError(column, f"negative value {float(raw.iloc[row]):g} in data row {row + 1}{where}")
        limit = MAX_COUNT if column in INTEGER_COLUMNS else MAX_STEP_S if column in DURATION_COLUMNS else np.inf
        if (values > limit).any():
            row = int(np.flatnonzero((values > limit).to_numpy())[0])
            at = f"in data row {row + 1}{where}"
            if column in INTEGER_COLUMNS:
                raise ConfigError(column, f"value {int(values.iloc[row])} {at} is beyond 2^40")
            raise ConfigError(
                column, f"{float(values.iloc[row]):g} s {at} is longer than {MAX_STEP_S:g} s: check the units"
            )
        if column in INTEGER_COLUMNS:
            frac = values != np.round(values)
            if frac.any():
                row = int(np.flatnonzero(frac.to_numpy())[0])
                raise ConfigError(column, f"non-integer value {float(raw.iloc[row]):g} in data row {row + 1}{where}")
            values = values.astype(np.int64)
        out[column] = values
    for column in FLAG_COLUMNS:
        if column in out.columns:
            out[column] = _flag_column(out[column], column, where)
    return out


def _flag_column(raw: pd.Series, column: str, where: str) -> pd.Series:
    """A true/false column read strictly: booleans, or the words and numbers of FLAG_WORDS."""
    if raw.dtype == bool:
        return raw
    text = raw.astype(str).str.strip().str.lower()
    bad = ~text.isin(list(FLAG_WORDS))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(column, f"not true or false: {str(raw.iloc[row])!r} in data row {row + 1}{where}")
    return text.map(FLAG_WORDS).astype(bool)


def fill_optional_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the optional columns it lacks (``slowdown`` 1.0, ``up`` True) added."""
    return frame.assign(**{c: v for c, v in OPTIONAL_DEFAULTS.items() if c not in frame.columns})


def traces_by_policy(frame: pd.DataFrame) -> dict[str, Trace]:
    """One :class:`Trace` per policy of a table, in order of first appearance."""
    return {str(p): Trace.from_frame(frame[frame["policy"] == p]) for p in dict.fromkeys(frame["policy"])}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
