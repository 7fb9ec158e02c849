"""A plug-in is what a built-in is (docs/guide/extending.md): the cost-model example, affine at
exponent 1, keeps its kind when a scenario is written back, and ``plan``'s slowed copies of any
cost (fragility, ``--cost-error``) declare what the original declares, so no closed form is lost."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from hetsim.core.registry import COSTS
from hetsim.model.costs import Hinge
from hetsim.plan.fragility import slower_cost
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def examples() -> Iterator[dict[str, ModuleType]]:
    """The cost-model example imported here (registering ``power``), unregistered after unless
    another test's import registered it first."""
    registered = "power" in COSTS
    file = ROOT / "examples" / "my_cost_model.py"
    spec = importlib.util.spec_from_file_location("example_my_cost_model_fast_paths", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if not registered:
        spec.loader.exec_module(module)
    else:
        module.Power = COSTS["power"]  # type: ignore[attr-defined]
    yield {"my_cost_model.py": module}
    if not registered:
        COSTS.unregister("power")


def test_the_cost_model_example_keeps_its_kind_in_files_and_its_fast_path_when_slowed(examples):
    """A plug-in that is affine at exponent 1 is written back as itself (the affine model's
    shorthand would load as ``affine``), and ``plan``'s slowed copies of it (fragility,
    ``--cost-error``) still declare their affine terms, as the built-in ``affine`` did."""
    power = examples["my_cost_model.py"].Power
    affine_power = power(overhead_s=0.01, per_sample_s=0.002, exponent=1.0)
    scenario = load_scenario(scenario_dict([{"cost": {"model": "power", "overhead_s": 0.01, "per_sample_s": 0.002}},
                                            {"overhead_s": 0.01, "per_sample_s": 0.002}]))  # fmt: skip
    raw = scenario.to_dict()
    assert raw["workers"][0]["cost"] == {"model": "power", "overhead_s": 0.01, "per_sample_s": 0.002, "exponent": 1.0}
    assert "cost" not in raw["workers"][1] and raw["workers"][1]["overhead_s"] == 0.01  # the built-in's shorthand
    assert load_scenario(raw) == scenario
    slowed = slower_cost(affine_power, 3.0)
    assert slowed.affine_terms() == pytest.approx((0.03, 0.006), rel=1e-15)
    assert slower_cost(power(per_sample_s=0.002, exponent=0.5), 3.0).affine_terms() is None
    assert slower_cost(Hinge(0.02, -0.01, 0.001), 2.0).bends() == pytest.approx((30.0,), rel=1e-15)
