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

AUTO = "auto"  # the name, in files and on the command line, of None: the engine chosen per policy


def engine_choices() -> tuple[str, ...]:
    """Every registered engine's name, then ``auto``."""
    return (*ENGINES, AUTO)


def engine_named(name: object, field: str = "engine") -> Engine | None:
    """The engine a file or the command line names: a registered engine's object, or None for
    ``auto``; else ConfigError on ``field``."""
    if isinstance(name, Engine):
        raise ConfigError(field, f"{name.name!r} is an object already: give it to simulate as it is")
    if name == AUTO:
        return None
    if not isinstance(name, str) or name not in ENGINES:
        raise ConfigError(field, f"unknown engine {name!r} (known: {', '.join(engine_choices())})")
    return ENGINES[name]()


def check_engine(engine: object, field: str = "engine") -> Engine | None:
    """``engine`` if it is an :class:`Engine` object or None (``auto``); else ConfigError on
    ``field`` (a name among them: names are resolved in files and on the command line)."""
    if engine is None or isinstance(engine, Engine):
        return engine
    if isinstance(engine, str):
        example = f" ({ENGINES.spelled(engine)})" if engine in ENGINES else ""
        raise ConfigError(field, f"give an Engine object{example} or None (auto), not the name {engine!r}")
    if isinstance(engine, type) and issubclass(engine, Engine):
        raise ConfigError(field, f"got the class {engine.__name__}: give an object ({engine.__name__}())")
    raise ConfigError(field, f"expected an Engine object or None (auto), got {type(engine).__name__}")


def engine_for(engine: Engine | None, policy: Policy) -> Engine:
    """The engine that runs ``policy``: ``engine``, or (None) the supporting engine of highest
    priority."""
    if engine is None:
        return max((cls for cls in ENGINES.values() if cls.supports(policy)), key=lambda cls: cls.priority)()
    if not engine.supports(policy):
        raise ConfigError("engine", engine.refusal(policy))
    return engine


__all__ = [
    "AUTO",
    "ENGINES",
    "Engine",
    "SimPyEngine",
    "VectorEngine",
    "check_engine",
    "engine_choices",
    "engine_for",
    "engine_named",
    "run_simpy",
    "run_vector",
]
