"""hetsim: how much time synchronous data-parallel SGD loses to slow workers, and which
way of splitting the work wins it back.

The public entry points: :func:`load_scenario` (config), :func:`simulate` (one run -> Trace),
:func:`summarize` (Trace -> Summary), and the plug-in registries (``POLICIES.register`` and the
others: see :mod:`hetsim.registry` and docs/architecture.md, "Extending hetsim").

They are loaded on first use (PEP 562 ``__getattr__``), not by ``import hetsim``: importing any
``hetsim.*`` module runs this file first, and the simulator's modules import numpy, scipy and
simpy, which a command line that only parses its arguments (``python -m hetsim --help``, or a
bad option) should not wait for.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

if TYPE_CHECKING:  # what mypy and editors see; at run time __getattr__ loads each on first use
    from hetsim.config import load_scenario
    from hetsim.errors import ConfigError
    from hetsim.metrics import Summary, summarize
    from hetsim.registry import DISTRIBUTIONS, ENGINES, NETWORKS, POLICIES
    from hetsim.scenario import Scenario
    from hetsim.simulate import simulate

_LAZY = {  # public name -> the module that defines it
    "DISTRIBUTIONS": "hetsim.registry",
    "ENGINES": "hetsim.registry",
    "NETWORKS": "hetsim.registry",
    "POLICIES": "hetsim.registry",
    "ConfigError": "hetsim.errors",
    "Scenario": "hetsim.scenario",
    "Summary": "hetsim.metrics",
    "load_scenario": "hetsim.config",
    "simulate": "hetsim.simulate",
    "summarize": "hetsim.metrics",
}

__all__ = [
    "DISTRIBUTIONS",
    "ENGINES",
    "NETWORKS",
    "POLICIES",
    "ConfigError",
    "Scenario",
    "Summary",
    "__version__",
    "load_scenario",
    "simulate",
    "summarize",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and kept here (later look-ups do
    not come back to this function)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """This package's module type. The import system binds each submodule it loads as an
    attribute of the package: loading ``hetsim.simulate`` (the module, which many modules import
    from) would hide :func:`simulate` (the function of the same name) from ``__getattr__``, so
    a submodule is not bound under a public name; ``from hetsim.simulate import ...`` reads
    ``sys.modules`` and is unaffected."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
