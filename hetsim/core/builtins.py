"""The scenarios hetsim ships (``hetsim/data/scenarios/*.toml``), read as text: what
``python -m hetsim scenarios`` and ``show NAME`` print, without importing the factory that
builds a scenario (and, with its plug-ins, numpy and scipy)."""

from __future__ import annotations

import tomllib
from importlib import resources

BUILTIN_PACKAGE = "hetsim.data.scenarios"


def builtin_names() -> list[str]:
    """The built-in scenarios' names, sorted."""
    return sorted(p.name[:-5] for p in resources.files(BUILTIN_PACKAGE).iterdir() if p.name.endswith(".toml"))


def builtin_text(name: str) -> str:
    """The TOML text of the built-in scenario ``name``."""
    return resources.files(BUILTIN_PACKAGE).joinpath(f"{name}.toml").read_text(encoding="utf-8")


def builtin_description(name: str) -> str:
    """The ``description`` line of the built-in scenario ``name`` (tests/test_config.py checks
    that every built-in scenario also loads)."""
    return str(tomllib.loads(builtin_text(name)).get("description", ""))
