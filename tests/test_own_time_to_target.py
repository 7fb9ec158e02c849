"""Time to the target for a user's own model: ``validation batch-sweep`` of a plug-in workload,
its fitted efficiency (with the rate it was measured at) given to ``hetsim plan --efficiency``,
and the plan's learning rate read back by the trainer's API (:meth:`validation.uneven.PlanChoice.lr`);
the held-out accuracy counted exactly; what a plug-in's sweep needs and refuses
(tests/test_plan_learning_rate.py: the plan's side)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from hetsim.cli.main import main as hetsim_main
from hetsim.core.errors import ConfigError
from hetsim.scenario.config import read_efficiency
from tests.refusals import check_refused
from validation import batch_sweep_cli
from validation.batch_sweep import build_config
from validation.cli import main as validation_main
from validation.uneven import load_plan

# A user's file: a linear classifier of two classes, and a regression (no accuracy to reach).
PLUGIN = """
import torch
from torch import nn
from validation.workloads.base import Workload
from validation.workloads.sweep_defaults import SweepDefaults

X = torch.randn(600, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] + 0.5 * X[:, 1] > 0).long()
BLOBS = Workload.from_parts("blobs", lambda: nn.Linear(4, 2), (X[:500], Y[:500]), (X[500:], Y[500:]),
                            nn.functional.cross_entropy)
LINE = Workload.from_parts("line", lambda: nn.Linear(4, 2), (X[:500], X[:500, :2]), (X[500:], X[500:, :2]),
                           nn.functional.mse_loss)
OWN, ODD, TYPO, UNSET = (Workload.from_parts(n, lambda: nn.Linear(4, 2), (X[:500], Y[:500]), (X[500:], Y[500:]),
                                             nn.functional.cross_entropy) for n in ("own", "odd", "typo", "unset"))
OWN.sweep_defaults = SweepDefaults(10, "adam", 0.01, 0.85, 40, 20, 3)  # its own: no option needed
ODD.sweep_defaults = SweepDefaults(10, "rmsprop", 0.01, 0.85, 40, 20, 3)
TYPO.sweep_defaults = {"base_batch": 10}
UNSET.sweep_defaults = SweepDefaults(10, "adam", float("nan"), 0.85, 40, 20, 3)


def explode(out, y):
    raise RuntimeError("loss exploded")


BOOM = Workload.from_parts("boom", lambda: nn.Linear(4, 2), (X[:500], Y[:500]), (X[500:], Y[500:]), explode)
"""


@pytest.mark.slow  # 16 short runs (two processes), a fit and a plan: about 8 s
def test_a_plug_in_workload_sweeps_fits_and_plans_with_its_learning_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mine.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the file named relative to the working folder, as a user types it
    out = tmp_path / "sweep"
    argv = ["batch-sweep", "--workload", "mine.py:BLOBS", "--base-batch", "8", "--lr", "0.1", "--target", "0.9",
            "--batches", "1,2,4,8", "--seeds", "2", "--out", str(out)]  # fmt: skip
    assert validation_main([*argv, "--jobs", "2"]) == 0  # two at once: each process imports the file on its own
    data = json.loads((out / "results.json").read_text())
    assert data["workload"] == f"{tmp_path.resolve()}/mine.py:BLOBS"  # the file's own path: the same from any folder
    assert (data["optimizer"], data["max_steps"], data["eval_gap"]) == ("sgd", 3000, 1)  # a plug-in's defaults
    for point in data["points"]:  # every run reached 0.9, each at its batch's rate by the square-root rule
        assert point["steps_to_target"] is not None
        assert point["lr"] == pytest.approx(0.1 * math.sqrt(point["batch"] / 8))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the same sweep from another folder, by another path: every run kept, none rerun
    (out / "results.json").unlink()
    assert validation_main([*argv[:2], "../mine.py:BLOBS", *argv[3:]]) == 0
    assert json.loads((out / "results.json").read_text())["points"] == data["points"]
    assert hetsim_main(["calibrate-efficiency", str(out), "-o", str(tmp_path / "eff.toml")]) == 0
    table = read_efficiency(tmp_path / "eff.toml")
    assert (table["base_batch"], table["lr_scaling"], table["lr"], table["optimizer"]) == (8, "sqrt", 0.1, "sgd")
    # the plan at another global batch: the rate set at 8, scaled to it
    plan = tmp_path / "plan.json"
    assert hetsim_main(["plan", "paper", "--efficiency", str(tmp_path / "eff.toml"), "--policy", "equal,optimal",
                        "--out", str(plan)]) == 0  # fmt: skip
    rec = json.loads(plan.read_text())["recommended"]
    factor = math.sqrt(rec["global_batch"] / 8)
    assert rec["learning_rate"] == {"rule": "sqrt", "base_batch": 8, "base_lr": 0.1, "factor": pytest.approx(factor),
                                    "lr": pytest.approx(0.1 * factor), "optimizer": "sgd"}  # fmt: skip
    choice = load_plan(plan, 2)
    assert choice.lr(None, 0.05) == pytest.approx(0.1 * factor) and choice.lr(0.2, 0.05) == pytest.approx(0.2 * factor)


def test_sweeps_of_other_evaluation_gaps_are_not_pooled_and_old_kept_runs_not_reused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep evaluated every 50 steps reads 51 steps at every batch: pooled with one evaluated on
    the 4% grid, the fit's exponent went to its bound without a word. And runs kept before the
    accuracy was counted exactly (no ``accuracy`` in their settings) were reused as they were."""
    from types import SimpleNamespace

    from validation.batch_sweep_resume import SETTINGS, check_same_settings, kept_path, settings

    for name, gap in (("a", 1), ("b", 50)):
        point = {"batch": 8, "seed": 0 if gap == 1 else 1, "steps_to_target": 40, "steps_run": 40}
        results = {"workload": "w", "base_batch": 8, "lr_scaling": "sqrt", "target_accuracy": 0.9, "lr": 0.1,
                   "eval_gap": gap, "points": [point]}  # fmt: skip
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))
    check_refused(hetsim_main, ["calibrate-efficiency", "{tmp}/a", "{tmp}/b"],
                  "RUN: {tmp}/b: eval_gap 50 differs from the first's (1)", tmp_path, capsys)  # fmt: skip
    config = SimpleNamespace(out=tmp_path / "kept", **{key: 1 for key in SETTINGS})
    path = kept_path(config.out, 16, 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"settings": {k: v for k, v in settings(config).items() if k != "accuracy"}}))
    with pytest.raises(ConfigError, match="holds runs kept by an earlier hetsim, whose held-out accuracy could read"):
        check_same_settings(config)


def test_a_tables_target_is_the_reference_runs_progress_in_its_own_base_steps() -> None:
    """validation run takes a table fitted at another base batch (its rate scaled there), and
    compare --time-to-target took the reference's 43 steps at 128 as 43 steps at the table's base
    of 16: every prediction came out 57-60% short. And a reference whose plain mean of an uneven
    split (--combine policy) learns less than its batch counted as if every step were whole."""
    import numpy as np

    from hetsim.model.efficiency import Efficiency
    from validation.time_to_target import table_target

    assert table_target(Efficiency(40.0, 128), np.full(50, 128.0)).target_steps == 50  # at its own base: counted
    table = Efficiency(3.7, 16, batch_exponent=1.0)
    target = table_target(table, np.full(43, 128.0))
    assert target.target_steps == pytest.approx(43 * table.gain(128)) and target.target_steps > 43
    assert target.steps_to_target(128) == pytest.approx(43)  # read back at the run's batch: the reference's steps
    schedule = Efficiency(3.7, 16, schedule=((0.0, 3.7), (40.0, 30.0)), batch_exponent=0.5, measured_batch=32)
    steps = np.array([128.0] * 20 + [64.0] * 20)  # a plain mean's effective batches vary: each step its own gain
    assert table_target(schedule, steps).target_steps == pytest.approx(float(schedule.progress(steps)[-1]))
    assert table_target(table, np.array([])).target_steps == 0.0  # the target read before any step


@pytest.mark.parametrize("global_batch", [16, 24, 100, 128, 1000])
def test_validation_run_takes_the_rate_it_asks_for_and_a_ruleless_table_only_at_its_base(global_batch: int) -> None:
    """The refusal printed the rate to 6 digits and compared to 1e-6: at 24 it refused the very
    rate it asked for. A table with a rate and no rule was scaled by the square root anyway."""
    import re

    from validation.config_checks import check_table_fits

    table = {"noise_scale": 3.7, "base_batch": 16, "lr": 0.03, "lr_scaling": "sqrt", "optimizer": "sgd"}
    with pytest.raises(ConfigError) as err:
        check_table_fits(table, global_batch, 0.5)
    asked = float(re.search(r"run with --lr (\S+) ", str(err.value)).group(1))  # type: ignore[union-attr]
    check_table_fits(table, global_batch, asked)  # the rate it asked for
    check_table_fits(table, global_batch, float(f"{asked:.6g}"))  # and the 6 digits plan prints
    without_rule = {k: v for k, v in table.items() if k != "lr_scaling"}
    check_table_fits(without_rule, 16, 0.5)  # at its base batch, whatever the rate: as before tables had one
    if global_batch != 16:
        with pytest.raises(ConfigError, match="fitted with the learning rate set at global batch 16; run at"):
            check_table_fits(without_rule, global_batch, asked)


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


@pytest.mark.parametrize(
    ("attr", "extra", "line"),
    [
        ("BLOBS", [],
         "--base-batch: needed for '{tmp}/mine.py:BLOBS', which declares no sweep defaults (Workload.sweep_defaults)"),
        ("ODD", [],
         "--workload: {tmp}/mine.py:ODD's sweep_defaults.optimizer must be 'sgd' or 'adam', got 'rmsprop'"),
        ("UNSET", [], "--workload: {tmp}/mine.py:UNSET's sweep_defaults.lr must be finite, got nan"),  # not --lr
        ("TYPO", [], "--workload: {tmp}/mine.py:TYPO's sweep_defaults must be a SweepDefaults "
         "(validation.workloads.sweep_defaults), got a table"),
        ("BLOBS", ["--base-batch", "8", "--lr", "0.1"],
         "--target: needed for '{tmp}/mine.py:BLOBS', which declares no sweep defaults (Workload.sweep_defaults)"),
        ("LINE", ["--base-batch", "8", "--lr", "0.1", "--target", "0.9"],
         "--workload: {tmp}/mine.py:LINE's held-out labels are not classes: batch-sweep trains to a held-out "
         "accuracy (--target), which a regression's loss does not have"),
        ("BLOBS", ["--base-batch", "8", "--lr", "0.1", "--target", "0.9", "--max-steps", "0"],
         "--max-steps: must be in [1, 1000000], got 0"),
        ("BLOBS", ["--base-batch", "8", "--lr", "0.1", "--target", "0.9", "--eval-gap", "0"],
         "--eval-gap: must be in [1, 1000000], got 0"),
        ("BLOBS", ["--base-batch", "501", "--lr", "0.1", "--target", "0.9", "--batches", "1"],
         "--base-batch: 501 samples, more than {tmp}/mine.py:BLOBS's training set (500)"),
    ],
)  # fmt: skip
def test_a_plug_in_workloads_sweep_needs_what_it_has_no_default_for(
    attr: str, extra: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.py").write_text(PLUGIN, encoding="utf-8")
    argv = ["batch-sweep", "--workload", f"{{tmp}}/mine.py:{attr}", *extra, "--out", "{tmp}/out"]
    check_refused(validation_main, argv, line, tmp_path, capsys, prog="validation")


def test_a_workload_that_declares_its_sweep_defaults_needs_no_options(tmp_path: Path) -> None:
    """A plug-in's ``sweep_defaults`` fill every option the command line leaves out, as the
    built-ins' do (the workload declares them: no name is looked up), and the options still win."""
    (tmp_path / "mine.py").write_text(PLUGIN, encoding="utf-8")
    parser = argparse.ArgumentParser()
    batch_sweep_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["batch-sweep", "--workload", f"{tmp_path}/mine.py:OWN", "--quick"])
    config = build_config(args)
    assert (config.base_batch, config.optimizer, config.lr, config.target, config.max_steps, config.eval_gap) == (
        10, "adam", 0.01, 0.85, 20, 3)  # fmt: skip
    args = parser.parse_args(["batch-sweep", "--workload", f"{tmp_path}/mine.py:OWN", "--lr", "0.2", "--optimizer",
                              "sgd"])  # fmt: skip
    assert (build_config(args).lr, build_config(args).optimizer, build_config(args).max_steps) == (0.2, "sgd", 40)


@pytest.mark.slow  # --jobs 2: two processes import torch
def test_a_run_whose_workload_raises_ends_the_sweep_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workload's own code failing mid-run (its loss here) is the user's to fix: one line
    naming the run and the error, not a traceback, and the sweep can be resumed."""
    (tmp_path / "mine.py").write_text(PLUGIN, encoding="utf-8")
    argv = ["batch-sweep", "--workload", f"{tmp_path}/mine.py:BOOM", "--base-batch", "8", "--lr", "0.1", "--target",
            "0.9", "--batches", "1", "--seeds", "1", "--max-steps", "5", "--out", str(tmp_path / "out")]  # fmt: skip
    line = ("validation: error: the run at batch 8 seed 0 failed: RuntimeError: loss exploded; fix the workload, then "
            "run the same command again\n")  # fmt: skip
    assert validation_main(argv) == 1 and capsys.readouterr().err == line
    assert validation_main([*argv[:-1], str(tmp_path / "out2"), "--jobs", "2"]) == 1  # raised in a worker process
    assert capsys.readouterr().err == line
