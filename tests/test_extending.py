"""Extending hetsim: a policy and a distribution defined here, outside the package, registered
through the public hook, work through every command with no other edit (docs/guide/extending.md;
its example files, run as a user runs them: tests/test_extending_examples.py). Plug-ins built
directly with a bad parameter raise the config's error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import tomli_w

from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.core.params import Param, file_path
from hetsim.core.registry import COSTS, DISTRIBUTIONS, ENGINES, NETWORKS, PLUGINS_ENV, POLICIES
from hetsim.engines import Engine, SimPyEngine, VectorEngine
from hetsim.model.costs import CostModel
from hetsim.model.distributions import Distribution
from hetsim.model.network import NetworkModel
from hetsim.model.partition import split_by_shares
from hetsim.model.trace import Trace
from hetsim.policies import Policy, fresh
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict


class FixedShare(Policy):
    """Gives the first worker a fixed share of the batch and splits the rest evenly."""

    name = "fixed-share"
    params = (Param("first", default=0.5, low=0.0, high=1.0, doc="the first worker's share"),)
    first: float

    def initial_split(self) -> tuple[int, ...]:
        rest = (1.0 - self.first) / (self.n_workers - 1)
        return split_by_shares([self.first] + [rest] * (self.n_workers - 1), self.global_batch, self.caps)


class TwoPoint(Distribution):
    """``slow_s`` with probability ``p_slow``, else ``fast_s``: a discrete delay."""

    name: ClassVar[str] = "two-point"
    params = (
        Param("fast_s", low=0.0),
        Param("slow_s", low="fast_s", low_open=True),
        Param("p_slow", low=0.0, high=1.0),
    )
    fast_s: float
    slow_s: float
    p_slow: float

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.where(u >= 1.0 - self.p_slow, self.slow_s, self.fast_s)

    def mean(self) -> float:
        return self.fast_s + self.p_slow * (self.slow_s - self.fast_s)

    def var(self) -> float:
        return self.p_slow * (1 - self.p_slow) * (self.slow_s - self.fast_s) ** 2

    def cdf(self, t: Any) -> Any:
        t = np.asarray(t, dtype=float)
        return np.where(t >= self.slow_s, 1.0, np.where(t >= self.fast_s, 1.0 - self.p_slow, 0.0))

    def atoms(self) -> np.ndarray:
        return np.array([self.fast_s, self.slow_s])


@pytest.fixture
def registered() -> Iterator[None]:
    POLICIES.register(FixedShare)
    DISTRIBUTIONS.register(TwoPoint)
    yield
    POLICIES.unregister(FixedShare.name)
    DISTRIBUTIONS.unregister(TwoPoint.name)


TWO_WORKERS = scenario_dict(
    [{"per_sample_s": 0.001}, {"per_sample_s": 0.003}], global_batch=100, network={"kind": "constant", "time_s": 0.002}
)


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_new_policy_runs_through_simulate_analyze_sweep_and_the_plots(registered, tmp_path, capsys):
    scenario = write(tmp_path / "two.toml", {**TWO_WORKERS, "policy": {"name": "fixed-share", "first": 0.75}})
    assert main(["simulate", str(scenario), "--policy", "equal,fixed-share", "--json"]) == 0
    equal, mine = json.loads(capsys.readouterr().out)
    assert equal["mean_step_s"] == pytest.approx(0.15 + 0.002, rel=1e-12)  # 50 samples at 3 ms, then the exchange
    assert mine["final_batches"] == [75, 25] and mine["mean_step_s"] == pytest.approx(0.075 + 0.002, rel=1e-12)
    assert mine["speedup_vs_equal"] == pytest.approx(0.152 / 0.077, rel=1e-12)

    assert main(["analyze", str(scenario), "--policy", "equal,fixed-share"]) == 0
    out = capsys.readouterr().out
    assert "fixed-share: no closed form because it does not declare a closed form (Policy.closed_form)" in out

    sweep = write(
        tmp_path / "sweep.toml",
        {"name": "mine", "base": "two.toml", "policies": ["equal", "fixed-share"], "grid": {"workload.epochs": [2]}},
    )
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 2 | 1.000 | 1.974 |" in out  # the speedup table: 0.152 / 0.077 to three places
    (run,) = (tmp_path / "runs").iterdir()
    plots = sorted(p.name for p in (run / "plots").iterdir())
    assert {"gantt.png", "split.png", "step_cdf.png", "utilization.png"} <= set(plots)
    assert all((run / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)


def test_a_new_policy_checks_its_parameters_like_the_builtins(registered, tmp_path, capsys):
    with pytest.raises(ConfigError) as direct:
        FixedShare(first=2.0)
    assert str(direct.value) == "first: must be in [0, 1], got 2"
    scenario = write(tmp_path / "two.toml", {**TWO_WORKERS, "policy": {"name": "fixed-share", "first": 2.0}})
    assert main(["simulate", str(scenario), "--policy", "fixed-share"]) == 2
    assert capsys.readouterr().err == "hetsim: error: policy.first: must be in [0, 1], got 2\n"


@pytest.mark.slow
def test_a_new_distribution_runs_through_simulate_analyze_sweep_and_the_plots(registered, tmp_path, capsys):
    delay = {"dist": "two-point", "fast_s": 0.0, "slow_s": 0.1, "p_slow": 0.5}
    workers = [{"per_sample_s": 0.001, "delay": delay, "count": 2}]
    scenario = write(tmp_path / "delays.toml", scenario_dict(workers, global_batch=100, steps_per_epoch=200, epochs=2))
    assert main(["simulate", str(scenario), "--policy", "equal", "--json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    delay_part = summary["mean_step_s"] - 0.05  # the larger delay: 0.1 s unless both are fast (p = 0.25)
    assert abs(delay_part - 0.075) < 0.0065  # 400 steps: within 3 standard errors of 0.0022 s

    assert main(["analyze", str(scenario), "--policy", "equal", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    # 50 samples at 1 ms, plus the larger of two independent delays: 0.1 s unless both are fast.
    assert row["predicted_step_s"] == pytest.approx(0.05 + 0.1 * 0.75, rel=1e-12)
    assert row["inside"] is True and row["ci_low_s"] < row["simulated_step_s"] < row["ci_high_s"]
    loaded = load_scenario(str(scenario))
    assert loaded.workers[0].delay == TwoPoint(0.0, 0.1, 0.5)
    assert load_scenario(loaded.to_dict()) == loaded

    sweep = write(tmp_path / "sweep.toml", {"name": "delays", "base": "delays.toml", "policies": ["equal", "dynamic"],
                                            "grid": {"workers.0.delay.p_slow": [0.5]}})  # fmt: skip
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    assert "| 0.5 | 1.000 |" in capsys.readouterr().out
    (run,) = (tmp_path / "runs").iterdir()
    assert {"gantt.png", "split.png", "step_cdf.png", "utilization.png"} <= {p.name for p in (run / "plots").iterdir()}

    bad = write(tmp_path / "bad.toml", scenario_dict([{"per_sample_s": 0.001, "delay": {**delay, "slow_s": 0.0}}]))
    assert main(["simulate", str(bad)]) == 2
    assert capsys.readouterr().err == "hetsim: error: workers.0.delay.slow_s: must be > 0, got 0\n"


@pytest.mark.slow
def test_a_plugin_file_named_in_the_environment_reaches_the_command_line(tmp_path):
    plugin = tmp_path / "my_policies.py"
    plugin.write_text(
        "from hetsim.policies import Policy\nfrom hetsim.core.registry import POLICIES\n\n\n"
        "@POLICIES.register\nclass AllOnFirst(Policy):\n    name = 'all-on-first'\n\n"
        "    def initial_split(self):\n        return (self.global_batch,) + (0,) * (self.n_workers - 1)\n",
        encoding="utf-8",
    )
    env = {**os.environ, PLUGINS_ENV: str(plugin)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hetsim",
            "simulate",
            "paper",
            "--policy",
            "all-on-first",
            "--json",
            "--set",
            "workload.epochs=1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (summary,) = json.loads(done.stdout)
    assert summary["final_batches"][0] == load_scenario("paper").workload.global_batch
    broken = {**os.environ, PLUGINS_ENV: str(tmp_path / "missing.py")}
    done = subprocess.run(
        [sys.executable, "-m", "hetsim", "simulate", "paper"], env=broken, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and f"{PLUGINS_ENV}: cannot import" in done.stderr


# Every built-in plug-in kind: a bad parameter raises, when the class is built directly, exactly
# the problem the config factory reports at the field's path.
BAD = [
    (DISTRIBUTIONS, "uniform", {"low": 0.5, "high": 0.1}, "workers.0.noise", "high: must be > 0.5, got 0.1"),
    (DISTRIBUTIONS, "exponential", {"mean": -1.0}, "workers.0.delay", "mean: must be > 0, got -1"),
    (DISTRIBUTIONS, "gamma", {"shape": 2.0}, "workers.0.delay", "scale: missing (required)"),
    (
        DISTRIBUTIONS,
        "empirical",
        {"samples": [0.1, -0.2]},
        "workers.0.delay",
        "samples: value 1 must be a non-negative number, got -0.2",
    ),
    (DISTRIBUTIONS, "constant", {"value": 1.0, "foo": 2}, "workers.0.delay", "foo: unknown parameter (known: value)"),
    (NETWORKS, "ring", {"bandwidth_gbps": 0.0}, "network", "bandwidth_gbps: must be > 0, got 0"),
    (COSTS, "hinge", {"floor_s": -1.0, "per_sample_s": 1.0}, "workers.0.cost", "floor_s: must be >= 0, got -1"),
    (NETWORKS, "constant", {"time_s": "fast"}, "network", "time_s: must be a number, got a string ('fast')"),
    (POLICIES, "adaptive", {"forgetting": 1.5}, "policy", "forgetting: must be in (0, 1], got 1.5"),
    (POLICIES, "backup", {"backups": -1}, "policy", "backups: must be >= 0, got -1"),
    (POLICIES, "equal", {"speed": 2}, "policy", "speed: unknown parameter (known: none)"),
]


@pytest.mark.parametrize(("registry", "name", "params", "path", "problem"), BAD, ids=[b[1] for b in BAD])
def test_building_a_plugin_directly_raises_the_configs_error(registry, name, params, path, problem):
    with pytest.raises(ConfigError) as direct:
        registry[name](**params)
    assert str(direct.value) == problem
    key = {"workers.0.noise": "noise", "workers.0.delay": "delay"}.get(path)
    worker = {"per_sample_s": 0.001, **({key: {"dist": name, **params}} if key else {})}
    raw = scenario_dict([worker, {"per_sample_s": 0.002}])
    if path == "network":
        raw["network"] = {"kind": name, **params}
    if path == "policy":
        raw["policy"] = {"name": name, **params}
    if path == "workers.0.cost":
        raw["workers"][0] = {"cost": {"model": name, **params}}
    with pytest.raises(ConfigError) as configured:
        from hetsim.run.simulate import simulate

        simulate(load_scenario(raw), engine=SimPyEngine())
    if path == "policy" and "unknown parameter" in problem:  # a scenario's [policy] says which policy it checked
        problem = (
            f"speed: not a parameter of the scenario's policy {name!r} (its parameters: none); for another "
            "policy's, set policy.name too"
        )
    assert str(configured.value) == f"{path}.{problem}"


class TwoLevel(NetworkModel):
    """A fixed intra-node exchange plus one inter-node hop: a toy hierarchy."""

    name: ClassVar[str] = "two-level"
    params = (Param("intra_s", low=0.0), Param("inter_s", low=0.0))
    intra_s: float
    inter_s: float

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        return 0.0 if n_workers <= 1 else self.intra_s + self.inter_s


class Replay(Engine):
    """Runs the SimPy engine, then checks the vector engine gives the same trace."""

    name = "replay"

    @classmethod
    def supports(cls, policy: Policy) -> bool:
        return policy.synchronous

    def run(self, scenario: Any, policy: Policy, seed: int | None = None) -> Trace:
        trace = SimPyEngine().run(scenario, policy, seed)
        again = VectorEngine().run(scenario, fresh(policy), seed)  # a copy: the first run used this one
        assert trace == again
        return trace


def test_a_new_network_model_and_a_new_engine_work_from_files_and_the_command_line(tmp_path, capsys):
    NETWORKS.register(TwoLevel)
    ENGINES.register(Replay)
    try:
        raw = {**TWO_WORKERS, "network": {"kind": "two-level", "intra_s": 0.001, "inter_s": 0.004}}
        scenario = write(tmp_path / "net.toml", raw)
        assert main(["simulate", str(scenario), "--policy", "equal", "--engine", "replay", "--json"]) == 0
        (summary,) = json.loads(capsys.readouterr().out)
        assert summary["mean_step_s"] == pytest.approx(0.15 + 0.005, rel=1e-12)
        assert main(["simulate", str(scenario), "--policy", "async", "--engine", "replay"]) == 2
        assert capsys.readouterr().err == (
            "hetsim: error: engine: the replay engine does not run 'async': "
            "use another (auto picks one: --engine auto, engine=None)\n"
        )
        with pytest.raises(ConfigError, match="inter_s: must be >= 0"):
            TwoLevel(0.0, -1.0)
    finally:
        NETWORKS.unregister(TwoLevel.name)
        ENGINES.unregister(Replay.name)


class Quadratic(CostModel):
    """``overhead_s + coef * b^2``: a toy superlinear cost."""

    name: ClassVar[str] = "quadratic"
    params = (Param("overhead_s", default=0.0, low=0.0), Param("coef", low=0.0, low_open=True))
    overhead_s: float
    coef: float

    def time_s(self, batch: Any) -> Any:
        return self.overhead_s + self.coef * np.asarray(batch, dtype=float) ** 2

    def batch_within(self, time_s: float) -> float:
        return float(np.sqrt(max(time_s - self.overhead_s, 0.0) / self.coef))


def test_a_new_cost_model_works_from_a_scenario_file_through_every_policy_and_analysis(tmp_path, capsys):
    COSTS.register(Quadratic)
    try:
        workers = [{"cost": {"model": "quadratic", "coef": 1e-5}}, {"cost": {"model": "quadratic", "coef": 4e-5}}]
        scenario = write(tmp_path / "q.toml", scenario_dict(workers, global_batch=90))
        assert main(["analyze", str(scenario), "--policy", "optimal,dynamic", "--json"]) == 0
        optimal, dynamic = json.loads(capsys.readouterr().out)
        # Equal times: 1e-5 b0^2 = 4e-5 b1^2, so b0 = 2 b1: 60 and 30 samples, 36 ms each.
        assert optimal["prediction"]["final_batches"] == [60, 30]
        assert optimal["predicted_step_s"] == pytest.approx(0.036, rel=1e-12) == optimal["simulated_step_s"]
        assert dynamic["prediction"]["fixed_point_shares"] == pytest.approx([2 / 3, 1 / 3], rel=1e-9)
        with pytest.raises(ConfigError, match="coef: must be > 0"):
            Quadratic(coef=0.0)
    finally:
        COSTS.unregister(Quadratic.name)


def test_engines_are_plugins_too():
    assert {"simpy", "vector"} <= set(ENGINES)
    with pytest.raises(ConfigError, match="speed: unknown parameter"):
        ENGINES["vector"](speed=2)


class Recorded(Distribution):
    """A plug-in that reads a file: a constant whose value is the file's one number."""

    name: ClassVar[str] = "recorded"
    params = (Param("file", "path"),)
    file: str

    def validate(self) -> None:
        object.__setattr__(self, "_value", float(file_path(self.file).read_text()))

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.full(np.shape(u), self._value)

    def mean(self) -> float:
        return self._value

    def var(self) -> float:
        return 0.0


def test_a_plugins_file_is_written_where_it_was_read(tmp_path, monkeypatch):
    # a record of the scenario (plan.json, summary.json) lies in another folder: it named the
    # file as written, relative to the scenario's folder, and did not load there
    DISTRIBUTIONS.register(Recorded)
    try:
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "delay.txt").write_text("0.25")
        raw = {**TWO_WORKERS, "workers": [{"per_sample_s": 0.001, "delay": {"dist": "recorded", "file": "delay.txt"}},
                                          {"per_sample_s": 0.003}]}  # fmt: skip
        scenario = load_scenario(write(tmp_path / "sub" / "s.toml", raw))
        assert scenario.to_dict()["workers"][0]["delay"] == {
            "dist": "recorded",
            "file": str(tmp_path / "sub" / "delay.txt"),
        }
        monkeypatch.chdir(tmp_path)
        assert load_scenario(scenario.to_dict()) == scenario and scenario.workers[0].delay.mean() == 0.25
        # the plug-in's own open failing is named at its field, as the built-in empirical's (was no field)
        raw["workers"][0]["delay"]["file"] = "nope.txt"
        with pytest.raises(ConfigError) as refused:
            load_scenario(write(tmp_path / "sub" / "s.toml", raw))
        assert str(refused.value) == f"workers.0.delay.file: no such file: {tmp_path / 'sub' / 'nope.txt'}"
        (tmp_path / "sub" / "bad.txt").write_text("abc")  # its content is the plug-in's to judge: kept as raised
        raw["workers"][0]["delay"]["file"] = "bad.txt"
        with pytest.raises(ValueError, match="could not convert string to float"):
            load_scenario(write(tmp_path / "sub" / "s.toml", raw))
    finally:
        DISTRIBUTIONS.unregister(Recorded.name)
