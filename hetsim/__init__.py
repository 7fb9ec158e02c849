"""hetsim: how much time synchronous data-parallel SGD loses to slow workers, and which
way of splitting the work wins it back.

The public entry points: :func:`load_scenario` (config), :func:`simulate` (one run -> Trace),
:func:`summarize` (Trace -> Summary), and the plug-in registries (``POLICIES.register`` and the
others: see :mod:`hetsim.registry` and docs/architecture.md, "Extending hetsim").
"""

from __future__ import annotations

__version__ = "0.3.0"

from hetsim.config import load_scenario
from hetsim.errors import ConfigError
from hetsim.metrics import Summary, summarize
from hetsim.registry import DISTRIBUTIONS, ENGINES, NETWORKS, POLICIES
from hetsim.scenario import Scenario
from hetsim.simulate import simulate

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
