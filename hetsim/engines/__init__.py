"""Engines turn (scenario, policy, seed) into a Trace. They never import pandas or matplotlib.

``simpy`` is the reference (every policy); ``vector`` computes the same traces with NumPy for
the barrier policies; ``auto`` picks, per policy, the supporting engine of highest priority.
Importing this package registers the built-in engines with :data:`hetsim.core.registry.ENGINES`.
"""

from __future__ import annotations

from hetsim.core.errors import ConfigError
from hetsim.core.registry import ENGINES
from hetsim.engines.base import Engine
from hetsim.engines.simpy_engine import SimPyEngine, run_simpy
from hetsim.engines.vector import VectorEngine, run_vector
from hetsim.policies.base import Policy

AUTO = "auto"


def engine_choices() -> tuple[str, ...]:
    """Every registered engine's name, then ``auto``."""
    return (*ENGINES, AUTO)


def check_engine(name: object, field: str = "engine") -> str | Engine:
    """``name`` if it is an :class:`Engine` object, a registered engine's name or ``auto``; else
    ConfigError on ``field``."""
    if isinstance(name, Engine):
        return name
    if name != AUTO and (not isinstance(name, str) or name not in ENGINES):
        raise ConfigError(field, f"unknown engine {name!r} (known: {', '.join(engine_choices())})")
    return str(name)


def engine_for(name: str | Engine, policy: Policy) -> Engine:
    """The engine that runs ``policy`` when ``name`` (or an engine object) is asked for (``auto``
    resolved)."""
    if isinstance(name, Engine):
        if not name.supports(policy):
            raise ConfigError("engine", name.refusal(policy))
        return name
    if name == AUTO:
        return max((cls for cls in ENGINES.values() if cls.supports(policy)), key=lambda cls: cls.priority)()
    cls = ENGINES.lookup(name, "engine")
    if not cls.supports(policy):
        raise ConfigError("engine", cls.refusal(policy))
    return cls()


__all__ = [
    "AUTO",
    "ENGINES",
    "Engine",
    "SimPyEngine",
    "VectorEngine",
    "check_engine",
    "engine_choices",
    "engine_for",
    "run_simpy",
    "run_vector",
]
