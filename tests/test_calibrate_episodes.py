"""What calibrate says of a trace's rows it fits as if they were ordinary: rows slowed by an
episode, whose times pass for the worker's cost and noise."""

from __future__ import annotations

import pytest

from hetsim.calibrate import calibrate
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario


@pytest.mark.slow  # two simulated runs and their fits: out of make test-fast
def test_rows_slowed_by_an_episode_are_said_to_be_fitted_as_cost_and_noise():
    """A simulated trace's slowdown column above 1: the fit reads those times as the worker's
    own, and the written scenario has no episodes (a user walk: shared-cluster's fitted sigma
    about three times the workers' own, without a word)."""
    episodes = "workers.0.slowdown={every_s=20, duration_s=10, factor=2}"
    slowed = calibrate(simulate(load_scenario("workstation", ["workload.epochs=2", episodes]), seed=1))
    (said,) = [w for w in slowed.warnings if "slowed by an episode" in w]
    assert said.startswith("trace: ") and "; worker 0, 1) ran slowed" in said and "has no episodes" in said
    calm = calibrate(simulate(load_scenario("workstation", ["workload.epochs=2"]), seed=1))
    assert not any("slowed by an episode" in w for w in calm.warnings)
