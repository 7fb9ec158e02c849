"""Provenance: what every output file records so that a reader can tell what it is and remake it
(hetsim's version, the git commit of its source, Python, host, date, the command as typed, and,
for one scenario's results, the scenario and the seed).

This module imports only the standard library and hetsim's version, so the writers of every
kind of output use it: ``simulate --out``'s summary.json, a sweep's meta.json, ``plan.json``,
``calibrate``'s scenario, and validation's files (validation may import it; it is neither a
command line nor a report).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hetsim import __version__

PLUGINS_ENV = "HETSIM_PLUGINS"  # hetsim.core.registry's, named here so that this module imports nothing of hetsim's


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """What a reader needs to cite or reproduce a result: ``hetsim_version``, ``git_commit``,
    ``python``, ``platform``, ``host``, ``date`` (UTC) and ``command`` (``argv``, by default this
    process's command line as typed); and ``hetsim_plugins``, the plug-in files or modules the
    process was given (``HETSIM_PLUGINS``), where it was given any: the results' scenario may
    name their plug-ins, and does not load without them."""
    plugins = os.environ.get(PLUGINS_ENV)
    return {
        "hetsim_version": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(command_line() if argv is None else argv),
        **({"hetsim_plugins": plugins} if plugins else {}),
    }


def run_record(
    name: str, config: Mapping[str, Any], seed: int | None, argv: Sequence[str] | None = None
) -> dict[str, Any]:
    """:func:`provenance` plus the scenario (``name`` and ``config``, the scenario-file dict that
    ``load_scenario`` rebuilds) and the ``seed`` the results were made with."""
    return {**provenance(argv), "scenario": {"name": name, "config": dict(config)}, "seed": seed}


def comment_header(record: Mapping[str, Any]) -> str:
    """``record``'s command, version, commit and date as ``# key: value`` lines, heading a TOML
    file that is meant to be copied out of its folder (a calibrated or profiled scenario)."""
    shown = {**record, "git_commit": record.get("git_commit") or "none (not run from a git checkout of hetsim)"}
    keys = ("command", "hetsim_version", "git_commit", "date")
    return "".join(f"# {key}: {_one_line(str(shown[key]))}\n" for key in keys)


def trace_line(record: Mapping[str, Any]) -> str:
    """A comment line saying what made a trace (an imported trace's ``record``: its command,
    version, commit and date), for the header of a scenario fitted to it."""
    command, version, date = (record.get(key, "?") for key in ("command", "hetsim_version", "date"))
    made = f"{command} (hetsim {version}, commit {record.get('git_commit') or 'none'}, {date})"
    return f"# trace made by: {_one_line(made)}\n"


def _one_line(text: str) -> str:
    """``text`` with the control characters a TOML comment may not hold written as escapes
    (``\\n``, ``\\x01``): a newline in a command's argument would end the comment and put
    the rest in the file as TOML."""
    return re.sub(r"[\x00-\x08\x0a-\x1f\x7f]", lambda m: "\\n" if m[0] == "\n" else f"\\x{ord(m[0]):02x}", text)


_GIVEN: list[str] | None = None  # the command a caller of hetsim.cli.main.main(argv) ran, set by record_command


def record_command(argv: Sequence[str]) -> None:
    """Record ``argv`` as the command this process runs (``hetsim.cli.main.main(argv)`` called from
    Python, where ``sys.argv`` is the caller's)."""
    global _GIVEN
    _GIVEN = list(argv)


COMMAND_ENV = "HETSIM_COMMAND"  # set by a launcher for the processes it starts, whose own argv is not what was typed


def command_line() -> list[str]:
    """The command as typed: :func:`record_command`'s, else the one a launching process left in
    ``HETSIM_COMMAND`` (a validation rank records ``python -m validation run ...``, not its own
    ``python -m validation.train``), else ``sys.argv`` with ``python -m hetsim`` rather than the
    path of ``__main__.py``."""
    if _GIVEN is not None:
        return list(_GIVEN)
    if os.environ.get(COMMAND_ENV):
        return shlex.split(os.environ[COMMAND_ENV])
    argv = list(sys.argv)
    if argv and Path(argv[0]).name == "__main__.py":
        argv[0:1] = ["python", "-m", Path(argv[0]).parent.name]
    return argv


SOURCES = ("hetsim", "validation")  # the folders of a checkout whose changes make a result's commit "+dirty"


def git_commit() -> str | None:
    """The commit of the checkout hetsim runs from (with ``+dirty`` if ``hetsim/`` or
    ``validation/`` has changes, staged, unstaged or untracked), or None: an installed copy, no
    git, or a package inside some other repository (a project's ignored ``.venv``), whose HEAD
    is not hetsim's."""
    root = Path(__file__).resolve().parents[2]  # hetsim/core/provenance.py -> the checkout
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if (
            top is None
            or Path(top).resolve() != root
            or _git(root, "ls-files", "--error-unmatch", "hetsim/__init__.py") is None
        ):
            return None
        commit = _git(root, "rev-parse", "HEAD")
        changes = _git(root, "status", "--porcelain", "--", *SOURCES)
    except (OSError, subprocess.SubprocessError):
        return None
    return None if commit is None else commit + ("+dirty" if changes else "")


def _git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s output, stripped, or None where it fails."""
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5)
    return done.stdout.strip() if done.returncode == 0 else None
