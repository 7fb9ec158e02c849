"""Values a program passes that the files never do: NumPy numbers for parameters, a
distribution object beside its noise persistence in a table (user walks of the Python API)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hetsim.core.errors import ConfigError
from hetsim.model.costs import Affine
from hetsim.policies import KSync
from hetsim.scenario.config import load_scenario


def test_numpy_numbers_are_parameters_as_python_ones() -> None:
    """A program's np.int64 or np.float32 where an integer or number belongs (a grid of its own
    making) was refused: "must be an integer, got int64"."""
    from hetsim.model.distributions import LogNormal

    assert KSync(k=np.int64(2)).k == 2 and type(KSync(k=np.int64(2)).k) is int  # policies are not values
    assert Affine(np.float32(0.5), np.int64(1)) == Affine(0.5, 1.0)
    assert LogNormal(np.float64(0.1)) == LogNormal(0.1)
    with pytest.raises(ConfigError, match=r"^k: must be an integer, got float64 \(np\.float64\(2\.0\)\)$"):
        KSync(k=np.float64(2.0))
    with pytest.raises(ConfigError, match=r"^sigma: must be finite, got nan$"):
        LogNormal(np.float32("nan"))
    with pytest.raises(ConfigError, match=r"^k: must be a plain number, not a NumPy duration, got timedelta64"):
        KSync(k=np.timedelta64(5, "ns"))  # an Integral in its own unit: 5 ns is not 5


def test_a_noise_object_takes_its_persistence_beside_it_in_a_table() -> None:
    """extending.md's ``{"dist": ..., "persistence": 0.5}`` with an object for ``...`` read as an
    unknown distribution named by the object."""
    from hetsim.model.distributions import LogNormal
    from tests.helpers import scenario_dict

    def noisy(noise: object) -> Any:
        return load_scenario(scenario_dict([{"per_sample_s": 0.001, "noise": noise}]))

    table = noisy({"dist": "lognormal", "sigma": 0.1, "persistence": 0.5})
    assert noisy({"dist": LogNormal(0.1), "persistence": 0.5}) == table and table.workers[0].persistence == 0.5
    with pytest.raises(
        ConfigError, match=r"^workers\.0\.noise\.dist: LogNormal\(sigma=0\.1\) is an object: give it alone"
    ):
        noisy({"dist": LogNormal(0.1), "sigma": 0.2})  # read "unknown distribution LogNormal(sigma=0.1)"
