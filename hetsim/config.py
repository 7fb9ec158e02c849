"""Scenario files -> validated, frozen :class:`~hetsim.scenario.Scenario` objects.

This module is the one validating factory: it reads TOML or JSON (or a built-in scenario by
name), applies ``--set dotted.path=value`` overrides to the raw tables, checks every field, and
builds the plug-ins (distributions, network model, workers). Every problem raises
:class:`~hetsim.errors.ConfigError` naming the field, e.g. ``workers.1.per_sample_s``.
"""

from __future__ import annotations

import copy
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from hetsim.costs import CostModel
from hetsim.distributions import Distribution
from hetsim.errors import ConfigError
from hetsim.network import DEFAULT_KIND
from hetsim.params import REQUIRED, FileName, Param, PlugIn, join, typename
from hetsim.policies import policy_class
from hetsim.registry import COSTS, DISTRIBUTIONS, NETWORKS, Registry
from hetsim.scenario import PolicySpec, Scenario, WorkerGroup, Workload
from hetsim.workers import Failure, SharedNoise, Slowdown, WorkerSpec, check_persistence

T = TypeVar("T")
V = TypeVar("V", bound=PlugIn)

BUILTIN_PACKAGE = "hetsim.scenarios"


# ----------------------------------------------------------------------------- reading files


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(BUILTIN_PACKAGE).iterdir() if p.name.endswith(".toml"))


def builtin_text(name: str) -> str:
    return resources.files(BUILTIN_PACKAGE).joinpath(f"{name}.toml").read_text(encoding="utf-8")


def read_table(path: str | Path) -> dict[str, Any]:
    """A TOML or JSON file as a dict (by extension; anything but .json is read as TOML). The
    one reader of such files: scenarios, sweeps and validation run files."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(path), "no such file")
    kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
    try:
        text = p.read_text(encoding="utf-8")
        if text.startswith("\ufeff"):
            raise ConfigError(str(path), "starts with a byte-order mark (BOM): save it as UTF-8 without one")
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"not valid {kind}: {exc}") from None
    except RecursionError:
        raise ConfigError(str(path), f"not valid {kind}: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the file must hold a table (object) at the top")
    return data


def resolve_source(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Path | None]:
    """Raw scenario tables and the folder relative paths are read from."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), None
    text = str(source)
    if text in builtin_names() and not Path(text).exists():
        return tomllib.loads(builtin_text(text)), None
    if not Path(text).exists():
        raise ConfigError(
            "scenario", f"{text!r} is neither a file nor a built-in scenario ({', '.join(builtin_names())})"
        )
    return read_table(text), Path(text).resolve().parent


def load_scenario(source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> Scenario:
    raw, base_dir = resolve_source(source)
    for item in overrides:
        apply_override(raw, item)
    return build_scenario(raw, base_dir)


# ----------------------------------------------------------------------------- overrides


def parse_value(text: str) -> Any:
    """A TOML value (number, bool, string, array, inline table), or the text itself as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply ``dotted.path=value`` in place; list entries are addressed by index."""
    path, sep, value = item.partition("=")
    path = path.strip()
    if not sep or not path:
        raise ConfigError("--set", f"expected PATH=VALUE, got {item!r}")
    set_path(raw, path, parse_value(value.strip()))


def set_path(raw: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node: Any = raw
    for depth, key in enumerate(keys):
        where = ".".join(keys[: depth + 1])
        last = depth == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise ConfigError(where, f"no entry {key!r} in a list of {len(node)}")
            if last:
                node[int(key)] = value
            else:
                node = node[int(key)]
        elif isinstance(node, dict):
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        else:
            raise ConfigError(where, f"{'.'.join(keys[:depth])} is a value, not a table or list")


# ----------------------------------------------------------------------------- field checks


class Table:
    """A raw table being validated: values checked by :class:`~hetsim.params.Param`, every
    error naming the field's full path."""

    def __init__(self, data: Any, path: str, allowed: Sequence[str]) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(path, f"must be a table, got {typename(data)}")
        unknown = [k for k in data if k not in allowed]
        if unknown:
            raise ConfigError(join(path, unknown[0]), f"unknown key (allowed: {', '.join(allowed)})")
        self.data, self.path = data, path

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = REQUIRED) -> Any:
        """The value as written (or ``default``); a missing required key is an error."""
        if key in self.data:
            return self.data[key]
        if default is REQUIRED:
            raise ConfigError(join(self.path, key), "missing (required)")
        return default

    def get(self, param: Param, others: Mapping[str, Any] | None = None) -> Any:
        """The value of ``param`` (its default when absent), checked."""
        value = self.raw(param.name, param.default)
        try:
            return param.check(value, others)
        except ConfigError as exc:
            raise ConfigError(join(self.path, exc.field), exc.problem) from None

    def read(self, params: Sequence[Param]) -> dict[str, Any]:
        """Every one of ``params``, checked in order (a bound may name an earlier one)."""
        out: dict[str, Any] = {}
        for p in params:
            out[p.name] = self.get(p, out)
        return out


# ----------------------------------------------------------------------------- plug-in factories


def make_plugin(
    registry: Registry[T], data: Any, path: str, key: str, base_dir: Path | None = None, default: str | None = None
) -> T:
    """The plug-in a table describes: ``data[key]`` names the class in ``registry`` (``default``
    when absent), the other keys are its declared parameters. The class checks them; this only
    adds ``path`` to its errors and reads ``path`` parameters from ``base_dir``."""
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a table, got {typename(data)}")
    if key not in data and default is None:
        raise ConfigError(join(path, key), "missing (required)")
    cls = registry.lookup(data.get(key, default), join(path, key))
    params: tuple[Param, ...] = getattr(cls, "params", ())
    values = {k: v for k, v in data.items() if k != key}
    for p in params:
        if p.kind == "path" and isinstance(values.get(p.name), str):
            values[p.name] = FileName(values[p.name], base_dir)
    try:
        return cls(**values)
    except ConfigError as exc:
        raise ConfigError(join(path, exc.field), exc.problem) from None


def make_distribution(data: Any, path: str, base_dir: Path | None = None) -> Distribution:
    return make_plugin(DISTRIBUTIONS, data, path, "dist", base_dir)


MAX_COUNT = 2**40  # samples, epochs: far beyond any run, and sums of them stay within int64
MAX_TRACE_ROWS = 2**28  # worker-steps a run may record (about 16 GB of trace); more does not fit here
MAX_STEP_S = 1e9  # a step over 30 years is a unit mistake

WORKER_PARAMS = (
    Param("name", "string", default=None, doc="the worker's name (default w<index>)"),
    Param("count", "integer", default=1, low=1, doc="identical workers this entry stands for"),
    Param("max_batch", "integer", default=None, low=1, doc="the most samples the worker can take"),
)
AFFINE_KEYS = ("overhead_s", "per_sample_s")  # a worker's shorthand for cost = { model = "affine", ... }
WORKER_TABLES = ("cost", "noise", "delay", "shared_noise", "slowdown", "failure")
FACTOR_KEYS = ("persistence",)  # a noise table's keys beside its distribution's parameters
SHARED_KEYS = ("group", "persistence")  # a shared_noise table's keys beside its distribution's
WORKLOAD_PARAMS = (
    Param("global_batch", "integer", low=1, high=MAX_COUNT, doc="samples per step, over all workers"),
    Param("dataset_size", "integer", low=1, high=MAX_COUNT, doc="samples per epoch"),
    Param("epochs", "integer", low=1, high=MAX_COUNT, doc="epochs to run"),
    Param("gradient_mb", default=0.0, low=0.0, doc="size of the gradient exchanged every step, MB"),
    Param("backward_fraction", default=None, low=0.0, low_open=True, high=1.0,
          doc="the backward pass's share of a step's compute, for bucketed all-reduce (default 2/3)"),
)  # fmt: skip


def make_worker_group(data: Any, index: int, base_dir: Path | None) -> WorkerGroup:
    path = f"workers.{index}"
    t = Table(data, path, [*(p.name for p in WORKER_PARAMS), *AFFINE_KEYS, *WORKER_TABLES])
    values = t.read(WORKER_PARAMS)
    cost = _make_cost(t, base_dir)
    noise, persistence = _make_noise(t, base_dir)
    spec = WorkerSpec(
        name=values["name"] if values["name"] is not None else f"w{index}",
        cost=cost,
        noise=noise,
        persistence=persistence,
        shared_noise=_make_shared_noise(t, base_dir) if t.has("shared_noise") else None,
        delay=make_distribution(t.raw("delay", {"dist": "constant", "value": 0.0}), f"{path}.delay", base_dir),
        max_batch=values["max_batch"] if values["max_batch"] is not None else cost.max_batch(),
        slowdown=_make_value(Slowdown, t.raw("slowdown"), f"{path}.slowdown") if t.has("slowdown") else None,
        failure=_make_value(Failure, t.raw("failure"), f"{path}.failure") if t.has("failure") else None,
    )
    return WorkerGroup(spec, values["count"])


def _split_table(data: Any, path: str, keys: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A table's distribution part and its ``keys``."""
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a table, got {typename(data)}")
    return {k: v for k, v in data.items() if k not in keys}, {k: v for k, v in data.items() if k in keys}


def _make_noise(t: Table, base_dir: Path | None) -> tuple[Distribution, float]:
    """The worker's ``noise``: a mean-1 distribution and its ``persistence`` (default 0)."""
    path = join(t.path, "noise")
    data, extra = _split_table(t.raw("noise", {"dist": "constant", "value": 1.0}), path, FACTOR_KEYS)
    noise = make_distribution(data, path, base_dir)
    if not math.isclose(noise.mean(), 1.0, rel_tol=1e-6):
        raise ConfigError(path, f"a noise factor must have mean 1, this one has mean {noise.mean():g}")
    try:
        return noise, check_persistence(noise, extra.get("persistence", 0.0))
    except ConfigError as exc:
        raise ConfigError(join(path, exc.field), exc.problem) from None


def _make_shared_noise(t: Table, base_dir: Path | None) -> SharedNoise:
    """The worker's ``shared_noise``: ``group``, ``persistence`` and a mean-1 distribution."""
    path = join(t.path, "shared_noise")
    data, extra = _split_table(t.raw("shared_noise"), path, SHARED_KEYS)
    group = Table(extra, path, SHARED_KEYS).get(Param("group", "string"))
    dist = make_distribution(data, path, base_dir)
    try:
        return SharedNoise(group, dist, extra.get("persistence", 0.0))
    except ConfigError as exc:
        raise ConfigError(join(path, exc.field), exc.problem) from None


def _check_shared_noise_groups(groups: Sequence[WorkerGroup]) -> None:
    """Workers naming one shared-noise group draw one factor per step, so they must declare it alike."""
    seen: dict[str, tuple[int, SharedNoise]] = {}
    for i, g in enumerate(groups):
        sn = g.spec.shared_noise
        if sn is None:
            continue
        j, first = seen.setdefault(sn.group, (i, sn))
        if first != sn:  # one line: what workers.j declares, what this one does
            was, now = ({k: v for k, v in x.to_dict().items() if k != "group"} for x in (first, sn))
            raise ConfigError(f"workers.{i}.shared_noise", f"group {sn.group!r} is {was} in workers.{j}, here {now}")


def _make_cost(t: Table, base_dir: Path | None) -> CostModel:
    """The worker's ``cost`` table, or its ``overhead_s``/``per_sample_s`` (an affine cost)."""
    shorthand = {k: t.data[k] for k in AFFINE_KEYS if t.has(k)}
    if t.has("cost"):
        if shorthand:
            key = next(iter(shorthand))
            raise ConfigError(join(t.path, key), "give either a cost table or overhead_s/per_sample_s")
        return make_plugin(COSTS, t.raw("cost"), join(t.path, "cost"), "model", base_dir)
    return make_plugin(COSTS, {"model": "affine", **shorthand}, t.path, "model")


def _make_value(cls: type[V], data: Any, path: str) -> V:
    """A parameter-checked value object (a slowdown, a failure) from its table."""
    t = Table(data, path, [p.name for p in cls.params])
    try:
        return cls(**t.data)
    except ConfigError as exc:
        raise ConfigError(join(path, exc.field), exc.problem) from None


def _check_slowdown_groups(groups: Sequence[WorkerGroup]) -> None:
    """Workers sharing a slowdown group share its episode timing, so they must agree on it."""
    seen: dict[str, tuple[int, Slowdown]] = {}
    for i, g in enumerate(groups):
        sd = g.spec.slowdown
        if sd is None or sd.group is None:
            continue
        first = seen.setdefault(sd.group, (i, sd))
        if (first[1].every_s, first[1].duration_s) != (sd.every_s, sd.duration_s):
            raise ConfigError(
                f"workers.{i}.slowdown", f"group {sd.group!r} has other every_s/duration_s in workers.{first[0]}"
            )


def make_policy_spec(data: Any) -> PolicySpec:
    """The scenario's ``[policy]``: its name is checked here, its parameters by the policy
    class when a run builds it (a sweep may set parameters of a policy other than the base's)."""
    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, Mapping):
        raise ConfigError("policy", f"must be a table, got {typename(data)}")
    name = data.get("name", PolicySpec.name)
    if not isinstance(name, str):
        raise ConfigError("policy.name", f"must be a string, got {typename(name)}")
    policy_class(name)
    return PolicySpec(name, tuple(sorted((k, v) for k, v in data.items() if k != "name")))


TOP_PARAMS = (
    Param("name", "string", default="scenario"),
    Param("description", "string", default=""),
    Param("seed", "integer", default=0, low=0),
)


def build_scenario(raw: Mapping[str, Any], base_dir: Path | None = None) -> Scenario:
    top = Table(raw, "", [*(p.name for p in TOP_PARAMS), "workload", "network", "workers", "policy"])
    w = Table(top.raw("workload"), "workload", [p.name for p in WORKLOAD_PARAMS])
    workload = Workload(**w.read(WORKLOAD_PARAMS))
    if workload.dataset_size < workload.global_batch:
        raise ConfigError(
            "workload.dataset_size",
            f"{workload.dataset_size} is smaller than global_batch {workload.global_batch}: no step per epoch",
        )
    entries = top.raw("workers")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("workers", "must be a non-empty list of [[workers]] tables")
    groups = tuple(make_worker_group(entry, i, base_dir) for i, entry in enumerate(entries))
    _check_slowdown_groups(groups)
    _check_shared_noise_groups(groups)
    scenario = Scenario(
        **top.read(TOP_PARAMS),
        workload=workload,
        network=make_plugin(NETWORKS, top.raw("network", {}), "network", "kind", default=DEFAULT_KIND),
        groups=groups,
        policy=make_policy_spec(top.raw("policy", {})),
    )
    n = scenario.n_workers
    if workload.global_batch < n:
        raise ConfigError(
            "workload.global_batch", f"{workload.global_batch} is smaller than the number of workers ({n})"
        )
    capacity = sum(w.cap for w in scenario.workers)
    if capacity < workload.global_batch:
        raise ConfigError(
            "workers.max_batch",
            f"the caps hold at most {capacity:g} samples per step, less than global_batch {workload.global_batch}",
        )
    _check_size(scenario)
    return scenario


def _check_size(scenario: Scenario) -> None:
    """Refuse a run that cannot fit: a trace too large for memory, or steps of absurd length."""
    rows = scenario.workload.total_steps * scenario.n_workers
    if rows > MAX_TRACE_ROWS:
        raise ConfigError(
            "workload",
            f"{scenario.workload.total_steps} steps x {scenario.n_workers} workers = {rows:.3g} trace rows, more than "
            f"the {MAX_TRACE_ROWS:.3g} a run can hold: fewer epochs or a larger global batch",
        )
    for i, w in enumerate(scenario.workers):
        step_s = w.expected_compute_s(scenario.workload.global_batch)
        if not step_s < MAX_STEP_S:
            raise ConfigError(
                f"workers.{i}",
                f"a step of {scenario.workload.global_batch} samples would take {step_s:.3g} s: check the units",
            )
