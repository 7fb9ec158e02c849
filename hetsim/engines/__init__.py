"""Engines turn (scenario, policy, seed) into a Trace. They never import pandas or matplotlib.

``simpy`` is the reference (every policy); ``vector`` computes the same traces with NumPy for
the barrier policies; ``auto`` picks ``vector`` where it supports the policy.
"""

from hetsim.engines.simpy_engine import run_simpy
from hetsim.engines.vector import run_vector, supports
from hetsim.policies.base import Policy

ENGINES = {"simpy": run_simpy, "vector": run_vector}
ENGINE_CHOICES = ("simpy", "vector", "auto")


def engine_for(engine: str, policy: Policy) -> str:
    """The engine that runs ``policy`` when ``engine`` is asked for (``auto`` resolved)."""
    if engine == "auto":
        return "vector" if supports(policy) else "simpy"
    return engine


__all__ = ["ENGINES", "ENGINE_CHOICES", "engine_for", "run_simpy", "run_vector"]
