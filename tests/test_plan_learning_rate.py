"""The plan's side of time to the target for a user's own model: ``--efficiency FILE`` on the
scenario commands, plan.json's ``recommended.learning_rate`` and the trainer's reading of it
(:meth:`validation.uneven.PlanChoice.lr`), and the policies a trainer from plan.json does not
run (goodput: it changes the global batch as it trains)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsim.cli.main import main as hetsim_main
from hetsim.scenario.config import load_scenario, read_efficiency
from validation.uneven import PlanError, barrier_policy, load_plan

TABLE = "[workload.efficiency]\nnoise_scale = 64\nbase_batch = 16\ntarget_steps = 2000\nlr_scaling = 'sqrt'\nlr = 0.05"
INLINE = "workload.efficiency={noise_scale=64, base_batch=16, target_steps=2000, lr_scaling='sqrt', lr=0.05}"
REC = {"policy": "optimal", "split": [3, 5], "global_batch": 8, "workers": ["a", "b"]}


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_efficiency_from_a_file_is_the_table_written_into_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "eff.toml").write_text(TABLE, encoding="utf-8")
    table = read_efficiency(tmp_path / "eff.toml")
    assert load_scenario("paper", efficiency=table).to_dict() == load_scenario("paper", [INLINE]).to_dict()
    # --set comes after the file's table, so it can change one of its values
    tweaked = load_scenario("paper", ["workload.efficiency.noise_scale=32"], efficiency=table)
    assert tweaked.workload.efficiency is not None and tweaked.workload.efficiency.noise_scale == 32
    for command in (["show"], ["simulate", "--policy", "equal,goodput", "--json"],
                    ["analyze", "--policy", "equal,goodput", "--json"],
                    ["plan", "--policy", "equal,optimal", "--objective", "time_to_target", "--json"]):  # fmt: skip
        outputs = []
        for given in (["--efficiency", str(tmp_path / "eff.toml")], ["--set", INLINE]):
            capsys.readouterr()
            assert hetsim_main([command[0], "paper", *given, *command[1:]]) == 0
            text = capsys.readouterr().out
            outputs.append(text if command == ["show"] else _without_stamps(json.loads(text)))
        assert outputs[0] == outputs[1], command
    rate = outputs[0]["recommended"]["learning_rate"]  # the plan's: at 256, the rate set at 16 times 4
    assert rate == {"rule": "sqrt", "base_batch": 16, "base_lr": 0.05, "factor": 4.0, "lr": 0.2, "optimizer": None}


def _without_stamps(data: object) -> object:
    """A command's JSON without what differs between two runs of it (its date and command line)."""
    if isinstance(data, dict):
        return {k: _without_stamps(v) for k, v in data.items() if k not in ("date", "command")}
    return [_without_stamps(v) for v in data] if isinstance(data, list) else data


@pytest.mark.slow  # goodput simulated: about a second
def test_a_policy_that_chooses_its_batch_says_where_it_extrapolates_and_what_runs_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """goodput ran at 826 on an efficiency fitted on 256..512, and plan judged the plan's 512: no
    word that its time to target was an extrapolation; nor that a trainer from plan.json would
    refuse it, and its learning rate was scaled to its last batch, which means nothing for it."""
    sets = ["noise_scale=2000", "base_batch=512", "target_steps=300", "fit_batches=[256,512]", "lr_scaling='sqrt'"]
    argv = ["plan", "mixed-gpus", *(a for s in sets for a in ("--set", f"workload.efficiency.{s}")),
            "--objective", "time_to_target", "--policy", "optimal,goodput", "--json"]  # fmt: skip
    assert hetsim_main(argv) == 0
    out, err = capsys.readouterr()
    rec = json.loads(out)["recommended"]
    assert rec["policy"] == "goodput" and rec["global_batch"] > 512 and rec["learning_rate"] is None
    assert rec["extrapolation"] == (f"time to target extrapolates: global batch {rec['global_batch']} is outside "
                                    "the batches the efficiency was fitted on (256..512); a batch-sweep with runs at "
                                    "or beyond it would measure it")  # fmt: skip
    assert err.strip().splitlines()[-1] == (
        "note: goodput is recommended, and its global batch changes as it trains, and a trainer from plan.json keeps "
        "the plan's: `validation run --policies goodput` runs it; --wait-for-all recommends among the policies a "
        "trainer from plan.json runs"
    )


@pytest.mark.parametrize(
    ("rate", "given", "expected"),
    [
        (None, None, 0.05),  # no rule: the trainer's own default ...
        (None, 0.3, 0.3),  # ... or the rate given
        ({"rule": "sqrt", "base_batch": 2, "factor": 2.0, "base_lr": 0.1, "lr": 0.2}, None, 0.2),  # the table's
        ({"rule": "sqrt", "base_batch": 2, "factor": 2.0, "base_lr": 0.1, "lr": 0.2}, 0.3, 0.6),  # the one given
        ({"rule": "sqrt", "base_batch": 2, "factor": 2.0, "base_lr": 0.1, "lr": 0.2, "optimizer": "sgd"}, None, 0.2),
        ({"rule": "linear", "base_batch": 2, "factor": 4.0, "base_lr": None}, 0.3, 1.2),
        ({"rule": "none", "base_batch": 2, "factor": 1.0}, 0.3, 0.3),
    ],
)
def test_the_trainer_runs_the_plans_rate(rate: object, given: float | None, expected: float, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"recommended": {**REC, "learning_rate": rate}}), encoding="utf-8")
    assert load_plan(plan, 2).lr(given, 0.05) == pytest.approx(expected)
    warned = load_plan(plan, 2).lr_warning(given)  # only another rate than the one the efficiency was measured at
    assert (warned is not None) == (isinstance(rate, dict) and rate.get("base_lr") is not None and given is not None)
    if warned:
        assert warned == ("--lr 0.3 is not the rate the plan's efficiency was measured with (0.1 at its base batch): "
                          "the plan's time to target does not hold at this rate")  # fmt: skip
    if isinstance(rate, dict) and rate.get("base_lr"):  # its own rate, to rounding, warns of nothing
        assert load_plan(plan, 2).lr_warning(rate["base_lr"] * (1 + 1e-12)) is None


@pytest.mark.parametrize(
    ("rate", "line"),
    [
        ("sqrt", "recommended.learning_rate: must be a table (rule, base_batch, factor), got str"),
        ({"rule": "cubic", "base_batch": 2, "factor": 2},
         "recommended.learning_rate.rule: must be one of sqrt, linear, none, got 'cubic'"),
        ({"rule": "sqrt", "base_batch": -3, "factor": 2}, "recommended.learning_rate.base_batch: must be a whole "
         "number >= 1, got -3"),
        ({"rule": "sqrt", "base_batch": 2, "factor": 1e300}, "recommended.learning_rate.factor: must be the sqrt "
         "rule's 2 for global batch 8 set at 2, got 1e+300"),
        ({"rule": "sqrt", "base_batch": 2, "factor": True}, "recommended.learning_rate.factor: must be the sqrt "
         "rule's 2 for global batch 8 set at 2, got True"),
        ({"rule": "sqrt", "base_batch": 2, "factor": 2, "base_lr": -1}, "recommended.learning_rate.base_lr: must be "
         "a number > 0 or null, got -1"),
        ({"rule": "sqrt", "base_batch": 2, "factor": 2, "base_lr": 0.1, "lr": 99.0},
         "recommended.learning_rate.lr: must be base_lr times factor (0.2), got 99.0"),
        ({"rule": "sqrt", "base_batch": 2, "factor": 2, "base_lr": 0.1},
         "recommended.learning_rate.lr: must be base_lr times factor (0.2), got None"),
        ({"rule": "sqrt", "base_batch": 2, "factor": 2, "lr": 0.2},
         "recommended.learning_rate.lr: must be base_lr times factor (None), got 0.2"),
        ({"rule": "sqrt", "base_batch": 2, "factor": 2, "optimizer": "adamw"},
         "recommended.learning_rate.optimizer: must be one of sgd, adam or null, got 'adamw'"),
    ],
)  # fmt: skip
def test_a_malformed_learning_rate_is_refused_naming_its_field(rate: object, line: str, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"recommended": {**REC, "learning_rate": rate}}), encoding="utf-8")
    with pytest.raises(PlanError) as err:
        load_plan(plan, 2)
    assert str(err.value) == f"{plan}:{line}"


def test_a_plan_of_an_efficiency_measured_with_another_optimizer_is_refused(tmp_path: Path) -> None:
    """A table measured under Adam planned, and the example trained SGD at Adam's rate, scaled
    (held-out accuracy 0.84 where the SGD table's plan reached 0.97), without a word."""
    plan = tmp_path / "plan.json"
    rate = {"rule": "sqrt", "base_batch": 2, "factor": 2.0, "base_lr": 0.001, "lr": 0.002, "optimizer": "adam"}
    plan.write_text(json.dumps({"recommended": {**REC, "learning_rate": rate}}), encoding="utf-8")
    with pytest.raises(PlanError) as err:
        load_plan(plan, 2).lr(None, 0.05)
    assert str(err.value) == ("--plan: its efficiency was measured with adam, and this trainer runs sgd: its time to "
                              "target and learning rate do not hold here")  # fmt: skip
    assert load_plan(plan, 2).lr(None, 0.05, optimizer="adam") == pytest.approx(0.002)


def test_without_a_recorded_rate_the_trainer_asks_for_one(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    rate = {"rule": "sqrt", "base_batch": 2, "factor": 2.0, "base_lr": None}
    plan.write_text(json.dumps({"recommended": {**REC, "learning_rate": rate}}), encoding="utf-8")
    with pytest.raises(PlanError, match=r"^--lr: the plan's efficiency holds for a learning rate set at its base "):
        load_plan(plan, 2).lr(None, 0.05)  # not the trainer's default taken as the rate at batch 2


def test_a_policy_that_changes_the_batch_is_refused_in_one_line_by_plan_and_by_name(tmp_path: Path) -> None:
    """A goodput plan (made without --wait-for-all), or --policy goodput, crashed every rank of the
    example with a traceback: the policy had no efficiency to start from."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"recommended": {"policy": "goodput", "split": [1, 1], "global_batch": 2}}))
    with pytest.raises(PlanError) as err:
        load_plan(plan, 2)
    assert str(err.value) == (f"{plan}:recommended.policy: 'goodput' changes the global batch as it trains, and this "
                              "trainer keeps the plan's: plan with --wait-for-all (`validation run --policies goodput` "
                              "runs it)")  # fmt: skip
    with pytest.raises(PlanError) as err:
        barrier_policy("goodput")
    assert str(err.value) == ("--policy: 'goodput' changes the global batch as it trains, and this trainer keeps its "
                              "own (`validation run --policies goodput` runs it)")  # fmt: skip
