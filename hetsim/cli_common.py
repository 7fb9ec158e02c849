"""Pieces every command line shares (``python -m hetsim`` and ``python -m validation``): the
one-line error contract, option parsing and plain-text tables.

Building a parser from here imports nothing beyond the standard library and hetsim's
dependency-free modules (errors, params): the policy registry, whose plug-ins import numpy and
scipy, is imported by the functions that check policy names, when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsim.errors import CellFailed, ConfigError
from hetsim.params import MAX_COUNT, Param

if TYPE_CHECKING:
    from hetsim.scenario import Scenario

DEFAULT_SCENARIO = "workstation"


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as a ConfigError: one line and exit status 2.

    An option's metavar can be left to a function (:meth:`defer_metavar`), called only when
    this parser's usage or help is shown: names that only a heavy module lists (calibrate's
    models, beside scipy) then cost nothing to a command line that does not show them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deferred: list[tuple[argparse.Action, Callable[[], str]]] = []

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError("", f"{self.prog}: {message}")

    def defer_metavar(self, action: argparse.Action, metavar: Callable[[], str]) -> None:
        """Show ``metavar()`` as ``action``'s metavar (which needs one meanwhile: argparse
        formats it once as the option is added)."""
        self._deferred.append((action, metavar))

    def format_usage(self) -> str:
        self._fill_metavars()
        return super().format_usage()

    def format_help(self) -> str:
        self._fill_metavars()
        return super().format_help()

    def _fill_metavars(self) -> None:
        for action, metavar in self._deferred:
            action.metavar = metavar()
        self._deferred.clear()


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
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the scenario's)")
    parser.add_argument("--json", action="store_true", help=json_help)


def run_main(prog: str, run: Callable[[], int]) -> int:
    """Run a command; bad input (and a path that cannot be read or written) ends in one line on
    stderr, ``<prog>: error: ...``, and exit status 2; a sweep cell that failed otherwise in one
    line and exit status 1; Ctrl-C in one line and exit status 130."""
    try:
        return run()
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
    except CellFailed as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            return 0
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or exc}", file=sys.stderr)
    return 2


def parse_policies(value: object, option: str = "--policy", reserved: Mapping[str, str] | None = None) -> list[str]:
    """``a,b,c`` (or a list of names) -> names, each checked against the registry and listed
    once; a name in ``reserved`` is refused with its problem."""
    if not isinstance(value, (str, list, tuple)):
        raise ConfigError(option, f"expected a comma-separated string or a list of policy names, got {value!r}")
    names = [p.strip() for p in value.split(",")] if isinstance(value, str) else [str(p).strip() for p in value]
    names = [n for n in names if n]
    if not names:
        raise ConfigError(option, "no policy given")
    from hetsim.policies import policy_class  # imported here so that the command line starts without scipy

    for name in names:
        if reserved and name in reserved:
            raise ConfigError(option, reserved[name])
        policy_class(name, option)
    if len(set(names)) != len(names):
        raise ConfigError(option, "a policy is listed twice")
    return names


def scenario_policies(text: str | None, scenario: Scenario, notes: list[str] | None = None) -> list[str]:
    """The policies a command runs: those given with ``--policy`` (each must fit the scenario),
    or, by default, every registered policy that fits it, with a note on stderr for each left out
    (one that needs statistical efficiency on a scenario without it included), or, given a list of
    ``notes``, appended to it for the caller to print once its other checks have passed (bad input
    gets its one line alone)."""
    if text is not None:
        names = parse_policies(text)
        for name in names:
            scenario.make_policy(name)
        return names
    from hetsim.policies import POLICIES  # imported here so that the command line starts without scipy

    names, left_out = [], []
    for name, cls in POLICIES.items():
        if cls.needs_efficiency and scenario.workload.efficiency is None:
            left_out.append(f"note: {name} left out: it needs [workload.efficiency] (the gradient noise scale), "
                            "which the scenario lacks")  # fmt: skip
            continue
        try:
            scenario.make_policy(name)
        except ConfigError as exc:
            left_out.append(f"note: {name} left out: {exc}")
            continue
        names.append(name)
    if notes is not None:
        notes.extend(left_out)
    else:
        for line in left_out:
            print(line, file=sys.stderr)
    return names


def check_seed(seed: int | None) -> None:
    if seed is not None:
        Param("--seed", "integer", low=0).check(seed)


def check_new_folder(out: Path, force: bool, option: str = "--out") -> None:
    """``out`` is a new or empty folder, or ``force`` says its results may be replaced: a folder
    that already holds a run's files is refused (one line, before anything runs), so that a
    later run never silently replaces an earlier one's results."""
    if not force and out.is_dir() and any(out.iterdir()):
        raise ConfigError(option, f"{out} already holds files (add --force to replace them, or choose a new folder)")


def refuse_sweep_file(source: str) -> None:
    """A sweep file given where a scenario belongs gets one line saying so (rather than
    ``base: unknown key``): a TOML/JSON file with a ``grid`` or a ``base`` and no ``workers``."""
    if not source.endswith((".toml", ".json")) or not Path(source).is_file():
        return
    from hetsim.config import read_table  # reads (and checks) the file as the scenario loader would

    raw = read_table(source)
    if ("grid" in raw or "base" in raw) and "workers" not in raw:
        raise ConfigError(source, f"this is a sweep file, not a scenario file (use: python -m hetsim sweep {source})")


def check_engine_option(name: str | None) -> None:
    """``--engine`` (when given) names a registered engine or ``auto``: checked first, where
    argparse checked its choices before (see the module's docstring)."""
    if name is not None:
        from hetsim.engines import check_engine

        check_engine(name, "--engine")


def sample_every(value: int) -> int:
    """``--sample-every``, checked (simulate and sweep alike)."""
    return int(Param("--sample-every", "integer", low=1, high=MAX_COUNT).check(value))


def check_sizes(scenario: Scenario, policies: Sequence[str], every: int) -> None:
    """Every policy's run size for what it keeps (:func:`check_kept_size`), before the first starts."""
    from hetsim.policies import policy_class
    from hetsim.simulate import check_kept_size

    for name in policies:
        check_kept_size(scenario, policy_class(name).synchronous, every)


def check_out_file(path: Path, kinds: Mapping[str, str], option: str) -> str:
    """The kind of file ``path`` names by its suffix (one of ``kinds``); refused on ``option`` when
    unknown or a folder."""
    kind = kinds.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(option, f"{path}: unknown file type {path.suffix!r} (use {', '.join(kinds)})")
    if path.exists() and path.is_dir():
        raise ConfigError(option, f"{path} is a folder")
    return kind
