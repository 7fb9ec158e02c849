"""Scenario loading: built-ins, files, overrides, round trips and every kind of bad input."""

from __future__ import annotations

import json

import pytest
import tomli_w

from hetsim.core.errors import ConfigError
from hetsim.model.distributions import Constant, Empirical, LogNormal
from hetsim.model.network import ConstantNetwork, ParameterServer, Ring
from hetsim.scenario.config import build_scenario, builtin_names, load_scenario
from tests.helpers import scenario_dict


def test_builtins_load_and_paper_is_the_reference_set_up():
    assert {"paper", "workstation"} <= set(builtin_names())
    paper = load_scenario("paper")
    assert paper.n_workers == 2 and paper.workload.global_batch == 256
    a, b = paper.workers
    assert a.cost == b.cost
    assert a.delay == Constant(0.0) and b.delay == Constant(0.1)
    ws = load_scenario("workstation")
    assert ws.n_workers == 4 and len({w.cost for w in ws.workers}) == 2


@pytest.mark.parametrize("name", ["paper", "workstation"])
def test_to_dict_round_trips_through_toml_and_json(name, tmp_path):
    s = load_scenario(name)
    (tmp_path / "s.toml").write_text(tomli_w.dumps(s.to_dict()))
    (tmp_path / "s.json").write_text(json.dumps(s.to_dict()))
    assert load_scenario(tmp_path / "s.toml") == s
    assert load_scenario(str(tmp_path / "s.json")) == s


def test_groups_expand_in_order_with_names():
    s = build_scenario(
        scenario_dict([{"name": "f", "count": 3, "per_sample_s": 1e-3}, {"name": "s", "per_sample_s": 2e-3}])
    )
    assert [w.name for w in s.workers] == ["f#0", "f#1", "f#2", "s"]
    assert [w.cost.per_sample_s for w in s.workers] == [1e-3] * 3 + [2e-3]


def test_overrides_with_list_indices_inline_tables_and_bare_strings():
    s = load_scenario(
        "workstation",
        [
            "workers.1.per_sample_s=0.004",
            "workers.0.noise={dist='lognormal', sigma=0.2}",
            "policy.name=equal",
            "network={kind='constant', time_s=0.5}",
            "seed=7",
        ],
    )
    assert s.groups[1].spec.cost.per_sample_s == 0.004
    assert s.groups[0].spec.noise == LogNormal(0.2)
    assert s.policy.name == "equal" and s.seed == 7
    assert s.network == ConstantNetwork(0.5)


def test_network_models():
    assert Ring(1e-5, 100).allreduce_s(4, 100.0) == pytest.approx(6 * 1e-5 + 1.5 * 100e6 / 12.5e9)
    assert ParameterServer(1e-5, 80).allreduce_s(4, 10.0) == pytest.approx(2e-5 + 8 * 10e6 / 10e9)
    assert Ring(1e-5, 100).allreduce_s(1, 100.0) == 0.0
    assert ConstantNetwork(0.3).allreduce_s(3, 1.0) == 0.3


def test_empirical_from_a_file_relative_to_the_scenario(tmp_path):
    (tmp_path / "delays.csv").write_text("# measured\n0.1\n0.2\n0.3\n")
    raw = scenario_dict([{"per_sample_s": 1e-3, "delay": {"dist": "empirical", "file": "delays.csv"}}])
    (tmp_path / "s.json").write_text(json.dumps(raw))
    delay = load_scenario(tmp_path / "s.json").workers[0].delay
    assert isinstance(delay, Empirical) and delay.mean() == pytest.approx(0.2)
    assert delay.to_dict() == {"dist": "empirical", "file": str((tmp_path / "delays.csv").resolve())}  # loads anywhere


BAD = [
    (["workers.0.per_sample_s=-0.1"], "workers.0.per_sample_s", "must be > 0"),
    (["workers.1.overhead_s=-1"], "workers.1.overhead_s", "must be >= 0"),
    (["workers.0.delay={dist='constant', value=-0.5}"], "workers.0.delay.value", "must be >= 0"),
    (["workload.global_batch=3"], "workload.global_batch", "smaller than the number of workers"),
    (["workers.0.max_batch=10", "workers.1.max_batch=10"], "workers.max_batch", "caps hold at most 40"),
    (["workers.0.speed=3"], "workers.0.speed", "unknown key"),
    (["workload.epochs='ten'"], "workload.epochs", "must be an integer"),
    (["workload.epochs=2.5"], "workload.epochs", "must be an integer"),
    (["workers.0.per_sample_s=true"], "workers.0.per_sample_s", "must be a number"),
    (["workers.5.per_sample_s=0.1"], "workers.5", "no entry '5'"),
    (["workers.0.noise={dist='weibull'}"], "workers.0.noise.dist", "unknown distribution"),
    (["workers.0.noise={dist='gamma', shape=2, scale=1}"], "workers.0.noise", "mean 1"),
    (["network.kind=mesh"], "network.kind", "unknown network"),
    (["workload.dataset_size=100"], "workload.dataset_size", "no step per epoch"),
    (["seed.x=1"], "seed.x", "is a value"),
    (["oops"], "--set", "expected PATH=VALUE"),
]


@pytest.mark.parametrize("overrides,field,problem", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_input_names_the_field(overrides, field, problem):
    with pytest.raises(ConfigError) as err:
        load_scenario("workstation", overrides)
    assert err.value.field == field
    assert problem in err.value.problem
    assert "\n" not in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="neither a file nor a built-in"):
        load_scenario(str(tmp_path / "nope.toml"))
    (tmp_path / "bad.toml").write_text("[workload\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_scenario(tmp_path / "bad.toml")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a table"):
        load_scenario(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="workers: must be a non-empty list"):
        build_scenario({**scenario_dict([]), "workers": []})
    with pytest.raises(ConfigError, match="workload.global_batch: missing"):
        build_scenario({"workers": [{"per_sample_s": 1.0}], "workload": {"dataset_size": 10, "epochs": 1}})
