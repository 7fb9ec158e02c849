"""hetsim: how much time synchronous data-parallel SGD loses to slow workers, and which
way of splitting the work wins it back.

The public entry points: :func:`load_scenario` (config), :func:`simulate` (one run -> Trace),
:func:`summarize` (Trace -> Summary), and the plug-in registries (``POLICIES.register`` and the
others: see :mod:`hetsim.core.registry` and docs/guide/extending.md, "Your own plug-ins").

They are loaded on first use (PEP 562 ``__getattr__``), not by ``import hetsim``: importing any
``hetsim.*`` module runs this file first, and the simulator's modules import numpy, scipy and
simpy, which a command line that only parses its arguments (``python -m hetsim --help``, or a
bad option) should not wait for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

if TYPE_CHECKING:  # what mypy and editors see; at run time __getattr__ loads each on first use
    from hetsim.core.errors import ConfigError
    from hetsim.core.registry import DISTRIBUTIONS, ENGINES, NETWORKS, POLICIES
    from hetsim.run.metrics import Summary, summarize
    from hetsim.run.simulate import simulate
    from hetsim.scenario.config import load_scenario
    from hetsim.scenario.scenario import Scenario

_LAZY = {  # public name -> the module that defines it
    "DISTRIBUTIONS": "hetsim.core.registry",
    "ENGINES": "hetsim.core.registry",
    "NETWORKS": "hetsim.core.registry",
    "POLICIES": "hetsim.core.registry",
    "ConfigError": "hetsim.core.errors",
    "Scenario": "hetsim.scenario.scenario",
    "Summary": "hetsim.run.metrics",
    "load_scenario": "hetsim.scenario.config",
    "simulate": "hetsim.run.simulate",
    "summarize": "hetsim.run.metrics",
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
