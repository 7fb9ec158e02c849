"""The ``[[workers]]`` tables -> :class:`~hetsim.scenario.scenario.WorkerGroup` objects: a worker's keys,
its cost, noise, shared noise, delay, slowdown and failure tables, and the checks across workers
(members of a slowdown or shared-noise group must agree on it). Every problem raises
:class:`~hetsim.core.errors.ConfigError` naming the field, e.g. ``workers.1.noise.sigma``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param, PlugIn, join, typename
from hetsim.core.registry import COSTS
from hetsim.model.costs import CostModel
from hetsim.model.distributions import Distribution
from hetsim.model.workers import Failure, SharedNoise, Slowdown, WorkerSpec, check_persistence
from hetsim.scenario.raw_tables import Table, make_distribution, make_plugin
from hetsim.scenario.scenario import WorkerGroup

V = TypeVar("V", bound=PlugIn)

WORKER_PARAMS = (
    Param("name", "string", default=None, blank=False, doc="the worker's name (default w<index>)"),
    Param("count", "integer", default=1, low=1, doc="identical workers this entry stands for"),
    Param("max_batch", "integer", default=None, low=1, doc="the most samples the worker can take"),
    Param(
        "node", "string", default=None, blank=False, doc="the machine it runs on (needed by a network that uses_nodes)"
    ),
    Param(
        "unfitted",
        "string",
        default=None,
        blank=False,
        doc="why the cost is a guess, not a fit (said as a warning at load)",
    ),
)
AFFINE_KEYS = ("overhead_s", "per_sample_s")  # a worker's shorthand for cost = { model = "affine", ... }
WORKER_TABLES = ("cost", "noise", "delay", "shared_noise", "slowdown", "failure")
FACTOR_KEYS = ("persistence",)  # a noise table's keys beside its distribution's parameters
SHARED_KEYS = ("group", "persistence")  # a shared_noise table's keys beside its distribution's


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
        node=values["node"],
        unfitted=values["unfitted"],
    )
    return WorkerGroup(spec, values["count"])


def _split_table(data: Any, path: str, keys: Sequence[str]) -> tuple[Any, dict[str, Any]]:
    """A table's distribution part and its ``keys`` (a distribution object: itself, and none; a
    table whose ``dist`` is one, from Python: that object, and the keys beside it)."""
    if isinstance(data, Distribution):
        return data, {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a table, got {typename(data)}")
    own = {k: v for k, v in data.items() if k not in keys}
    extra = {k: v for k, v in data.items() if k in keys}
    if isinstance(own.get("dist"), Distribution) and len(own) == 1:  # {"dist": LogNormal(0.1), "persistence": 0.5}
        return own["dist"], extra
    return own, extra


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
    group = Table(extra, path, SHARED_KEYS).get(Param("group", "string", blank=False))
    dist = make_distribution(data, path, base_dir)
    try:
        return SharedNoise(group, dist, extra.get("persistence", 0.0))
    except ConfigError as exc:
        raise ConfigError(join(path, exc.field), exc.problem) from None


def _make_cost(t: Table, base_dir: Path | None) -> CostModel:
    """The worker's ``cost`` table, or its ``overhead_s``/``per_sample_s`` (an affine cost)."""
    shorthand = {k: t.data[k] for k in AFFINE_KEYS if t.has(k)}
    if t.has("cost"):
        if shorthand:
            key = next(iter(shorthand))
            raise ConfigError(
                join(t.path, key),
                "give either a cost table or overhead_s/per_sample_s (with --set, replace the whole entry: "
                f"{t.path}={{...}})",
            )
        return make_plugin(COSTS, t.raw("cost"), join(t.path, "cost"), "model", base_dir)
    return make_plugin(COSTS, {"model": "affine", **shorthand}, t.path, "model")


def _make_value(cls: type[V], data: Any, path: str) -> V:
    """A parameter-checked value object (a slowdown, a failure) from its table."""
    t = Table(data, path, [p.name for p in cls.params])
    try:
        return cls(**t.data)
    except ConfigError as exc:
        raise ConfigError(join(path, exc.field), exc.problem) from None


def check_worker_groups(groups: Sequence[WorkerGroup]) -> None:
    """The checks across workers: each entry's name is its own (its workers are named by it); the
    members of a slowdown group share its episodes, so they
    must agree on its timing; the members of a shared-noise group draw one factor per step, so
    they must declare it alike."""
    named: dict[str, int] = {}
    for i, g in enumerate(groups):  # a plan's split and left-out list name workers: two entries alike say nothing
        if g.spec.name in named:
            raise ConfigError(f"workers.{i}.name", f"{g.spec.name!r} is workers.{named[g.spec.name]}'s name too: "
                              "give each [[workers]] entry its own (count = N makes N of one kind)")  # fmt: skip
        named[g.spec.name] = i
    conflict = _group_conflict(groups, "slowdown", lambda sd: (sd.every_s, sd.duration_s))
    if conflict is not None:
        i, j, _, sd = conflict
        raise ConfigError(f"workers.{i}.slowdown", f"group {sd.group!r} has other every_s/duration_s in workers.{j}")
    conflict = _group_conflict(groups, "shared_noise", lambda sn: sn)
    if conflict is not None:
        i, j, first, sn = conflict
        was, now = ({k: v for k, v in x.to_dict().items() if k != "group"} for x in (first, sn))
        raise ConfigError(f"workers.{i}.shared_noise", f"group {sn.group!r} is {was} in workers.{j}, here {now}")


def _group_conflict(
    groups: Sequence[WorkerGroup], table: str, declared: Callable[[Any], object]
) -> tuple[int, int, Any, Any] | None:
    """The first worker entry whose ``table`` (a slowdown, a shared noise) names a group that an
    earlier entry declared otherwise (by ``declared``): (its index, the earlier's, the earlier
    declaration, its own); None when every group is declared alike."""
    seen: dict[str, tuple[int, Any]] = {}
    for i, g in enumerate(groups):
        value = getattr(g.spec, table)
        if value is None or value.group is None:
            continue
        j, first = seen.setdefault(value.group, (i, value))
        if declared(first) != declared(value):
            return i, j, first, value
    return None
