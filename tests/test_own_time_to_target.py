"""Time to the target for a user's own model: ``validation batch-sweep`` of a plug-in workload,
its fitted efficiency given to ``hetsim plan --efficiency``, and the plan's learning-rate rule
read back by the trainer's API (:meth:`validation.uneven.PlanChoice.lr`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hetsim.cli.main import main as hetsim_main
from hetsim.scenario.config import load_scenario, read_efficiency
from tests.refusals import check_refused
from validation.cli import main as validation_main
from validation.uneven import PlanError, load_plan

# A user's file: a linear classifier of two classes, and a regression (no accuracy to reach).
PLUGIN = """
import torch
from torch import nn
from validation.workloads.base import Workload

X = torch.randn(600, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] + 0.5 * X[:, 1] > 0).long()
BLOBS = Workload.from_parts("blobs", lambda: nn.Linear(4, 2), (X[:500], Y[:500]), (X[500:], Y[500:]),
                            nn.functional.cross_entropy)
LINE = Workload.from_parts("line", lambda: nn.Linear(4, 2), (X[:500], X[:500, :2]), (X[500:], X[500:, :2]),
                           nn.functional.mse_loss)
"""
TABLE = "[workload.efficiency]\nnoise_scale = 64\nbase_batch = 16\ntarget_steps = 2000\nlr_scaling = 'sqrt'\n"


@pytest.mark.slow  # 16 short runs and a fit: about 3 s
def test_a_plug_in_workload_sweeps_fits_and_plans_with_its_learning_rate_rule(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(PLUGIN, encoding="utf-8")
    spec, out = f"{tmp_path}/mine.py:BLOBS", tmp_path / "sweep"
    argv = ["batch-sweep", "--workload", spec, "--base-batch", "8", "--lr", "0.1", "--target", "0.9",
            "--batches", "1,2,4,8", "--seeds", "2", "--out", str(out)]  # fmt: skip
    assert validation_main(argv) == 0
    data = json.loads((out / "results.json").read_text())
    assert (data["workload"], data["optimizer"], data["max_steps"]) == (spec, "sgd", 3000)  # a plug-in's defaults
    for point in data["points"]:  # every run reached 0.9, each at its batch's rate by the square-root rule
        assert point["steps_to_target"] is not None
        assert point["lr"] == pytest.approx(0.1 * math.sqrt(point["batch"] / 8))
    assert hetsim_main(["calibrate-efficiency", str(out), "-o", str(tmp_path / "eff.toml")]) == 0
    table = read_efficiency(tmp_path / "eff.toml")
    assert (table["base_batch"], table["lr_scaling"]) == (8, "sqrt")
    # the plan at another global batch tells the trainer how to scale the rate set at 8
    plan = tmp_path / "plan.json"
    assert hetsim_main(["plan", "paper", "--efficiency", str(tmp_path / "eff.toml"), "--policy", "equal,optimal",
                        "--out", str(plan)]) == 0  # fmt: skip
    rec = json.loads(plan.read_text())["recommended"]
    factor = math.sqrt(rec["global_batch"] / 8)
    assert rec["learning_rate"] == {"rule": "sqrt", "base_batch": 8, "factor": pytest.approx(factor)}
    assert load_plan(plan, 2).lr(0.1) == pytest.approx(0.1 * factor)


def test_efficiency_from_a_file_is_the_table_written_into_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "eff.toml").write_text(TABLE, encoding="utf-8")
    table = read_efficiency(tmp_path / "eff.toml")
    inline = "workload.efficiency={noise_scale=64, base_batch=16, target_steps=2000, lr_scaling='sqrt'}"
    assert load_scenario("paper", efficiency=table).to_dict() == load_scenario("paper", [inline]).to_dict()
    # --set comes after the file's table, so it can change one of its values
    tweaked = load_scenario("paper", ["workload.efficiency.noise_scale=32"], efficiency=table)
    assert tweaked.workload.efficiency is not None and tweaked.workload.efficiency.noise_scale == 32
    plans = []
    for given in (["--efficiency", str(tmp_path / "eff.toml")], ["--set", inline]):
        capsys.readouterr()
        assert hetsim_main(["plan", "paper", *given, "--policy", "equal,optimal", "--objective", "time_to_target",
                            "--json"]) == 0  # fmt: skip
        plans.append({k: v for k, v in json.loads(capsys.readouterr().out).items() if k not in ("date", "command")})
    assert plans[0] == plans[1]
    assert plans[0]["recommended"]["learning_rate"] == {"rule": "sqrt", "base_batch": 16, "factor": 4.0}  # 256 / 16


@pytest.mark.slow  # goodput simulated: about a second
def test_a_policy_that_chooses_its_batch_is_said_to_extrapolate_at_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    """goodput ran at 826 on an efficiency fitted on 256..512, and plan judged the plan's 512:
    no word that its time to target was an extrapolation."""
    sets = ["noise_scale=2000", "base_batch=512", "target_steps=300", "fit_batches=[256,512]"]
    argv = ["plan", "mixed-gpus", *(a for s in sets for a in ("--set", f"workload.efficiency.{s}")),
            "--objective", "time_to_target", "--policy", "optimal,goodput", "--json"]  # fmt: skip
    assert hetsim_main(argv) == 0
    rec = json.loads(capsys.readouterr().out)["recommended"]
    assert rec["policy"] == "goodput" and rec["global_batch"] > 512
    assert rec["extrapolation"] == (f"time to target extrapolates: global batch {rec['global_batch']} is outside "
                                    "the batches the efficiency was fitted on (256..512)")  # fmt: skip


def test_held_out_accuracy_is_counted_exactly_so_a_round_target_is_reached_where_it_is() -> None:
    """The accuracy was float32's mean: 90 right of 100 read 0.89999998, below a target of 0.9, and
    a batch-sweep run went on past the step that reached it. Per sample and per token alike."""
    import torch
    from torch import nn

    from validation.workloads.base import Dataset, Workload

    class Fixed(nn.Module):  # predicts class 0 everywhere
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.one_hot(torch.zeros(x.shape[:-1], dtype=torch.long), 3).float()

    labels = torch.tensor([0] * 90 + [1] * 10)  # 90 of 100 right
    for y in (labels, labels.repeat(7, 1).T):  # one label per sample; 7 tokens per sample
        x = torch.zeros((*y.shape, 2))
        loss = lambda out, y: nn.functional.cross_entropy(out.flatten(0, -2), y.flatten())  # noqa: E731
        workload = Workload.from_parts("fixed", Fixed, (x, y), (x, y), loss)
        for chunk in (512, 33):  # in one piece, and in uneven chunks
            _, accuracy = workload.evaluate(Fixed(), Dataset(x, y, x, y), chunk=chunk)
            assert accuracy == 0.9 and accuracy >= 0.9


def test_a_plan_without_a_learning_rate_rule_leaves_the_rate_alone(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    rec = {"policy": "optimal", "split": [3, 5], "global_batch": 8, "workers": ["a", "b"]}
    plan.write_text(json.dumps({"recommended": rec}), encoding="utf-8")
    assert load_plan(plan, 2).lr(0.05) == 0.05 and load_plan(plan, 2).record()["lr_factor"] == 1.0
    for factor in (0, -1, "2", None, float("inf"), True):
        plan.write_text(json.dumps({"recommended": {**rec, "learning_rate": {"factor": factor}}}), encoding="utf-8")
        with pytest.raises(PlanError, match=r"recommended\.learning_rate\.factor: must be a number > 0, got "):
            load_plan(plan, 2)


def test_a_plan_of_a_policy_that_changes_the_batch_is_refused_in_one_line(tmp_path: Path) -> None:
    """A goodput plan (made without --wait-for-all) crashed every rank of the example with a
    traceback: the policy had no efficiency to start from."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"recommended": {"policy": "goodput", "split": [1, 1], "global_batch": 2}}))
    with pytest.raises(PlanError) as err:
        load_plan(plan, 2)
    assert str(err.value) == (f"{plan}:recommended.policy: 'goodput' changes the global batch as it trains, and this "
                              "trainer keeps the plan's: plan with --wait-for-all (`validation run --policies goodput` "
                              "runs it)")  # fmt: skip


@pytest.mark.parametrize(
    ("attr", "extra", "line"),
    [
        ("BLOBS", [], "--base-batch: needed for '{tmp}/mine.py:BLOBS' (only digits-cnn and transformer have defaults)"),
        ("BLOBS", ["--base-batch", "8", "--lr", "0.1"],
         "--target: needed for '{tmp}/mine.py:BLOBS' (only digits-cnn and transformer have defaults)"),
        ("LINE", ["--base-batch", "8", "--lr", "0.1", "--target", "0.9"],
         "--workload: {tmp}/mine.py:LINE's held-out labels are not classes: batch-sweep trains to a held-out "
         "accuracy (--target), which a regression's loss does not have"),
        ("BLOBS", ["--base-batch", "8", "--lr", "0.1", "--target", "0.9", "--max-steps", "0"],
         "--max-steps: must be in [1, 1000000], got 0"),
        ("BLOBS", ["--base-batch", "8", "--lr", "0.1", "--target", "0.9", "--eval-gap", "0"],
         "--eval-gap: must be in [1, 1000000], got 0"),
    ],
)  # fmt: skip
def test_a_plug_in_workloads_sweep_needs_what_it_has_no_default_for(
    attr: str, extra: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.py").write_text(PLUGIN, encoding="utf-8")
    argv = ["batch-sweep", "--workload", f"{{tmp}}/mine.py:{attr}", *extra, "--out", "{tmp}/out"]
    check_refused(validation_main, argv, line, tmp_path, capsys, prog="validation")
