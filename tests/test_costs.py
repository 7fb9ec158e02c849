"""Cost models: exact values, inverses, the shipped device profiles, scenario files that use
them, and the one-line errors of bad curves."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.engines import VectorEngine
from hetsim.model.costs import Affine, Hinge, Profile, Table, device_profiles
from hetsim.policies import Equal, Optimal
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict

GAVEL_V100_RESNET18 = {16: 32.3534, 32: 29.9472, 64: 24.0932, 128: 17.9949, 256: 10.3003}  # steps/s


def test_each_model_gives_its_formula():
    assert Affine(0.01, 0.002).time_s(10) == pytest.approx(0.03)
    assert Hinge(0.05, 0.01, 0.002).time_s([1, 20, 25, 30]).tolist() == pytest.approx([0.05, 0.05, 0.06, 0.07])
    # a line steeper than proportional: its intercept below 0, the floor holding the small batches
    steep = Hinge(0.02, -0.02, 0.002)
    assert steep.time_s([1, 10, 20, 30]).tolist() == pytest.approx([0.02, 0.02, 0.02, 0.04])
    assert steep.batch_within(0.04) == pytest.approx(30) and steep.batch_within(0.01) == 0
    table = Table(points=[[4, 0.01], [8, 0.01], [16, 0.03]])
    # flat below the first point, linear between points, the last slope beyond the last
    assert table.time_s([1, 4, 6, 12, 16, 20]).tolist() == pytest.approx([0.01, 0.01, 0.01, 0.02, 0.03, 0.04])


@pytest.mark.slow
@pytest.mark.parametrize(
    "model",
    [Affine(0.01, 0.002), Hinge(0.05, 0.01, 0.002), Table(points=[[4, 0.01], [8, 0.01], [16, 0.03]]),
     Profile("k80", "ResNet-18")],
    ids=lambda m: m.name,
)  # fmt: skip
@given(t=st.floats(0.0, 2.0))
def test_batch_within_is_the_largest_batch_whose_time_fits(model, t):
    b = model.batch_within(t)
    if b == 0:
        assert float(model.time_s(1e-9 if model.name == "affine" else 1.0)) > t or t < float(model.time_s(1.0))
        return
    assert float(model.time_s(b)) <= t * (1 + 1e-9) + 1e-15
    assert float(model.time_s(b * 1.001 + 1e-6)) > t or np.isinf(b)


def test_a_profile_is_the_measured_curve_and_caps_the_worker():
    v100 = Profile("v100", "ResNet-18")
    for b, steps_per_s in GAVEL_V100_RESNET18.items():
        assert float(v100.time_s(b)) == pytest.approx(1 / steps_per_s, rel=1e-12)  # monotone: kept as measured
    k80 = Profile("k80", "ResNet-18")  # measured faster at 32 than at 16: the non-decreasing fit pools them
    times = k80.time_s(np.array([16, 32, 64, 128, 256]))
    assert (np.diff(times) >= 0).all() and times[0] == pytest.approx(np.mean([1 / 4.79529, 1 / 7.17582, 1 / 7.05208]))
    assert {d for d, _ in device_profiles()} == {"k80", "p100", "v100"}
    s = load_scenario(scenario_dict([{"cost": {"model": "profile", "device": "p100", "workload": "ResNet-50"}}],
                                    global_batch=64))  # fmt: skip
    assert s.workers[0].max_batch == 128  # the largest batch measured on that card


def test_a_deterministic_step_on_hinge_and_table_workers_is_the_hand_computed_one():
    workers = [
        {"cost": {"model": "hinge", "floor_s": 0.05, "overhead_s": 0.0, "per_sample_s": 0.001}},
        {"cost": {"model": "table", "points": [[10, 0.02], [100, 0.2]]}},
    ]
    s = load_scenario(scenario_dict(workers, global_batch=120, network={"kind": "constant", "time_s": 0.003}))
    equal = summarize(simulate(s, Equal()))
    assert equal.mean_step_s == pytest.approx(max(0.06, 0.02 + 50 * 0.18 / 90) + 0.003, rel=1e-12)
    optimal = summarize(simulate(s, Optimal()))
    # The optimum of max(max(0.05, 0.001 b), t(120 - b)): the hinge takes 78, where 0.078 and t(42) = 0.084 meet best.
    best = min(max(max(0.05, 0.001 * b), 0.02 + (120 - b - 10) * 0.002) for b in range(0, 121))
    assert optimal.mean_step_s == pytest.approx(best + 0.003, rel=1e-12)
    assert summarize(simulate(s, Optimal(), engine=VectorEngine())) == optimal


def test_a_table_file_is_read_from_the_scenario_folder_and_written_where_it_was_read(tmp_path, monkeypatch):
    (tmp_path / "curve.csv").write_text("# batch,seconds\n8,0.01\n64,0.05\n", encoding="utf-8")
    raw = scenario_dict([{"cost": {"model": "table", "file": "curve.csv"}, "count": 2}], global_batch=64)
    scenario = tmp_path / "s.toml"
    import tomli_w

    scenario.write_text(tomli_w.dumps(raw), encoding="utf-8")
    s = load_scenario(str(scenario))
    assert float(s.workers[0].cost.time_s(32)) == pytest.approx(0.01 + 24 * 0.04 / 56)
    # written as read: a record of the scenario (plan.json, summary.json) loads from any folder
    assert s.to_dict()["workers"][0]["cost"] == {"model": "table", "file": str((tmp_path / "curve.csv").resolve())}
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert load_scenario(s.to_dict()) == s


BAD = [
    ({"cost": {"model": "table", "points": [[16, 0.03]]}}, "workers.0.cost.points: needs at least two points, got 1"),
    ({"cost": {"model": "table", "points": [[16, 0.05], [32, 0.03]]}},
     "workers.0.cost.points: times must not decrease as the batch grows, got [0.05, 0.03]"),
    ({"cost": {"model": "table", "points": [[32, 0.03], [16, 0.05]]}},
     "workers.0.cost.points: batch sizes must be positive and increasing, got [32.0, 16.0]"),
    ({"cost": {"model": "table"}}, "workers.0.cost: a table needs exactly one of 'points' or 'file'"),
    ({"cost": {"model": "table", "points": [[1, 0.0], [2, 0.0]]}},
     "workers.0.cost.points: a step with samples must take some time, got 0 s at 1"),
    ({"cost": {"model": "table", "file": "missing.csv"}}, "workers.0.cost.file: no such file: missing.csv"),
    ({"cost": {"model": "table", "file": "/tmp"}}, "workers.0.cost.file: a folder, not a file: /tmp"),
    ({"cost": {"model": "profile", "device": "h100", "workload": "ResNet-18"}},
     "workers.0.cost.device: unknown device 'h100' (known: k80, p100, v100)"),
    ({"cost": {"model": "profile", "device": "v100", "workload": "BERT"}},
     "workers.0.cost.workload: no profile of 'BERT' on v100 (known: LM, Recommendation, ResNet-18, ResNet-50, "
     "Transformer)"),
    ({"cost": {"model": "quadratic"}},
     "workers.0.cost.model: unknown cost model 'quadratic' (known: affine, hinge, table, profile)"),
    ({"cost": {"model": "hinge", "floor_s": 0.0, "overhead_s": -0.01, "per_sample_s": 0.001}},
     "workers.0.cost.floor_s: must be > 0 where overhead_s is below 0 (-0.01), got 0"),
    ({"cost": {"model": "hinge", "floor_s": 0.1, "per_sample_s": 0.0}},
     "workers.0.cost.per_sample_s: must be > 0, got 0"),
    ({"cost": {"model": "affine", "per_sample_s": 0.1}, "overhead_s": 0.1},
     "workers.0.overhead_s: give either a cost table or overhead_s/per_sample_s (with --set, replace the whole "
     "entry: workers.0={...})"),
    ({}, "workers.0.per_sample_s: missing (required)"),
]  # fmt: skip


@pytest.mark.parametrize(("worker", "message"), BAD)
def test_bad_cost_curves_get_one_line_naming_the_field(worker, message):
    with pytest.raises(ConfigError) as err:
        load_scenario(scenario_dict([worker], global_batch=8))
    assert str(err.value) == message and "\n" not in message


def test_costs_of_inf_cap_workers_are_finite_everywhere():
    assert math.isfinite(float(Table(points=[[1, 0.01], [2, 0.01]]).time_s(10**6)))
    assert Table(points=[[1, 0.01], [2, 0.01]]).batch_within(0.02) == math.inf  # flat: never exceeds


def test_the_costs_command_prints_each_workers_expected_time(capsys):
    assert main(["costs", "mixed-gpus", "--batch", "16,256", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["worker"], r["name"], r["batch"]) for r in rows[:2]] == [(0, "v100#0", 16), (0, "v100#0", 256)]
    assert rows[0]["compute_s"] == pytest.approx(1 / GAVEL_V100_RESNET18[16], rel=1e-12)  # noise has mean 1
    assert rows[1]["compute_s"] == pytest.approx(1 / GAVEL_V100_RESNET18[256], rel=1e-12)
    assert [(r["extrapolated"], r["beyond_max_batch"]) for r in rows if r["batch"] == 16] == [(None, False)] * 6
    assert main(["costs", "mixed-gpus", "--batch", "8,256,512", "--set", "workers.0.max_batch=512", "--json"]) == 0
    marks = {
        (r["name"], r["batch"]): (r["extrapolated"], r["beyond_max_batch"]) for r in json.loads(capsys.readouterr().out)
    }
    assert marks[("v100#0", 8)] == ("below", False)  # the first point held flat: not measured
    assert marks[("v100#0", 512)] == ("beyond", False)  # past the largest measured batch, within its max_batch
    assert marks[("k80#0", 256)] == (None, True)  # measured, but beyond the scenario's cap of 128
    assert main(["costs", "workstation", "--batch", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["extrapolated"] is None  # a formula: no measured range
    assert main(["costs", "workstation", "--batch", "16"]) == 0
    assert "22.40" in capsys.readouterr().out  # 8 ms + 16 x 0.9 ms
    assert main(["costs", "paper", "--batch", "16,zero"]) == 2
    assert capsys.readouterr().err == "hetsim: error: --batch: must be an integer, got a string ('zero')\n"


def test_the_profiles_command_lists_every_device_and_workload(capsys):
    assert main(["profiles", "--json"]) == 0
    profiles = json.loads(capsys.readouterr().out)
    assert len(profiles) == 15 and {p["device"] for p in profiles} == {"k80", "p100", "v100"}
    v100 = next(p for p in profiles if (p["device"], p["workload"]) == ("v100", "ResNet-18"))
    assert v100["batch"] == list(GAVEL_V100_RESNET18)
    assert v100["step_s"] == pytest.approx([1 / v for v in GAVEL_V100_RESNET18.values()], rel=1e-12)


def test_bends_are_where_the_slope_changes():
    assert Hinge(floor_s=0.02, overhead_s=-0.004, per_sample_s=0.001).bends() == pytest.approx((24.0,))
    assert Hinge(floor_s=0.0, overhead_s=0.01, per_sample_s=0.001).bends() == ()  # the floor never binds
    assert Table(points=((1, 0.01), (32, 0.02), (128, 0.05))).bends() == (1.0, 32.0, 128.0)
    assert Affine(overhead_s=0.01, per_sample_s=0.001).bends() == ()
