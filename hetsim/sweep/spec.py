"""Sweep files -> validated :class:`SweepSpec` objects: the grid axes, the policies, the
replications and what the plots show. Every grid point is built (and so checked) by the
scenario factory in :mod:`hetsim.scenario.config` when the file is loaded, so a bad cell is reported
before anything runs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_SEED, Param, first_repeat, join, typename
from hetsim.engines import AUTO, engine_named
from hetsim.policies import policy_class
from hetsim.run.simulate import check_kept_size
from hetsim.scenario.config import build_scenario, read_table, resolve_source, set_path
from hetsim.scenario.raw_tables import Table
from hetsim.scenario.scenario import Scenario

MAX_REPLICATIONS = 100_000  # seeds per cell: far beyond any confidence interval's need, within memory
MAX_POINTS = 100_000  # grid points: each is built to be checked before anything runs (seconds for these)
MAX_RUNS = 1_000_000  # grid points x policies x replications: the results table's rows, held in memory


@dataclass(frozen=True)
class Axis:
    """One grid axis: ``labels`` are what the results record; each label sets every path in
    ``sets`` to its value at the same position (a plain ``"path" = [...]`` axis sets one path)."""

    name: str
    labels: tuple[Any, ...]
    sets: tuple[tuple[str, tuple[Any, ...]], ...]

    def overrides(self, k: int) -> tuple[tuple[str, Any], ...]:
        return tuple((path, values[k]) for path, values in self.sets)


@dataclass(frozen=True)
class PlotSpec:
    x: str | None = None
    lines: str | None = None
    cell: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class SweepSpec:
    name: str
    base: dict[str, Any] = field(hash=False)
    policies: tuple[str, ...]
    axes: tuple[Axis, ...]
    replications: int
    seed: int
    plots: PlotSpec = field(default_factory=PlotSpec)
    base_dir: str | None = None  # where the base's relative file paths (empirical data) are read from
    engine: str = "auto"  # simpy | vector | auto: how cells are simulated (the same results either way)
    unfitted: tuple[str, ...] = field(default=(), compare=False)  # the cells' Scenario.unfitted lines, each once

    def to_dict(self) -> dict[str, Any]:
        """The resolved sweep-file form (base inlined), loadable by :func:`load_sweep`."""
        grid: dict[str, Any] = {}
        for axis in self.axes:
            if len(axis.sets) == 1 and axis.sets[0][0] == axis.name:  # a plain axis: its values
                grid[axis.name] = list(axis.sets[0][1])
            else:
                grid[axis.name] = {"values": list(axis.labels), **{p: list(v) for p, v in axis.sets}}
        plots: dict[str, Any] = {k: v for k, v in (("x", self.plots.x), ("lines", self.plots.lines)) if v}
        if self.plots.cell:
            plots["cell"] = dict(self.plots.cell)
        out = {
            "name": self.name,
            "seed": self.seed,
            "replications": self.replications,
            "policies": list(self.policies),
            "base": copy.deepcopy(self.base),
            "grid": grid,
        }
        if plots:
            out["plots"] = plots
        if self.engine != "auto":
            out["engine"] = self.engine
        if self.base_dir is not None:  # so a saved sweep still finds the base's relative files
            out["base_dir"] = self.base_dir
        return out


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(where, f"must be a list, got {typename(value)}")
    if not value:
        raise ConfigError(where, "empty axis: give at least one value")
    return value


def _distinct(values: Sequence[Any], where: str) -> None:
    """A value listed twice would be two cells of one setting, pooled as one with twice the
    replications in the tables (a narrower interval than the runs support)."""
    i = first_repeat(values)
    if i is not None:
        raise ConfigError(f"{where}.{i}", f"{values[i]!r} is listed twice (more runs of one setting: replications)")


def _one_kind(labels: Sequence[Any], where: str) -> None:
    """An axis's labels are one column of the results: numbers, text (tables and lists are
    their TOML text) or booleans, not a mix a table cannot hold."""
    kinds = ["boolean" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else "text" for v in labels]
    for i, kind in enumerate(kinds):
        if kind != kinds[0]:
            raise ConfigError(f"{where}.{i}", f"is a {kind} where the axis's first value is a {kinds[0]}: "
                              "give one kind of value (a number, a text or a boolean)")  # fmt: skip


def _label(value: Any) -> Any:
    """What the results record for an axis's value (a named axis's label): the value, or for a table or a list
    (a slowdown's ``{every_s = 5.0, ...}``) its inline TOML text, so that a table cell and a
    group key are one hashable value."""
    return _inline(value) if isinstance(value, (Mapping, list)) else value


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):  # TOML's basic string: JSON's escapes, and DEL, which TOML forbids raw
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return str(value)


def _key(key: str) -> str:
    """A table key as TOML writes it: bare where it may be, else quoted (``"my label"``, ``"a.b"``)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _inline(key)


def _make_axis(name: str, value: Any) -> Axis:
    where = f"grid.{name}"
    if not isinstance(value, Mapping):
        values = tuple(_list(value, where))
        _distinct(values, where)
        labels = tuple(_label(v) for v in values)
        _one_kind(labels, where)
        return Axis(name, labels, ((name, values),))
    labels = tuple(_list(value.get("values"), f"{where}.values"))
    _distinct(labels, f"{where}.values")
    labels = tuple(_label(v) for v in labels)
    _one_kind(labels, f"{where}.values")
    sets = []
    for path, vals in value.items():
        if path == "values":
            continue
        vals = _list(vals, f"{where}.{path}")
        if len(vals) != len(labels):
            raise ConfigError(f"{where}.{path}", f"has {len(vals)} values for {len(labels)} labels")
        sets.append((path, tuple(vals)))
    if not sets:
        raise ConfigError(where, "a named axis needs at least one dotted path besides 'values'")
    return Axis(name, labels, tuple(sets))


def _separate_paths(axes: Sequence[Axis]) -> None:
    """No setting of the grid overwrites an earlier one: the same path again (``workers.01`` is
    ``workers.1``), or a table holding an earlier setting's path. Every cell would have run the
    later value under the earlier one's label. A part of a table set earlier is a refinement,
    applied after it: allowed."""
    seen: list[tuple[str, tuple[str, ...]]] = []  # (the field naming a setting, its path's keys)
    for axis in axes:
        for path, _ in axis.sets:
            field = f"grid.{axis.name}" if path == axis.name else f"grid.{axis.name}.{path}"
            keys = tuple(str(int(k)) if k.isdigit() else k for k in path.split("."))  # as set_path reads them
            for other_field, other in seen:
                if other[: len(keys)] == keys:
                    what = "also set by" if other == keys else f"holds {'.'.join(other)}, set by"
                    raise ConfigError(field, f"{what} {other_field}: it would overwrite that in every cell, labelled "
                                             "with values that never ran; set each path on one axis")  # fmt: skip
            seen.append((field, keys))


def _read_source(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Path | None]:
    """A sweep's raw tables and the folder its relative paths are read from."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), None
    if not str(source).strip():  # Path("") is the working folder
        raise ConfigError("sweep", "empty: give a sweep file")
    raw = read_table(source)
    _refuse_scenario_file(raw, source)
    return raw, Path(source).resolve().parent


def load_sweep(source: str | Path | Mapping[str, Any], new: bool = True) -> SweepSpec:
    """A sweep file (or table) -> :class:`SweepSpec`, every grid point checked to build; a
    ``new`` one (not a results folder's) within :data:`MAX_POINTS` and :data:`MAX_RUNS`."""
    raw, base_dir = _read_source(source)
    top = Table(raw, "", ["name", "base", "base_dir", "policies", "grid", "replications", "seed", "plots", "engine"])
    if top.has("base_dir"):  # where the base's relative files are (written into a run's sweep.toml)
        base_dir = Path(top.get(Param("base_dir", "path")))
    base_ref = top.raw("base")
    if isinstance(base_ref, str) and base_dir is not None and (base_dir / base_ref).is_file():
        base_ref = str(base_dir / base_ref)
    if not isinstance(base_ref, (str, Mapping)):
        raise ConfigError("base", f"must be a scenario name, a path or a table, got {typename(base_ref)}")
    try:
        base, scenario_dir = resolve_source(base_ref)
        if isinstance(base_ref, Mapping):
            scenario_dir = base_dir
        scenario = build_scenario(base, scenario_dir)
    except ConfigError as exc:
        raise ConfigError(join("base", exc.field), exc.problem) from None
    policies = top.raw("policies", [scenario.policy.name])
    if not isinstance(policies, list) or not policies or not all(isinstance(p, str) for p in policies):
        raise ConfigError("policies", "must be a non-empty list of policy names")
    for i, name in enumerate(policies):
        policy_class(name, f"policies.{i}")
    _distinct(policies, "policies")
    grid = top.raw("grid", {})
    if not isinstance(grid, Mapping):
        raise ConfigError("grid", f"must be a table, got {typename(grid)}")
    axes = tuple(_make_axis(name, value) for name, value in grid.items())
    if new:  # a folder begun before this check is still resumed and reported
        _separate_paths(axes)
    spec = SweepSpec(
        name=top.get(Param("name", "string", default="sweep", blank=False)),
        base=base,
        policies=tuple(policies),
        axes=axes,
        replications=top.get(Param("replications", "integer", default=1, low=1, high=MAX_REPLICATIONS)),
        seed=top.get(Param("seed", "integer", default=scenario.seed, low=0, high=MAX_SEED)),
        plots=_plots(top.data.get("plots", {}), axes),
        base_dir=None if scenario_dir is None else str(scenario_dir),
        engine=top.get(Param("engine", "string", default=AUTO)),
    )
    engine_named(spec.engine)
    if new:  # a folder begun before the limits is still resumed and reported
        _check_size(spec)
    return dataclasses.replace(spec, unfitted=_check_grid(spec))


def _plots(raw: Any, axes: Sequence[Axis]) -> PlotSpec:
    """The ``[plots]`` table: its ``x`` and ``lines`` grid axes, and the ``cell`` whose traces are drawn."""
    plots = Table(raw, "plots", ["x", "lines", "cell"])
    names = [a.name for a in axes]
    for key in ("x", "lines"):
        if plots.has(key) and plots.data[key] not in names:
            raise ConfigError(f"plots.{key}", f"{plots.data[key]!r} is not a grid axis ({', '.join(names) or 'none'})")
    cell = plots.data.get("cell", {})
    if not isinstance(cell, Mapping) or any(k not in names for k in cell):
        raise ConfigError("plots.cell", f"must map grid axes ({', '.join(names)}) to values")
    cell = {k: _label(v) for k, v in cell.items()}  # as the axes' labels are
    for axis in axes:
        if axis.name in cell and cell[axis.name] not in axis.labels:
            raise ConfigError(f"plots.cell.{axis.name}", f"{cell[axis.name]!r} is not one of {list(axis.labels)}")
    return PlotSpec(plots.data.get("x"), plots.data.get("lines"), tuple(cell.items()))


def _check_size(spec: SweepSpec) -> None:
    """The sweep's size from its counts, before any grid point is built: at most
    :data:`MAX_POINTS` grid points and :data:`MAX_RUNS` runs."""
    points = math.prod(len(a.labels) for a in spec.axes)
    runs = points * len(spec.policies) * spec.replications
    shape = " x ".join(str(len(a.labels)) for a in spec.axes) or "1"
    if points > MAX_POINTS:
        raise ConfigError("grid", f"{shape} = {points:,} grid points, more than {MAX_POINTS:,}: split the sweep")
    if runs > MAX_RUNS:
        raise ConfigError("replications", f"{points:,} grid points x {len(spec.policies)} policies x "
                                          f"{spec.replications:,} replications = {runs:,} runs, more than "
                                          f"{MAX_RUNS:,}: split the sweep or give fewer replications")  # fmt: skip


SCENARIO_ONLY_KEYS = ("workload", "workers", "network", "policy")  # a scenario file's tables, never a sweep's


def _refuse_scenario_file(raw: Mapping[str, Any], source: str | Path) -> None:
    """A scenario file given where a sweep file belongs gets one line saying so (rather than the
    first of its keys a sweep does not allow)."""
    if "grid" not in raw and "base" not in raw and any(k in raw for k in SCENARIO_ONLY_KEYS):
        raise ConfigError(
            str(source),
            f"this is a scenario file, not a sweep file (use: python -m hetsim simulate {source}; "
            f'a sweep names it as its base: base = "{source}")',
        )


def grid_points(axes: Sequence[Axis]) -> list[tuple[int, ...]]:
    """Every combination of label indices, the last axis varying fastest."""
    return [tuple(int(i) for i in idx) for idx in np.ndindex(*(len(a.labels) for a in axes))]


def point_scenario(spec: SweepSpec, point: Sequence[int]) -> Scenario:
    """The base scenario with every axis set to its ``point`` label."""
    raw = copy.deepcopy(spec.base)
    for axis, k in zip(spec.axes, point):
        for path, value in axis.overrides(k):
            set_path(raw, path, copy.deepcopy(value))
    return build_scenario(raw, None if spec.base_dir is None else Path(spec.base_dir))


def _check_grid(spec: SweepSpec) -> tuple[str, ...]:
    """Every grid point builds, and every policy fits it (its parameters, the cluster's size), so
    a bad cell is reported before anything is written or started. Returns the cells' unfitted
    workers' lines (:meth:`Scenario.unfitted`), each once: a grid can bring in a calibrated file's."""
    unfitted: dict[str, None] = {}
    for point in grid_points(spec.axes):
        try:
            scenario = point_scenario(spec, point)
            for name in spec.policies:
                check_kept_size(scenario, scenario.named_policy(name).synchronous, 0)  # cells keep summaries
        except ConfigError as exc:
            where = ", ".join(f"{a.name}={a.labels[k]!r}" for a, k in zip(spec.axes, point))
            raise ConfigError(f"grid.{exc.field}" if exc.field else "grid", f"{exc.problem} (at {where})") from None
        unfitted.update(dict.fromkeys(scenario.unfitted()))
    return tuple(unfitted)


def default_sweep_text() -> str:
    """The embedded default sweep file (what ``python -m hetsim sweep`` runs with no argument)."""
    return resources.files("hetsim.data.sweeps").joinpath("default.toml").read_text(encoding="utf-8")
