"""Run folders: ``runs/NNNN_<name>/`` with the resolved sweep, provenance, results and summary.

Layout::

    sweep.toml        the resolved sweep (base inlined): --resume reads it back
    meta.json         hetsim version, git commit, Python, host, date, command line, what
                      the plotted cell keeps of its traces (``trace``, ``sample_every``:
                      --resume and report keep to it), ``sweep_sha256``, the hash of
                      sweep.toml as written (--resume and report refuse an edited one), and
                      ``resumes``: each resume's provenance, executor and engine
    parts/cell-NNNNN.parquet   one file per finished cell, written atomically as it finishes
    results.parquet   one row per cell and replication (all parts), rebuilt at the end
    summary.csv       per cell: mean and 95% CI over replications, speedup vs equal
    traces.parquet    replication 0 of the plotted cell, every policy (for the trace plots):
                      every step, or (--trace sample) steps 0, K, 2K, ...; none with --trace none
    plots/*.png

Every file is written to a temporary name and renamed, so a killed sweep never leaves a
half-written file; the parts present are exactly the cells that finished.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tomli_w

from hetsim.core.errors import ConfigError
from hetsim.core.files import atomic_write, remove_stale_temporaries, write_frame, write_json
from hetsim.core.options import SPEEDUP_METRICS, TraceMode
from hetsim.core.provenance import command_line, git_commit, provenance  # noqa: F401 (re-exported: validation.matrix_report)
from hetsim.model.trace import COLUMNS, Trace, read_trace_table, traces_by_policy, write_trace_table
from hetsim.run.metrics import BASELINE, mean_ci
from hetsim.scenario.config import read_table
from hetsim.sweep.spec import SweepSpec, load_sweep

METRICS = ("mean_step_s", "total_time_s", "throughput_sps", "mean_utilization")
PART_COLUMNS = ("cell", "replication", "seed", *METRICS)  # what every part holds, at least
PART = re.compile(r"cell-(\d{5})\.parquet")  # a finished cell; anything else in parts/ is ignored
NAME_CHARS = 64  # of the sweep's name in its folder's (the whole name is in sweep.toml): a file name has 255 bytes


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, root: Path, name: str) -> RunFolder:
        """A new ``root/NNNN_<name>`` (the name's first :data:`NAME_CHARS` characters, each run of
        any but letters, digits and ``._-`` one ``-``) numbered after the highest existing one;
        never reuses a folder."""
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError("--runs", f"cannot make {root}: {exc.strerror or exc}") from None
        numbers = [int(m.group(1)) for p in root.iterdir() if (m := re.match(r"(\d{4})_", p.name))]
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name)[:NAME_CHARS].strip("-") or "sweep"
        number = max(numbers, default=0) + 1
        while True:
            path = root / f"{number:04d}_{safe}"
            try:
                path.mkdir()
                return cls(path)
            except FileExistsError:
                number += 1
            except OSError as exc:  # a folder that cannot be written in
                raise ConfigError("--runs", f"cannot make {path}: {exc.strerror or exc}") from None

    @classmethod
    def start(cls, root: Path, spec: SweepSpec, meta: Mapping[str, Any]) -> RunFolder:
        """A new folder for ``spec`` with its meta.json (:func:`provenance` and ``meta``) and
        sweep.toml, in that order: a folder that :meth:`open` accepts has its meta.json, so a
        resume never falls back to a default that the sweep did not use."""
        folder = cls.create(root, spec.name)
        text = tomli_w.dumps(spec.to_dict())
        write_json(folder.path / "meta.json", {**provenance(), **meta, "sweep_sha256": fingerprint(text)})
        folder.write_text("sweep.toml", text)
        return folder

    @classmethod
    def open(cls, path: Path, option: str = "run_dir") -> RunFolder:
        """An existing results folder; ``option`` names the argument it came from in errors."""
        folder = cls(path)
        if not (folder.path / "sweep.toml").is_file():
            raise ConfigError(option, f"{path} is not a sweep results folder (no sweep.toml)")
        parts = folder.path / "parts"
        if parts.exists() and not parts.is_dir():  # found before a cell runs, not when it is written
            raise ConfigError(option, f"{parts} is not a folder (the finished cells are kept there)")
        for name in ("results.parquet", "summary.csv", "traces.parquet"):
            if (folder.path / name).is_dir():
                raise ConfigError(option, f"{folder.path / name} is a folder, where the report writes a file")
        return folder

    def spec(self) -> SweepSpec:
        """The folder's sweep, refused (one line) where sweep.toml was edited since the sweep began
        (meta.json's ``sweep_sha256``): its finished cells were run from the sweep as it was, and
        a resume or a report would mix them, under the same labels, with cells of another."""
        spec = load_sweep(self.path / "sweep.toml", new=False)
        meta = self.path / "meta.json"
        if not meta.is_file() and self.done_cells():  # sweep writes it first: removed since, with what it vouched for
            raise ConfigError(str(meta), "missing, so whether sweep.toml was edited since the cells in parts/ ran "
                              "cannot be told: restore it, or start a new sweep")  # fmt: skip
        began = read_table(meta).get("sweep_sha256") if meta.is_file() else None
        if began is not None and began != fingerprint((self.path / "sweep.toml").read_text(encoding="utf-8")):
            why = "its finished cells were run from the sweep as it was"
            raise ConfigError(str(self.path / "sweep.toml"), f"edited since the sweep began ({why}): restore it, or "
                              "start a new sweep from the edited file")  # fmt: skip
        return spec

    def record_resume(self, meta: Mapping[str, Any]) -> str | None:
        """Append this resume's :func:`provenance` and ``meta`` (its executor and engine) to
        meta.json's ``resumes``; a note when its version or commit is not the sweep's first (its
        cells then come from two versions of the code), else None."""
        path = self.path / "meta.json"
        began = read_table(path) if path.is_file() else {}
        now = {**provenance(), **meta}
        write_json(path, {**began, "resumes": [*began.get("resumes", []), now]})
        changed = [f"{key} {began[key]} -> {now[key]}" for key in ("hetsim_version", "git_commit")
                   if key in began and began[key] != now[key]]  # fmt: skip
        if not changed:
            return None
        started = f"{self.path} was started by another hetsim ({', '.join(changed)})"
        return f"{started}: its cells come from both (meta.json's resumes)"

    def trace_mode(self) -> TraceMode:
        """What the sweep keeps of its plotted cell's traces, as its meta.json records (``full``
        without a meta.json: a folder not made by ``sweep``)."""
        path = self.path / "meta.json"
        return TraceMode.from_meta(read_table(path) if path.exists() else {}, str(path))

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.path / name, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

    def write_frame(self, name: str, frame: pd.DataFrame) -> None:
        """A table in the folder, CSV or Parquet by the suffix of ``name``, atomically."""
        write_frame(self.path / name, frame)

    def write_traces(self, name: str, traces: Iterable[Trace]) -> None:
        """Trace files in the folder (e.g. ``traces.parquet``), atomically."""
        write_trace_table(list(traces), self.path / name)

    def read_traces(self, name: str) -> dict[str, Trace] | None:
        """The traces of a trace file written by :meth:`write_traces`, one per policy; None if absent."""
        path = self.path / name
        return traces_by_policy(read_trace_table(path, COLUMNS)) if path.is_file() else None

    def write_part(self, cell_index: int, rows: Sequence[dict[str, Any]]) -> None:
        self.write_frame(f"parts/cell-{cell_index:05d}.parquet", pd.DataFrame(list(rows)))

    def done_cells(self) -> set[int]:
        parts = self.path / "parts"
        if not parts.is_dir():
            return set()
        return {int(m.group(1)) for p in parts.iterdir() if (m := PART.fullmatch(p.name))}

    def heal(self, seeds: Sequence[int], cells: Sequence[Mapping[str, Any]] = ()) -> list[str]:
        """Make the folder trustworthy before a resume or a report: remove the temporary files of
        killed writes, and every part that cannot be read or does not hold one row per
        replication of its cell (its cell then counts as not run). Returns one note per part
        removed (what was wrong with it). A part run with other seeds than ``seeds``, or (given
        ``cells``, each cell's grid labels and policy by its index) at another grid point or
        policy than its cell's now, is an error: sweep.toml was edited where no fingerprint
        could tell (a folder without meta.json), and mixing them would be silently wrong."""
        remove_stale_temporaries(self.path)
        notes = []
        for part in sorted((self.path / "parts").glob("cell-*.parquet")):
            match = PART.fullmatch(part.name)
            if match is None:
                continue
            frame, problem = _read_part(part, int(match.group(1)), len(seeds))
            if frame is None:
                part.unlink()
                notes.append(f"{part.relative_to(self.path)} {problem}")
                continue
            # a folder with a fingerprint was refused by spec() before any edit got here: this
            # is for the folders of earlier versions, which have none
            ran = frame["seed"].tolist()
            if ran != list(seeds):
                raise ConfigError(
                    str(self.path / "sweep.toml"),
                    f"its seed or replications no longer match {part.relative_to(self.path)} (seeds {ran}); "
                    "restore them or start a new sweep",
                )
            if cells:
                self._check_cell(part, frame.iloc[0], int(match.group(1)), cells)
        return notes

    def _check_cell(self, part: Path, first: pd.Series, cell: int, cells: Sequence[Mapping[str, Any]]) -> None:
        """The part's grid labels and policy (its ``first`` row's) are its cell's in the sweep as it is now."""
        expected = cells[cell] if cell < len(cells) else None
        if expected is None or any(k not in first.index or not _same(first[k], v) for k, v in expected.items()):
            now = "no such cell" if expected is None else ", ".join(f"{k}={v}" for k, v in expected.items())
            ran = f"{part.relative_to(self.path)} ran another"
            raise ConfigError(str(self.path / "sweep.toml"), f"its cell {cell} is {now}, but {ran}: restore it or "
                              "start a new sweep")  # fmt: skip

    def results(self) -> pd.DataFrame:
        """All finished rows, ordered by cell and replication."""
        parts = sorted(p for p in (self.path / "parts").glob("cell-*.parquet") if PART.fullmatch(p.name))
        if not parts:
            raise ConfigError(str(self.path), "no finished cells yet")
        frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
        return frame.sort_values(["cell", "replication"], kind="stable").reset_index(drop=True)


def _same(stored: Any, label: Any) -> bool:
    """A label as a part stored it (Parquet's types: NumPy numbers) against the sweep's: a number,
    a boolean or a text (a table or list is its TOML text: hetsim.sweep.spec labels every axis so).
    An array (a list stored by an older hetsim) is no label of today's."""
    if isinstance(stored, np.ndarray):
        return False
    if isinstance(stored, np.generic):
        stored = stored.item()
    if isinstance(label, bool) or isinstance(stored, bool):
        return stored is label
    if isinstance(label, (int, float)):
        return isinstance(stored, (int, float)) and float(stored) == float(label)
    return bool(stored == label)


def fingerprint(text: str) -> str:
    """SHA-256 of sweep.toml's text as the sweep wrote it (of the file, not of the sweep read
    back: a later version that reads or writes a sweep otherwise still opens the folder)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_part(path: Path, cell: int, replications: int) -> tuple[pd.DataFrame | None, str]:
    """A finished cell's part, read once: (its rows, "") or (None, what is wrong with it)."""
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many kinds for a damaged file
        return None, f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    problem = _part_problem(frame, cell, replications)
    return (None, problem) if problem is not None else (frame, "")


def _part_problem(frame: pd.DataFrame, cell: int, replications: int) -> str | None:
    """What is wrong with a finished cell's part (read), or None."""
    missing = [c for c in PART_COLUMNS if c not in frame.columns]
    if missing:
        return f"lacks the column {missing[0]!r}"
    if len(frame) != replications:
        return f"holds {len(frame)} rows, not the {replications} replications of cell {cell}"
    others = sorted(set(frame["cell"].tolist()) - {cell})
    if others:
        return f"holds rows of cell {', '.join(map(str, others))}, not of cell {cell}"
    if frame["replication"].tolist() != list(range(replications)):
        return "does not hold replications 0.." + str(replications - 1)
    for column in METRICS:
        if not pd.api.types.is_numeric_dtype(frame[column]) or pd.api.types.is_bool_dtype(frame[column]):
            return f"holds a non-numeric value in {column!r}"
        if not np.isfinite(frame[column].to_numpy(dtype=float)).all():
            return f"holds a value that is not finite in {column!r}"
    return None


def row_speedups(results: pd.DataFrame, axes: Sequence[str], metric: str = "throughput") -> pd.DataFrame:
    """``results`` with each row's ``speedup_vs_equal`` (by ``metric``, :data:`SPEEDUP_METRICS`):
    against ``equal`` at the same grid point and replication (the same seed); NaN where either
    has no value. A cell runs one policy, so its rows come without it."""
    field, more_is_better = SPEEDUP_METRICS[metric]
    results = results.assign(**{field: pd.to_numeric(results.get(field), errors="coerce")})
    equal = results[results["policy"] == BASELINE][[*axes, "replication", field]]
    merged = results.drop(columns=["speedup_vs_equal"], errors="ignore").merge(
        equal, on=[*axes, "replication"], how="left", suffixes=("", "_equal")
    )
    ratio = merged[field] / merged[f"{field}_equal"]
    speedup = ratio if more_is_better else 1.0 / ratio
    return merged.assign(speedup_vs_equal=speedup, speedup_by=metric).drop(columns=[f"{field}_equal"])


def summarize_cells(results: pd.DataFrame, axes: Sequence[str], metric: str = "throughput") -> pd.DataFrame:
    """Per cell: replications, mean and 95% CI half-width of each metric, and the speedup vs
    ``equal`` by ``metric`` (:data:`SPEEDUP_METRICS`: the policy's throughput over equal's, or
    equal's time to target over the policy's; named in ``speedup_by``, as ``report --metric``
    rewrites it), paired by grid point and replication (see :func:`row_speedups`); NaN where
    either has no value."""
    keys = list(axes)
    merged = row_speedups(results, keys, metric)
    rows = []
    for (cell, policy), group in merged.groupby(["cell", "policy"], sort=True):
        row: dict[str, Any] = {
            "cell": cell,
            **{k: group[k].iloc[0] for k in keys},
            "policy": policy,
            "replications": len(group),
        }
        for column in (*METRICS, "speedup_vs_equal"):
            values = group[column].to_numpy(float)
            mean = float(values.mean())
            half = mean_ci(values).half_width if len(values) > 1 and np.isfinite(values).all() else np.nan
            row[column], row[f"{column}_ci95"] = mean, half
        row["speedup_by"] = metric
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(summary: pd.DataFrame, axes: Sequence[str], policies: Sequence[str]) -> str:
    """Speedup vs equal (mean ± 95% CI) per grid point (rows) and policy (columns)."""
    value = summary.apply(
        lambda r: (
            "-"
            if np.isnan(r["speedup_vs_equal"])
            else (
                f"{r['speedup_vs_equal']:.3f}"
                + ("" if np.isnan(r["speedup_vs_equal_ci95"]) else f" ± {r['speedup_vs_equal_ci95']:.3f}")
            )
        ),
        axis=1,
    )
    index = list(axes) or ["grid"]  # no axes: one grid point, one row (each policy is a cell of its own)
    table = summary.assign(value=value, **({} if axes else {"grid": "one point"})).pivot_table(
        index=index, columns="policy", values="value", aggfunc="first", sort=False
    )
    table = table[[p for p in policies if p in table.columns]]
    header = [*index, *table.columns]
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    for idx, row in table.iterrows():
        idx = idx if isinstance(idx, tuple) else (idx,)
        lines.append("| " + " | ".join([*map(str, idx), *map(str, row.tolist())]) + " |")
    return "\n".join(lines)
