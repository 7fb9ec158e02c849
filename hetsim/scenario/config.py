"""Scenario files -> validated, frozen :class:`~hetsim.scenario.scenario.Scenario` objects.

This module is the one validating factory: it reads TOML or JSON (or a built-in scenario by
name), applies ``--set dotted.path=value`` overrides to the raw tables, checks every field, and
builds the plug-ins (distributions, network model, workers: the ``[[workers]]`` tables in
:mod:`hetsim.scenario.worker_tables`, the field checks and plug-in factory in :mod:`hetsim.scenario.raw_tables`).
Every problem raises :class:`~hetsim.core.errors.ConfigError` naming the field, e.g.
``workers.1.per_sample_s``.
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hetsim.core.builtins import builtin_names, builtin_text
from hetsim.core.errors import ConfigError
from hetsim.core.files import not_a_file
from hetsim.core.params import MAX_COUNT, MAX_SEED, MAX_STEP_S, Param, typename
from hetsim.core.registry import NETWORKS
from hetsim.model.efficiency import EFFICIENCY_PARAMS, Efficiency, Schedule, extension_fields
from hetsim.model.network import DEFAULT_KIND
from hetsim.policies import Policy, make_policy, policy_class
from hetsim.scenario.raw_tables import Table, make_plugin
from hetsim.scenario.scenario import PolicySpec, Scenario, Workload
from hetsim.scenario.worker_tables import check_worker_groups, make_worker_group

# ----------------------------------------------------------------------------- reading files


def read_table(path: str | Path) -> dict[str, Any]:
    """A TOML or JSON file as a dict (by extension; anything but .json is read as TOML). The
    one reader of such files: scenarios, sweeps and validation run files."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(path), not_a_file(p))
    kind = "JSON" if p.suffix.lower() == ".json" else "TOML"
    try:
        text = p.read_text(encoding="utf-8")
        if text.startswith("\ufeff"):
            raise ConfigError(str(path), "starts with a byte-order mark (BOM): save it as UTF-8 without one")
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except ConfigError:
        raise
    except ValueError as exc:  # bad syntax or UTF-8, or an integer past Python's digit limit
        raise ConfigError(str(path), f"not valid {kind}: {exc}") from None
    except RecursionError:
        raise ConfigError(str(path), f"not valid {kind}: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the file must hold a table (object) at the top")
    return data


def read_efficiency(path: str | Path, field: str = "--efficiency") -> dict[str, Any]:
    """The ``[workload.efficiency]`` table of a TOML or JSON file (what ``hetsim
    calibrate-efficiency -o`` writes, or a scenario holding one), checked as a scenario's; a
    problem is one :class:`ConfigError` on ``field`` naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(field, f"{not_a_file(p)}: {p}")
    try:
        raw = read_table(p)
    except ConfigError as exc:  # it names the file already
        raise ConfigError(field, f"{p}: {exc.problem}") from None
    workload = raw.get("workload")
    table = workload.get("efficiency") if isinstance(workload, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(field, f"{p} has no [workload.efficiency] table")
    return checked_efficiency(table, field, f"{p}: ")


def checked_efficiency(table: Mapping[str, Any], field: str = "--efficiency", where: str = "") -> dict[str, Any]:
    """A raw ``[workload.efficiency]`` table checked as a scenario's (:func:`make_efficiency`); a
    problem is one :class:`ConfigError` on ``field``, after ``where`` (the file it came from)."""
    try:
        make_efficiency(table)
    except ConfigError as exc:
        raise ConfigError(field, f"{where}{exc}") from None
    return dict(table)


def resolve_source(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Path | None]:
    """Raw scenario tables and the folder relative paths are read from."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), None
    text = str(source)
    if not text.strip():  # Path("") is the working folder
        raise ConfigError("scenario", f"empty: give a file or a built-in scenario ({', '.join(builtin_names())})")
    if text in builtin_names() and not Path(text).exists():
        return tomllib.loads(builtin_text(text)), None
    if not Path(text).exists():
        raise ConfigError(
            "scenario", f"{text!r} is neither a file nor a built-in scenario ({', '.join(builtin_names())})"
        )
    return read_table(text), Path(text).resolve().parent


def load_scenario(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), efficiency: Mapping[str, Any] | None = None
) -> Scenario:
    """The checked :class:`Scenario` of ``source``: a built-in scenario's name, a TOML or JSON file,
    or a mapping of raw tables; ``efficiency`` (a raw ``[workload.efficiency]`` table, as
    :func:`read_efficiency` reads one) replaces the scenario's; each ``overrides`` item
    (``"workload.epochs=3"``, as ``--set``) is applied after it, before the checks. Any problem
    raises :class:`ConfigError` naming the field."""
    raw, base_dir = resolve_source(source)
    if efficiency is not None:
        workload = raw.setdefault("workload", {})
        if isinstance(workload, dict):  # anything else is refused by the checks, naming [workload]
            workload["efficiency"] = dict(efficiency)
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


# ----------------------------------------------------------------------------- the scenario

MAX_TRACE_ROWS = 2**28  # worker-steps a run may record (about 16 GB of trace); more does not fit here
MAX_STEPS = 2**26  # steps a run may have (summarised: a few numbers per step, 1.6 GB at this bound)
MAX_WORKER_STEPS = 2**36  # worker-steps: hours on the vector engine, a day on SimPy (rates: docs/benchmarks.md)
MAX_EPISODES = 10**6  # slowdown episodes or failures of one worker over a run: each is drawn in a Python loop
MAX_WORKERS = 2**20  # a scenario expands one WorkerSpec object per worker: a million is seconds, more is minutes

WORKLOAD_PARAMS = (
    Param("global_batch", "integer", low=1, high=MAX_COUNT, doc="samples per step, over all workers"),
    Param("dataset_size", "integer", low=1, high=MAX_COUNT, doc="samples per epoch"),
    Param("epochs", "integer", low=1, high=MAX_COUNT, doc="epochs to run"),
    Param("gradient_mb", default=0.0, low=0.0, doc="size of the gradient exchanged every step, MB"),
    Param("backward_fraction", default=None, low=0.0, low_open=True, high=1.0,
          doc="the backward pass's share of a step's compute, for bucketed all-reduce (default 2/3)"),
)  # fmt: skip


def make_efficiency(data: Any, path: str = "workload.efficiency") -> Efficiency:
    """``[workload.efficiency]``: ``noise_scale`` (a number or a schedule), or ``grad_sqr`` with
    ``grad_var``, and ``base_batch`` (see :mod:`hetsim.model.efficiency`)."""
    table = Table(data, path, [p.name for p in EFFICIENCY_PARAMS])
    raw_noise = table.raw("noise_scale", None)
    schedule = _noise_schedule(raw_noise, f"{path}.noise_scale") if isinstance(raw_noise, list) else ()
    values = table.read([p for p in EFFICIENCY_PARAMS if not (schedule and p.name == "noise_scale")])
    pollux = values["grad_sqr"] is not None or values["grad_var"] is not None
    if raw_noise is not None and pollux:
        raise ConfigError(f"{path}.noise_scale", "give noise_scale or grad_sqr and grad_var, not both")
    if pollux:
        for key in ("grad_sqr", "grad_var"):
            if values[key] is None:
                raise ConfigError(f"{path}.{key}", "missing (required with the other of grad_sqr and grad_var)")
        noise = values["base_batch"] * values["grad_var"] / values["grad_sqr"]
        if noise <= 0:
            raise ConfigError(f"{path}.grad_var", "must be > 0 (a zero variance has no noise scale)")
    elif raw_noise is None:
        raise ConfigError(f"{path}.noise_scale", "missing (required, or grad_sqr and grad_var)")
    else:
        noise = values["noise_scale"] if not schedule else schedule[0][1]
    return Efficiency(
        float(noise), int(values["base_batch"]), values["target_steps"], schedule, **extension_fields(values, path)
    )


def _noise_schedule(value: list[Any], field: str) -> Schedule:
    """A noise-scale schedule: ``[progress, B_noise]`` pairs from progress 0, progress increasing,
    every ``B_noise`` above 0."""
    try:
        knots = Param(field, "points").check(value)
    except ConfigError as exc:
        raise ConfigError(field, exc.problem) from None
    if not knots:
        raise ConfigError(field, "a schedule needs at least one [progress, noise_scale] pair")
    if knots[0][0] != 0:
        raise ConfigError(field, f"a schedule starts at progress 0, got {knots[0][0]:g}")
    for i, ((p0, _), (p1, _)) in enumerate(zip(knots, knots[1:])):
        if p1 <= p0:
            raise ConfigError(field, f"progress must increase: point {i + 1} ({p1:g}) is not after {p0:g}")
    for i, (_, v) in enumerate(knots):
        if v <= 0:
            raise ConfigError(field, f"point {i}: the noise scale must be > 0, got {v:g}")
    return knots


def make_policy_spec(data: Any) -> PolicySpec:
    """The scenario's ``[policy]``: its name, and its parameters by the policy class (whether
    they fit the cluster's size is checked when a run builds it: ``Scenario.make_policy``)."""
    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, Mapping):
        hint = " (a Policy object goes to simulate, predict or plan)" if isinstance(data, Policy) else ""
        raise ConfigError("policy", f"must be a table, got {typename(data)}{hint}")
    name = data.get("name", PolicySpec.name)
    if not isinstance(name, str):
        raise ConfigError("policy.name", f"must be a string, got {typename(name)}")
    spec = PolicySpec(name, tuple(sorted((k, v) for k, v in data.items() if k != "name")))
    known = [p.name for p in policy_class(name, "policy.name").params]
    unknown = next((k for k, _ in spec.params if k not in known), None)
    if unknown is not None:  # often a parameter of another policy than the scenario's: --set policy.alpha=... alone
        raise ConfigError(f"policy.{unknown}", f"not a parameter of the scenario's policy {name!r} (its parameters: "
                          f"{', '.join(known) or 'none'}); for another policy's, set policy.name too")  # fmt: skip
    make_policy(name, dict(spec.params))  # ConfigError on policy.<parameter>
    return spec


TOP_PARAMS = (
    Param("name", "string", default="scenario", blank=False),
    Param("description", "string", default=""),
    Param("seed", "integer", default=0, low=0, high=MAX_SEED),
)


def build_scenario(raw: Mapping[str, Any], base_dir: Path | None = None) -> Scenario:
    top = Table(raw, "", [*(p.name for p in TOP_PARAMS), "workload", "network", "workers", "policy"])
    w = Table(top.raw("workload"), "workload", [*(p.name for p in WORKLOAD_PARAMS), "efficiency"])
    efficiency = w.raw("efficiency", None)
    workload = Workload(
        **w.read(WORKLOAD_PARAMS), efficiency=make_efficiency(efficiency) if efficiency is not None else None
    )
    if workload.dataset_size < workload.global_batch:
        raise ConfigError(
            "workload.dataset_size",
            f"{workload.dataset_size} is smaller than global_batch {workload.global_batch}: no step per epoch",
        )
    entries = top.raw("workers")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("workers", "must be a non-empty list of [[workers]] tables")
    groups = tuple(make_worker_group(entry, i, base_dir) for i, entry in enumerate(entries))
    check_worker_groups(groups)
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
    if n > MAX_WORKERS:  # before anything expands the groups into one object per worker
        raise ConfigError("workers.count", f"{n} workers in all, more than the {MAX_WORKERS} a scenario can hold")
    capacity = sum(g.count * g.spec.cap for g in scenario.groups)
    if capacity < workload.global_batch:
        raise ConfigError(
            "workers.max_batch",
            f"the caps hold at most {capacity:g} samples per step, less than global_batch {workload.global_batch}",
        )
    _check_step_length(scenario)
    _check_episodes(scenario)
    check_run_size(scenario, keep_trace=False)  # whatever is done with it: analysis loops over steps too
    return scenario


def check_run_size(scenario: Scenario, keep_trace: bool = True, every: int = 1) -> None:
    """Refuse a run that cannot fit before it starts: with its trace (``keep_trace``: one row per
    worker per step in memory, or per ``every``-th step), or summarised as it goes (``--trace
    none``: a few numbers per step), and worker-steps that would take hours."""
    steps, rows = scenario.workload.total_steps, scenario.workload.total_steps * scenario.n_workers
    kept = -(-steps // every)
    if keep_trace and kept * scenario.n_workers > MAX_TRACE_ROWS:
        what = f"{steps} steps" if every == 1 else f"{kept} sampled steps"
        raise ConfigError(
            "workload",
            f"{what} x {scenario.n_workers} workers = {kept * scenario.n_workers:.3g} trace rows, more than the "
            f"{MAX_TRACE_ROWS:.3g} a run can hold: fewer epochs or a larger global batch (or --trace none)",
        )
    if steps > MAX_STEPS:
        raise ConfigError("workload", f"{steps} steps, more than the {MAX_STEPS:.3g} a run can summarise")
    if rows > MAX_WORKER_STEPS:
        raise ConfigError(
            "workload", f"{rows:.3g} worker-steps would take hours (more than {MAX_WORKER_STEPS:.3g}): a smaller run"
        )


def _check_step_length(scenario: Scenario) -> None:
    """Refuse steps of absurd length (a unit mistake), slowed or not, and a cost curve giving a
    time that is not a finite number >= 0 (a plug-in's) at one sample or the global batch."""
    for i, group in enumerate(scenario.groups):  # the [[workers]] tables, as the file numbers them
        for b in (1, scenario.workload.global_batch):
            time_s = float(group.spec.cost.time_s(b))
            if not 0 <= time_s < float("inf"):
                raise ConfigError(f"workers.{i}.cost", f"gives {time_s!r} s at batch {b}: a time must be a finite "
                                  "number >= 0")  # fmt: skip
        step_s = group.spec.expected_compute_s(scenario.workload.global_batch)
        if not step_s < MAX_STEP_S:
            raise ConfigError(
                f"workers.{i}",
                f"a step of {scenario.workload.global_batch} samples would take {step_s:.3g} s: check the units",
            )
        slowdown = group.spec.slowdown
        if slowdown is not None and not step_s * slowdown.factor < MAX_STEP_S:
            raise ConfigError(
                f"workers.{i}.slowdown.factor",
                f"{slowdown.factor:g} makes a slowed step of {step_s * slowdown.factor:.3g} s: check the units",
            )


def _check_episodes(scenario: Scenario) -> None:
    """Refuse slowdown episodes or failures so frequent that drawing them over the run would not
    end (each is a turn of a loop; a mean gap in hours read as seconds, or a rate given for a
    mean): the run lasts about its steps times the slowest worker's step at the equal split,
    slowed by its episodes, stretched by the share of time failures keep a worker down."""
    wl, n = scenario.workload, scenario.n_workers
    share = -(-wl.global_batch // n)
    slowest_s = max(g.spec.expected_compute_s(share) * (g.spec.slowdown.factor if g.spec.slowdown else 1.0)
                    for g in scenario.groups)  # fmt: skip
    up = min((f.mtbf_s / (f.mtbf_s + f.repair_s) for g in scenario.groups if (f := g.spec.failure)), default=1.0)
    run_s = wl.total_steps * (slowest_s + scenario.allreduce_s()) / up
    for i, group in enumerate(scenario.groups):
        slowdown, failure = group.spec.slowdown, group.spec.failure
        for key, period_s in (("slowdown", slowdown and slowdown.every_s + slowdown.duration_s),
                              ("failure", failure and failure.mtbf_s + failure.repair_s)):  # fmt: skip
            if period_s and run_s / period_s > MAX_EPISODES:
                raise ConfigError(
                    f"workers.{i}.{key}",
                    f"about {run_s / period_s:.3g} episodes over the run (about {run_s:.3g} s), more than the "
                    f"{MAX_EPISODES:.0e} a run can draw: check the units",
                )
