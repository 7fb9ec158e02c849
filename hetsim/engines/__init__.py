"""Engines turn (scenario, policy, seed) into a Trace. They never import pandas or matplotlib."""

from hetsim.engines.simpy_engine import run_simpy

ENGINES = {"simpy": run_simpy}

__all__ = ["ENGINES", "run_simpy"]
