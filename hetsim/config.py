"""Scenario files -> validated, frozen :class:`Scenario` objects.

This module is the one validating factory: it reads TOML or JSON (or a built-in scenario by
name), applies ``--set dotted.path=value`` overrides to the raw tables, checks every field, and
builds the plug-ins (distributions, network model, workers). Every problem raises
:class:`~hetsim.errors.ConfigError` naming the field, e.g. ``workers.1.per_sample_s``.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import numpy as np

from hetsim.distributions import DISTRIBUTIONS, Distribution
from hetsim.errors import ConfigError
from hetsim.network import NETWORKS, NetworkModel
from hetsim.policies import WorkerHint, policy_class
from hetsim.workers import Failure, Slowdown, WorkerSpec

BUILTIN_PACKAGE = "hetsim.scenarios"


# ----------------------------------------------------------------------------- frozen objects


@dataclass(frozen=True)
class Workload:
    global_batch: int
    dataset_size: int
    epochs: int
    gradient_mb: float = 0.0

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size // self.global_batch

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs


@dataclass(frozen=True)
class WorkerGroup:
    spec: WorkerSpec
    count: int = 1


@dataclass(frozen=True)
class PolicySpec:
    name: str = "equal"
    params: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dict(self.params)}


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int
    workload: Workload
    network: NetworkModel
    groups: tuple[WorkerGroup, ...]
    policy: PolicySpec = field(default_factory=PolicySpec)
    description: str = ""

    @cached_property
    def workers(self) -> tuple[WorkerSpec, ...]:
        """One spec per worker, groups expanded in file order (computed once per scenario)."""
        out = []
        for g in self.groups:
            if g.count == 1:
                out.append(g.spec)
            else:
                out.extend(replace(g.spec, name=f"{g.spec.name}#{k}") for k in range(g.count))
        return tuple(out)

    @property
    def n_workers(self) -> int:
        return sum(g.count for g in self.groups)

    def allreduce_s(self) -> float:
        return self.network.allreduce_s(self.n_workers, self.workload.gradient_mb)

    def hints(self) -> tuple[WorkerHint, ...]:
        """What the cost-aware policies are told: caps and true expected affine costs."""
        return self._hints

    @cached_property
    def _hints(self) -> tuple[WorkerHint, ...]:
        return tuple(WorkerHint(w.cap, w.expected_fixed_s, w.expected_per_sample_s) for w in self.workers)

    def to_dict(self) -> dict[str, Any]:
        """The scenario-file form; ``load_scenario(s.to_dict())`` rebuilds an equal scenario."""
        out: dict[str, Any] = {"name": self.name, "seed": self.seed}
        if self.description:
            out["description"] = self.description
        out["workload"] = {
            "global_batch": self.workload.global_batch,
            "dataset_size": self.workload.dataset_size,
            "epochs": self.workload.epochs,
            "gradient_mb": self.workload.gradient_mb,
        }
        out["network"] = self.network.to_dict()
        out["workers"] = [{**g.spec.to_dict(), "count": g.count} for g in self.groups]
        out["policy"] = self.policy.to_dict()
        return out


# ----------------------------------------------------------------------------- reading files


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(BUILTIN_PACKAGE).iterdir() if p.name.endswith(".toml"))


def builtin_text(name: str) -> str:
    return resources.files(BUILTIN_PACKAGE).joinpath(f"{name}.toml").read_text(encoding="utf-8")


def read_table(path: str | Path) -> dict[str, Any]:
    """A TOML or JSON file as a dict (by extension; anything but .json is read as TOML)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(path), "no such file")
    try:
        text = p.read_text(encoding="utf-8")
        data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"not valid {'JSON' if p.suffix.lower() == '.json' else 'TOML'}: {exc}") from None
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
        raise ConfigError("scenario", f"{text!r} is neither a file nor a built-in scenario ({', '.join(builtin_names())})")
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


class _Table:
    """A raw table being validated: typed getters that name the field in every error."""

    def __init__(self, data: Any, path: str, allowed: Sequence[str]) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(path, f"must be a table, got {_typename(data)}")
        unknown = [k for k in data if k not in allowed]
        if unknown:
            raise ConfigError(_join(path, unknown[0]), f"unknown key (allowed: {', '.join(allowed)})")
        self.data, self.path = data, path

    def has(self, key: str) -> bool:
        return key in self.data

    def number(self, key: str, default: Any = ..., *, minimum: float | None = 0.0, strict: bool = False) -> float:
        where = _join(self.path, key)
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(where, f"must be a number, got {_typename(value)}")
        if not math.isfinite(value):
            raise ConfigError(where, f"must be finite, got {value}")
        if minimum is not None and (value <= minimum if strict else value < minimum):
            raise ConfigError(where, f"must be {'>' if strict else '>='} {minimum:g}, got {value:g}")
        return float(value)

    def integer(self, key: str, default: Any = ..., *, minimum: int = 0) -> int:
        where = _join(self.path, key)
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(where, f"must be an integer, got {_typename(value)}")
        if value < minimum:
            raise ConfigError(where, f"must be >= {minimum}, got {value}")
        return value

    def string(self, key: str, default: Any = ...) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise ConfigError(_join(self.path, key), f"must be a string, got {_typename(value)}")
        return value

    def _get(self, key: str, default: Any) -> Any:
        if key in self.data:
            return self.data[key]
        if default is ...:
            raise ConfigError(_join(self.path, key), "missing (required)")
        return default


def _join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def _typename(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} ({value!r})"


# ----------------------------------------------------------------------------- plug-in factories


def make_distribution(data: Any, path: str, base_dir: Path | None = None) -> Distribution:
    if isinstance(data, Mapping) and "dist" in data and data["dist"] not in DISTRIBUTIONS:
        raise ConfigError(_join(path, "dist"), f"unknown distribution {data['dist']!r} (known: {', '.join(DISTRIBUTIONS)})")
    kind = data.get("dist") if isinstance(data, Mapping) else None
    params = {
        "constant": ["value"],
        "exponential": ["mean"],
        "shifted_exponential": ["shift", "mean"],
        "gamma": ["shape", "scale"],
        "lognormal": ["sigma"],
        "uniform": ["low", "high"],
        "empirical": ["samples", "file"],
    }.get(kind, [])
    t = _Table(data, path, ["dist", *params])
    t.string("dist")
    cls = DISTRIBUTIONS[kind]
    if kind == "constant":
        return cls(t.number("value"))
    if kind == "exponential":
        return cls(t.number("mean", strict=True))
    if kind == "shifted_exponential":
        return cls(t.number("shift"), t.number("mean", strict=True))
    if kind == "gamma":
        return cls(t.number("shape", strict=True), t.number("scale", strict=True))
    if kind == "lognormal":
        return cls(t.number("sigma"))
    if kind == "uniform":
        low = t.number("low")
        high = t.number("high", minimum=low, strict=True)
        return cls(low, high)
    return _make_empirical(t, base_dir)


def _make_empirical(t: _Table, base_dir: Path | None) -> Distribution:
    cls = DISTRIBUTIONS["empirical"]
    if t.has("samples") == t.has("file"):
        raise ConfigError(t.path, "empirical needs exactly one of 'samples' or 'file'")
    if t.has("file"):
        name = t.string("file")
        path = Path(name) if base_dir is None or Path(name).is_absolute() else base_dir / name
        if not path.is_file():
            raise ConfigError(_join(t.path, "file"), f"no such file: {path}")
        try:
            values = np.loadtxt(path, dtype=float, delimiter=",", ndmin=1, comments="#")
        except ValueError as exc:
            raise ConfigError(_join(t.path, "file"), f"not a column of numbers: {exc}") from None
        samples, where = values.ravel().tolist(), _join(t.path, "file")
    else:
        samples, where = t.data["samples"], _join(t.path, "samples")
        if not isinstance(samples, list):
            raise ConfigError(where, f"must be a list of numbers, got {_typename(samples)}")
    if not samples:
        raise ConfigError(where, "needs at least one value")
    for i, v in enumerate(samples):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(where, f"value {i} must be a non-negative number, got {v!r}")
    return cls(tuple(float(v) for v in samples), t.data.get("file"))


def make_network(data: Any) -> NetworkModel:
    if not isinstance(data, Mapping):
        raise ConfigError("network", f"must be a table, got {_typename(data)}")
    kind = data.get("kind", "ring")
    if kind not in NETWORKS:
        raise ConfigError("network.kind", f"unknown network {kind!r} (known: {', '.join(NETWORKS)})")
    if kind == "constant":
        t = _Table(data, "network", ["kind", "time_s"])
        return NETWORKS[kind](t.number("time_s"))
    t = _Table(data, "network", ["kind", "latency_s", "bandwidth_gbps"])
    return NETWORKS[kind](t.number("latency_s", 2e-5), t.number("bandwidth_gbps", 100.0, strict=True))


def make_worker_group(data: Any, index: int, base_dir: Path | None) -> WorkerGroup:
    path = f"workers.{index}"
    t = _Table(data, path, ["name", "count", "overhead_s", "per_sample_s", "noise", "delay", "max_batch", "slowdown", "failure"])
    noise = make_distribution(t.data.get("noise", {"dist": "constant", "value": 1.0}), f"{path}.noise", base_dir)
    if not math.isclose(noise.mean(), 1.0, rel_tol=1e-6):
        raise ConfigError(f"{path}.noise", f"a noise factor must have mean 1, this one has mean {noise.mean():g}")
    spec = WorkerSpec(
        name=t.string("name", f"w{index}"),
        overhead_s=t.number("overhead_s", 0.0),
        per_sample_s=t.number("per_sample_s", strict=True),
        noise=noise,
        delay=make_distribution(t.data.get("delay", {"dist": "constant", "value": 0.0}), f"{path}.delay", base_dir),
        max_batch=t.integer("max_batch", minimum=1) if t.has("max_batch") else None,
        slowdown=make_slowdown(t.data["slowdown"], f"{path}.slowdown") if t.has("slowdown") else None,
        failure=make_failure(t.data["failure"], f"{path}.failure") if t.has("failure") else None,
    )
    return WorkerGroup(spec, t.integer("count", 1, minimum=1))


def make_slowdown(data: Any, path: str) -> Slowdown:
    t = _Table(data, path, ["every_s", "duration_s", "factor", "group"])
    return Slowdown(
        every_s=t.number("every_s", strict=True),
        duration_s=t.number("duration_s", strict=True),
        factor=t.number("factor", minimum=1.0),
        group=t.string("group") if t.has("group") else None,
    )


def make_failure(data: Any, path: str) -> Failure:
    t = _Table(data, path, ["mtbf_s", "repair_s"])
    return Failure(t.number("mtbf_s", strict=True), t.number("repair_s", strict=True))


def _check_slowdown_groups(groups: Sequence[WorkerGroup]) -> None:
    """Workers sharing a slowdown group share its episode timing, so they must agree on it."""
    seen: dict[str, tuple[int, Slowdown]] = {}
    for i, g in enumerate(groups):
        sd = g.spec.slowdown
        if sd is None or sd.group is None:
            continue
        first = seen.setdefault(sd.group, (i, sd))
        if (first[1].every_s, first[1].duration_s) != (sd.every_s, sd.duration_s):
            raise ConfigError(f"workers.{i}.slowdown", f"group {sd.group!r} has other every_s/duration_s in workers.{first[0]}")


def make_policy_spec(data: Any) -> PolicySpec:
    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, Mapping):
        raise ConfigError("policy", f"must be a table, got {_typename(data)}")
    name = data.get("name", "equal")
    if not isinstance(name, str):
        raise ConfigError("policy.name", f"must be a string, got {_typename(name)}")
    policy_class(name)
    return PolicySpec(name, tuple(sorted((k, v) for k, v in data.items() if k != "name")))


def build_scenario(raw: Mapping[str, Any], base_dir: Path | None = None) -> Scenario:
    top = _Table(raw, "", ["name", "description", "seed", "workload", "network", "workers", "policy"])
    w = _Table(top._get("workload", ...), "workload", ["global_batch", "dataset_size", "epochs", "gradient_mb"])
    workload = Workload(
        global_batch=w.integer("global_batch", minimum=1),
        dataset_size=w.integer("dataset_size", minimum=1),
        epochs=w.integer("epochs", minimum=1),
        gradient_mb=w.number("gradient_mb", 0.0),
    )
    if workload.dataset_size < workload.global_batch:
        raise ConfigError(
            "workload.dataset_size", f"{workload.dataset_size} is smaller than global_batch {workload.global_batch}: no step per epoch"
        )
    entries = top._get("workers", ...)
    if not isinstance(entries, list) or not entries:
        raise ConfigError("workers", "must be a non-empty list of [[workers]] tables")
    groups = tuple(make_worker_group(entry, i, base_dir) for i, entry in enumerate(entries))
    _check_slowdown_groups(groups)
    scenario = Scenario(
        name=top.string("name", "scenario"),
        seed=top.integer("seed", 0),
        workload=workload,
        network=make_network(top.data.get("network", {})),
        groups=groups,
        policy=make_policy_spec(top.data.get("policy", {})),
        description=top.string("description", ""),
    )
    n = scenario.n_workers
    if workload.global_batch < n:
        raise ConfigError("workload.global_batch", f"{workload.global_batch} is smaller than the number of workers ({n})")
    capacity = sum(w.cap for w in scenario.workers)
    if capacity < workload.global_batch:
        raise ConfigError(
            "workers.max_batch", f"the caps hold at most {capacity:g} samples per step, less than global_batch {workload.global_batch}"
        )
    return scenario
