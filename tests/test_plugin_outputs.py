"""A plug-in whose outputs are not times: a distribution's ``ppf``, a cost's ``time_s`` or a
network's ``allreduce_s`` giving nan or a negative number is refused in one line naming the
worker or the network, on every engine (a user walk: a nan delay stood the vector engine's
clock still, forever; negative times ran to a negative utilization, exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from hetsim.core.errors import ConfigError
from hetsim.core.registry import PLUGINS_ENV
from hetsim.engines import SimPyEngine, VectorEngine
from hetsim.model.costs import CostModel
from hetsim.model.distributions import Distribution
from hetsim.model.network import NetworkModel
from hetsim.policies import Async, Equal
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario
from tests.helpers import scenario_dict


class RareNan(Distribution):
    """A delay of 0.01 s but nan in its top tenth: fine where the scenario's load looks."""

    name: ClassVar[str] = "rare-nan"
    params = ()

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(u) > 0.9, np.nan, 0.01)

    def mean(self) -> float:
        return 0.01

    def var(self) -> float:
        return 0.0


class Below(CostModel):
    """1 ms a sample, but -1 s at every batch other than 1 and 64 (what the load tries)."""

    name: ClassVar[str] = "below"
    params = ()

    def time_s(self, batch: Any) -> Any:
        b = np.asarray(batch, dtype=float)
        return np.where((b == 1) | (b == 64), 0.001 * b, -1.0)


class Negative(Below):
    name: ClassVar[str] = "negative"

    def time_s(self, batch: Any) -> Any:
        return np.full(np.shape(batch), -1.0)


class NanNet(NetworkModel):
    name: ClassVar[str] = "nan-net"
    params = ()

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        return float("nan")


def scenario(**second: Any) -> Any:
    own = {} if "cost" in second else {"per_sample_s": 0.001}
    workers = [{"name": "w0", "per_sample_s": 0.001}, {"name": "w1", **own, **second}]
    return scenario_dict(workers, global_batch=64, steps_per_epoch=50, epochs=2)


@pytest.mark.parametrize("engine", [VectorEngine(), SimPyEngine()])
def test_a_draw_of_nan_is_refused_naming_the_worker_not_run_forever(engine):
    s = build_scenario(scenario(delay=RareNan()))
    with pytest.raises(ConfigError, match=r"^delay: worker w1 drew nan: a delay must be a finite number >= 0"):
        simulate(s, Equal(), engine=engine)
    with pytest.raises(ConfigError, match=r"^delay: worker w1 drew nan"):
        simulate(s, Async(), engine=engine)


def test_a_cost_below_zero_is_refused_where_the_scenario_loads():
    with pytest.raises(ConfigError, match=r"^workers\.1\.cost: gives -1\.0 s at batch 1: a time must be"):
        build_scenario(scenario(cost=Negative()))


@pytest.mark.parametrize("engine", [VectorEngine(), SimPyEngine()])
@pytest.mark.parametrize("policy", [Equal(), Async()])
def test_a_cost_below_zero_is_refused_where_a_split_meets_it(engine, policy):
    s = build_scenario(scenario(cost=Below()))  # fine at 1 and 64: the load's tries
    with pytest.raises(ConfigError, match=r"^cost: worker w1's cost gave -1\.0 s at batch 32: a time must be"):
        simulate(s, policy, engine=engine)


def test_a_network_time_of_nan_is_refused_naming_the_network():
    with pytest.raises(ConfigError, match=r"^network: nan-net's allreduce_s gave nan s: a time must be"):
        build_scenario({**scenario(), "network": NanNet()})


@pytest.mark.slow  # a subprocess: out of make test-fast
def test_the_command_line_says_it_in_one_line(tmp_path: Path):
    plugin = tmp_path / "rare.py"
    plugin.write_text(
        "import numpy as np\nfrom hetsim.core.registry import DISTRIBUTIONS\n"
        "from hetsim.model.distributions import Distribution\n\n@DISTRIBUTIONS.register\n"
        "class RareNan(Distribution):\n    name = 'rare-nan'\n    params = ()\n"
        "    def ppf(self, u):\n        return np.where(np.asarray(u) > 0.9, np.nan, 0.01)\n"
        "    def mean(self):\n        return 0.01\n    def var(self):\n        return 0.0\n"
    )
    argv = [sys.executable, "-m", "hetsim", "simulate", "paper", "--policy", "equal", "--set",
            "workers.1.delay={dist='rare-nan'}"]  # fmt: skip
    done = subprocess.run(
        argv, env={**os.environ, PLUGINS_ENV: str(plugin)}, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("hetsim: error: delay: worker ") and done.stderr.count("\n") == 1


def test_a_sweep_cell_that_meets_one_says_which_cell():
    from hetsim.sweep.run import expand, replication_seeds, run_cell
    from hetsim.sweep.spec import load_sweep

    grid = {"workers.0.per_sample_s": [0.001, 0.002]}  # both cells give w1 32 samples, where Below is -1 s
    spec = load_sweep({"base": scenario(cost=Below()), "policies": ["equal"], "grid": grid, "seed": 3})
    with pytest.raises(ConfigError) as refused:
        run_cell(spec, expand(spec)[1])
    seed = replication_seeds(spec)[0]
    assert str(refused.value) == (
        "cost: worker w1's cost gave -1.0 s at batch 32: a time must be a finite number >= 0 "
        f"(cell 1: policy equal, workers.0.per_sample_s=0.002, seed {seed})"
    )


def test_an_async_exchange_of_nan_is_refused_naming_the_network():
    class NanLink(NanNet):  # a sound all-reduce, a shared link of nan
        name: ClassVar[str] = "nan-link"

        def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
            return 0.01

        def update_link_s(self, gradient_mb: float) -> float | None:
            return float("nan")

    for network, method in ((NanLink(), "update_link_s"), (NanNet(), "allreduce_s")):
        with pytest.raises(ConfigError, match=rf"^network: nan-\w+'s {method} gave nan s"):
            network.exchange_s(10.0)
