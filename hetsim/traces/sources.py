"""What ``export-trace`` reads: the runs (one :class:`~hetsim.traces.chrome.ExportRun` per
policy) of a ``simulate --out`` folder, a sweep results folder (the plotted cell's kept traces),
a validation run folder or a trace file (CSV or Parquet), with the worker names and the bucket
plan of the scenario where the folder records it.

Every problem is one :class:`~hetsim.core.errors.ConfigError` naming the path or the option: not a
trace, a table whose rows are neither one per worker per step nor one per update, a policy the
source does not hold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsim.core.errors import ConfigError
from hetsim.core.files import FRAME_FORMATS
from hetsim.model.trace import Trace, fill_optional_columns, read_trace_table
from hetsim.traces.chrome import ExportRun

if TYPE_CHECKING:
    import pandas as pd

    from hetsim.scenario.scenario import Scenario

TRACE_NEEDS = ("step", "worker", "local_batch", "start_s", "compute_s", "wait_s", "comm_s")  # the rest has defaults
MAX_WORKER = 100_000  # a worker index beyond this is not one (each worker is a track)
KEPT_TRACES = "traces.parquet"  # a sweep folder's kept traces (hetsim.report.build.TRACES_FILE)


@dataclass(frozen=True)
class Source:
    """The runs found, what the source is (for the output's otherData) and notes for the user."""

    runs: list[ExportRun]
    kind: str
    notes: list[str] = field(default_factory=list)


def load_source(path: Path, policy: str | None = None) -> Source:
    """The runs of ``path`` (a folder or a trace file); only ``policy``'s when given."""
    path = Path(path)
    if path.is_dir():
        if (path / "sweep.toml").is_file():
            source = _sweep_folder(path)
        elif (path / "meta.json").is_file():
            source = _validation_folder(path)
        elif (path / "summary.json").is_file():
            source = _simulate_folder(path)
        else:
            raise ConfigError(str(path), "not a simulate --out, sweep or validation run folder (no summary.json, "
                                         "sweep.toml or meta.json)")  # fmt: skip
    elif path.is_file():
        if path.suffix.lower() not in FRAME_FORMATS:
            raise ConfigError(str(path), f"not a trace file ({', '.join(FRAME_FORMATS)}) nor a run folder")
        source = Source(_traces(_read(path), path, f"trace file {path.name}"), "trace file")
    else:
        raise ConfigError(str(path), "no such file or folder")
    return _only(source, policy, path)


def _only(source: Source, policy: str | None, path: Path) -> Source:
    if policy is None:
        return source
    held = [r.trace.policy for r in source.runs]
    if policy not in held:
        raise ConfigError("--policy", f"{policy!r} is not in {path} (it holds {', '.join(held)})")
    return replace(source, runs=[r for r in source.runs if r.trace.policy == policy])


def _read(path: Path) -> pd.DataFrame:
    """A trace table with the columns a table may leave out filled in (epoch 0, every gradient
    kept, one policy named ``trace``)."""
    frame = read_trace_table(path, TRACE_NEEDS)
    defaults = {"epoch": 0, "included": True, "policy": "trace"}
    frame = frame.assign(**{c: v for c, v in defaults.items() if c not in frame.columns})
    return fill_optional_columns(frame)  # read_trace_table read included and up as true or false


def _traces(frame: pd.DataFrame, path: Path, label: str, scenario: Scenario | None = None) -> list[ExportRun]:
    """One run per policy of ``frame``, checked to be a trace: one row per worker per step (a
    barrier policy) or one per update (no barrier)."""
    if int(frame["worker"].max()) > MAX_WORKER:
        raise ConfigError("worker", f"{int(frame['worker'].max())} in {path} is not a worker index")
    runs = []
    for policy in dict.fromkeys(frame["policy"].astype(str)):
        rows = frame[frame["policy"].astype(str) == policy]
        if rows.duplicated(["step", "worker"]).any():
            step = int(rows[rows.duplicated(["step", "worker"])]["step"].iloc[0])
            raise ConfigError(str(path), f"policy {policy}: step {step} has two rows of one worker: not a trace")
        per_step = rows.groupby("step").size()
        if not ((per_step == rows["worker"].nunique()).all() or (per_step == 1).all()):
            step = int(per_step.index[(per_step != per_step.max()).to_numpy()][0])
            raise ConfigError(str(path), f"policy {policy}: step {step} lacks a worker's row (a trace has one row "
                                         "per worker per step, or one per update)")  # fmt: skip
        trace = Trace.from_frame(rows.assign(policy=policy))
        names = tuple(w.name for w in scenario.workers) if scenario is not None else ()
        buckets = scenario.buckets() if scenario is not None else None
        runs.append(ExportRun(trace, names, buckets, label))
    return runs


def _read_json(path: Path) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(str(path), f"not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "not a JSON object")
    return data


def _simulate_folder(path: Path) -> Source:
    """``simulate --out``: trace.parquet, and the scenario in summary.json."""
    if not (path / "trace.parquet").is_file():
        raise ConfigError(str(path), "holds no trace.parquet (simulated with --trace none?)")
    record = _read_json(path / "summary.json")
    scenario, notes = _rebuilt(record, path / "summary.json")
    seed = record.get("seed")
    label = f"simulated: {scenario.name if scenario else 'scenario'}, seed {seed}"
    return Source(_traces(_read(path / "trace.parquet"), path / "trace.parquet", label, scenario), "simulate --out",
                  notes)  # fmt: skip


def run_scenario(trace: Path) -> tuple[Scenario, Path] | None:
    """The scenario of the ``simulate --out`` folder that ``trace`` (its trace.parquet or
    trace.csv) lies in, and the summary.json that records it; None where there is none, or it
    does not load."""
    trace = Path(trace)
    record = trace.parent / "summary.json"
    if trace.name not in ("trace.parquet", "trace.csv") or not record.is_file():
        return None
    try:
        scenario, _ = _rebuilt(_read_json(record), record)
    except ConfigError:
        return None
    return None if scenario is None else (scenario, record)


def _config(record: Mapping[str, Any]) -> Any:
    """The scenario config a simulate folder's summary.json records (None where it has none)."""
    scenario = record.get("scenario")
    return scenario.get("config") if isinstance(scenario, dict) else None


def _rebuilt(record: Mapping[str, Any], where: Path) -> tuple[Scenario | None, list[str]]:
    """The scenario a folder's ``record`` holds, or None and a note saying the workers go
    unnamed (and which plug-ins it was made with, where it records them)."""
    from hetsim.scenario.config import build_scenario

    config = _config(record)
    if not isinstance(config, dict):
        return None, [f"{where} records no scenario: workers are numbered, buckets not drawn"]
    try:
        return build_scenario(config), []
    except ConfigError as exc:
        plugins = record.get("hetsim_plugins")
        made = f"; it was made with HETSIM_PLUGINS={plugins}" if plugins else ""
        return None, [f"the scenario in {where} does not load ({exc}{made}): workers are numbered, buckets not drawn"]


def _sweep_folder(path: Path) -> Source:
    """A sweep results folder: the plotted cell's kept traces, in its scenario."""
    from hetsim.sweep.results import RunFolder
    from hetsim.sweep.spec import point_scenario

    folder = RunFolder.open(path, "RUN_OR_TRACE")
    if not (path / KEPT_TRACES).is_file():
        raise ConfigError(str(path), f"holds no {KEPT_TRACES} (a sweep run with --trace none keeps no trace)")
    spec = folder.spec()
    chosen = dict(spec.plots.cell)  # the plotted cell, as hetsim.report.build.plot_cell_labels picks it
    labels = {a.name: chosen.get(a.name, a.labels[-1]) for a in spec.axes}
    scenario = point_scenario(spec, tuple(a.labels.index(labels[a.name]) for a in spec.axes))
    cell = ", ".join(f"{k}={v}" for k, v in labels.items()) or "its one cell"
    runs = _traces(_read(path / KEPT_TRACES), path / KEPT_TRACES, f"sweep {path.name}: {cell}", scenario)
    return Source(runs, "sweep results folder")


def _validation_folder(path: Path) -> Source:
    """A validation run folder: trace.parquet, ranks named by meta.json's devices."""
    meta = _read_json(path / "meta.json")
    if not (path / "trace.parquet").is_file():
        raise ConfigError(str(path), "holds no trace.parquet (the run recorded no step yet)")
    devices = meta.get("devices")
    devices = devices if isinstance(devices, list) else []
    names = tuple(f"rank {i} ({d})" for i, d in enumerate(devices))
    what = " ".join(str(meta[k]) for k in ("workload", "backend", "comm") if isinstance(meta.get(k), str))
    label = f"validation run {path.name}: {len(devices) or '?'} ranks {what}".rstrip()
    runs = [replace(r, worker_names=names) for r in _traces(_read(path / "trace.parquet"), path, label)]
    return Source(runs, "validation run folder")


def describe(runs: Sequence[ExportRun]) -> str:
    """``equal, dynamic (4 workers)``: the policies and workers of ``runs``."""
    workers = max((r.trace.n_workers for r in runs), default=0)
    return f"{', '.join(r.trace.policy for r in runs)} ({workers} workers)"
