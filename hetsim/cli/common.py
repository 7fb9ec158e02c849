"""Pieces hetsim's command-line modules share: the scenario options, the checks several commands
make, and (from :mod:`hetsim.core.console`, which ``validation`` uses too) the one-line error contract.

Building a parser from here imports nothing beyond the standard library and hetsim's
dependency-free modules (errors, params): the policy registry, whose plug-ins import numpy and
scipy, is imported by the functions that check policy names, when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hetsim.core.console import parse_policies, path_argument
from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_COUNT, Param

if TYPE_CHECKING:
    from hetsim.engines.base import Engine
    from hetsim.policies.base import Policy
    from hetsim.scenario.scenario import Scenario

DEFAULT_SCENARIO = "workstation"


def add_scenario_options(parser: argparse.ArgumentParser, json_help: str) -> None:
    """SCENARIO, --policy, --set, --seed and --json: what every command on one scenario takes."""
    parser.add_argument(
        "scenario", nargs="?", default=DEFAULT_SCENARIO, help=f"built-in name or file (default: {DEFAULT_SCENARIO})"
    )
    parser.add_argument(
        "--policy", default=None, help="comma-separated policies (default: every policy that can run the scenario)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field, e.g. workers.1.per_sample_s=0.004",
    )
    add_efficiency_option(parser)
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the scenario's)")
    parser.add_argument("--json", action="store_true", help=json_help)


def add_efficiency_option(parser: argparse.ArgumentParser) -> None:
    """--efficiency FILE: a fitted ``[workload.efficiency]`` table put into the scenario."""
    parser.add_argument(
        "--efficiency",
        default=None,
        type=path_argument,
        metavar="FILE",
        help="the [workload.efficiency] table of FILE (what `calibrate-efficiency -o` writes) in place of the "
        "scenario's, before --set",
    )


def scenario_policies(text: str | None, scenario: Scenario, notes: list[str] | None = None) -> dict[str, Policy]:
    """The policies a command runs, by name, each built (and so checked) once: those given with
    ``--policy`` (each must fit the scenario),
    or, by default, every registered policy that fits it, with a note on stderr for each left out
    (one that needs statistical efficiency on a scenario without it included), or, given a list of
    ``notes``, appended to it for the caller to print once its other checks have passed (bad input
    gets its one line alone)."""
    if text is not None:
        return {name: scenario.named_policy(name) for name in parse_policies(text)}
    built, skipped = scenario.runnable_policies()
    left_out = [f"note: {name} left out: {why}" for name, why in skipped]
    if notes is not None:
        notes.extend(left_out)
    else:
        for line in left_out:
            print(line, file=sys.stderr)
    return built


def check_seed(seed: int | None) -> None:
    from hetsim.scenario.scenario import check_seed as check  # the API's check, on the option

    check(seed, "--seed")


def check_new_folder(out: Path, force: bool, option: str = "--out") -> None:
    """``out`` is a new or empty folder, or ``force`` says its results may be replaced: a folder
    that already holds a run's files is refused (one line, before anything runs), so that a
    later run never silently replaces an earlier one's results."""
    if not force and out.is_dir() and any(out.iterdir()):
        raise ConfigError(option, f"{out} already holds files (add --force to replace them, or choose a new folder)")


def scenario_of(args: argparse.Namespace) -> Scenario:
    """The scenario a command names (``args.scenario``, with ``args.efficiency``'s table and
    ``args.set`` applied); a sweep file given there is refused first, in one line
    (:func:`refuse_sweep_file`). The command says its unfitted workers (:func:`say_unfitted`)
    once its checks have passed."""
    from hetsim.scenario.config import load_scenario, read_efficiency

    refuse_sweep_file(args.scenario)
    given = getattr(args, "efficiency", None)  # `costs` has no use for it
    efficiency = read_efficiency(given) if given is not None else None
    return load_scenario(args.scenario, args.set, efficiency)


def say_unfitted(lines: Iterable[str]) -> None:
    """Each worker whose cost is a guess, not a fit (:meth:`Scenario.unfitted`'s ``lines``), said
    on stderr: once the command's input has passed (refused input prints nothing but its one line)."""
    for line in lines:
        print(f"hetsim: warning: {line}", file=sys.stderr)


def refuse_sweep_file(source: str | None) -> None:
    """A sweep file given where a scenario belongs gets one line saying so (rather than
    ``base: unknown key``): a TOML/JSON file with a ``grid`` or a ``base`` and no ``workers``.
    Every command that takes a scenario calls it before loading one."""
    if source is None or not source.endswith((".toml", ".json")) or not Path(source).is_file():
        return
    from hetsim.scenario.config import read_table  # reads (and checks) the file as the scenario loader would

    raw = read_table(source)
    if ("grid" in raw or "base" in raw) and "workers" not in raw:
        raise ConfigError(source, f"this is a sweep file, not a scenario file (use: python -m hetsim sweep {source})")


def engine_option(name: str | None) -> Engine | None:
    """``--engine NAME`` as the engine object it names (None: not given, or ``auto``), checked
    first, where argparse checked its choices before (see the module's docstring)."""
    from hetsim.engines import AUTO, engine_named

    return engine_named(AUTO if name is None else name, "--engine")


def sample_every(value: int) -> int:
    """``--sample-every``, checked (simulate and sweep alike)."""
    return int(Param("--sample-every", "integer", low=1, high=MAX_COUNT).check(value))


def check_sample_every_alone(value: int | None, trace: str | None) -> None:
    """``--sample-every`` given without ``--trace sample`` would be ignored: refused (simulate and
    a new sweep alike)."""
    if value is not None and trace != "sample":
        raise ConfigError("--sample-every", "only with --trace sample (it keeps every K-th step's rows)")


def check_sizes(scenario: Scenario, policies: Iterable[Policy | type[Policy]], every: int) -> None:
    """Every policy's run size for what it keeps (:func:`check_kept_size`), before the first starts."""
    from hetsim.run.simulate import check_kept_size

    for policy in policies:
        check_kept_size(scenario, policy.synchronous, every)


def check_out_file(path: Path, kinds: Mapping[str, str], option: str) -> str:
    """The kind of file ``path`` names by its suffix (one of ``kinds``); refused on ``option`` when
    unknown or a folder."""
    if path.is_dir():
        raise ConfigError(option, f"{path} is a folder")
    kind = kinds.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(option, f"{path}: unknown file type {path.suffix!r} (use {', '.join(kinds)})")
    return kind
