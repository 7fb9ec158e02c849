"""``python -m validation batch-sweep``: a short real sweep in this process (digits, a low target)
and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hetsim.model.efficiency import LR_RULES, OPTIMIZERS
from tests.refusals import check_refused
from validation.batch_sweep_cli import LR_RULE_NAMES, OPTIMIZER_NAMES
from validation.batch_sweep_train import EVAL_SPACING, PointResult, next_eval, scaled_lr
from validation.batch_sweep_train import OPTIMIZERS as TRAIN_OPTIMIZERS
from validation.cli import main


def test_the_learning_rate_rules_and_the_evaluation_grid() -> None:
    assert scaled_lr(0.1, 64, 16, "sqrt") == pytest.approx(0.2)
    assert scaled_lr(0.1, 64, 16, "linear") == pytest.approx(0.4)
    assert scaled_lr(0.1, 64, 16, "none") == 0.1
    # the names the command line offers are those the efficiency table accepts and the loop trains with
    assert LR_RULE_NAMES == LR_RULES and OPTIMIZER_NAMES == OPTIMIZERS == tuple(TRAIN_OPTIMIZERS)
    for rule in LR_RULES:
        assert scaled_lr(0.1, 16, 16, rule) == 0.1  # every rule leaves the base batch's rate alone
    step = 1
    while step < 5000:  # every gap between evaluations is within 5% of the steps so far (or one step)
        following = next_eval(step)
        assert following - step == 1 or (following - step) <= EVAL_SPACING * step + 1e-9
        step = following


@pytest.mark.slow
def test_a_short_sweep_records_steps_to_target_within_five_percent_one_or_two_at_a_time_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    argv = ["batch-sweep", "--workload", "digits-cnn", "--batches", "1,2", "--seeds", "1", "--target", "0.6",
            "--quick", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    data = json.loads((out / "results.json").read_text())
    assert data["batches"] == [16, 32] and data["provenance"]["command"]
    assert (data["optimizer"], data["lr"], data["lr_scaling"]) == ("sgd", 0.05, "sqrt")  # the workload's defaults
    curve = pd.read_csv(out / "curve.csv")
    for point in data["points"]:
        mine = curve[(curve["batch"] == point["batch"]) & (curve["seed"] == point["seed"])]
        reached = point["steps_to_target"]
        assert reached is not None and point["lr"] == pytest.approx(scaled_lr(0.05, point["batch"], 16, "sqrt"))
        before = mine[mine["step"] < reached]
        assert (before["test_accuracy"] < 0.6).all()  # the first evaluation at the target is the one recorded
        assert float(mine[mine["step"] == reached]["test_accuracy"].iloc[0]) >= 0.6
        last = int(before["step"].max()) if not before.empty else 0
        assert reached - last <= max(1, 0.05 * reached)
    assert (out / "steps_to_target.png").stat().st_size > 0
    # the same runs two at a time, each in its own process: the same steps and curves
    assert main([*argv[:-1], str(tmp_path / "jobs"), "--jobs", "2"]) == 0
    again = json.loads((tmp_path / "jobs" / "results.json").read_text())
    kept = ("batch", "seed", "lr", "steps_to_target", "steps_run", "noise_scale")
    assert [{k: p[k] for k in kept} for p in again["points"]] == [{k: p[k] for k in kept} for p in data["points"]]
    columns = ["batch", "seed", "step", "test_loss", "test_accuracy"]
    assert pd.read_csv(tmp_path / "jobs" / "curve.csv")[columns].equals(curve[columns])
    # a sweep that stopped after its first run: the same command reruns only the second, and the
    # results are the same; a folder of kept runs of other settings (another target) is refused
    (out / ".runs" / "batch32-seed0.json").unlink()
    (out / "results.json").unlink()
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "1 of 2 runs kept from an earlier start" in err and "batch 16 seed 0" not in err and "batch 32 seed 0" in err
    resumed = json.loads((out / "results.json").read_text())
    assert [{k: p[k] for k in kept} for p in resumed["points"]] == [{k: p[k] for k in kept} for p in data["points"]]
    before = (out / "results.json").read_bytes()
    assert main([*argv[:-4], "0.5", "--quick", "--out", str(out)]) == 2  # another target: not written over
    assert "holds a sweep with another target (0.6, here 0.5)" in capsys.readouterr().err
    assert (out / "results.json").read_bytes() == before


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_first_seed_runs_the_seeds_from_it_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import validation.batch_sweep as sweep

    ran: list[tuple[int, int]] = []

    def fake_run(config: sweep.SweepConfig, seed: int, multiple: int) -> PointResult:
        ran.append((seed, multiple))
        steps = 100 + seed
        return PointResult(multiple * config.base_batch, seed, config.lr, steps_to_target=steps, steps_run=steps)

    monkeypatch.setattr(sweep, "run_point", fake_run)
    argv = ["batch-sweep", "--batches", "1,2", "--seeds", "2", "--first-seed", "5", "--out", str(tmp_path / "s")]
    assert main(argv) == 0
    assert ran == [(5, 1), (5, 2), (6, 1), (6, 2)]
    data = json.loads((tmp_path / "s" / "results.json").read_text())
    assert (data["seeds"], data["first_seed"]) == (2, 5)
    assert [(p["seed"], p["batch"], p["steps_to_target"]) for p in data["points"]] == [
        (5, 16, 105),
        (5, 32, 105),
        (6, 16, 106),
        (6, 32, 106),
    ]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["batch-sweep", "--batches", "2,4"], "--batches: must include 1 (the base batch the models are fitted at)"),
        (["batch-sweep", "--batches", "1,x"], "--batches: expected whole numbers separated by commas, got '1,x'"),
        (["batch-sweep", "--batches", "1,1_0"], "--batches: expected whole numbers separated by commas, got '1,1_0'"),
        (["batch-sweep", "--seeds", "0"], "--seeds: must be in [1, 100], got 0"),
        (
            ["batch-sweep", "--base-batch", "256"],
            "--batches: 8 x the base batch 256 is 2048 samples, more than digits-cnn's training set (1438)",
        ),
        (["batch-sweep", "--target", "1.5"], "--target: must be in (0, 1], got 1.5"),
        (["batch-sweep", "--target", "0"], "--target: must be in (0, 1], got 0"),
        (["batch-sweep", "--jobs", "0"], "--jobs: must be in [1, 64], got 0"),
        (["batch-sweep", "--lr", "1e308"], "--lr: must be in (0, 1e+06], got 1e+308"),  # it crashed mid-run
        (["batch-sweep", "--first-seed", "-1"], "--first-seed: must be in [0, 2147483547], got -1"),
        (
            ["batch-sweep", "--optimizer", "lbfgs"],
            "validation batch-sweep: argument --optimizer: invalid choice: 'lbfgs' (choose from 'sgd', 'adam')",
        ),
    ],
)
def test_bad_sweep_options_are_refused(argv: list[str], line: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    check_refused(main, [*argv, "--out", "{tmp}/out"], line, tmp_path, capsys, prog="validation")


def test_a_folder_of_another_commands_results_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hetsim sweep's folder (its sweep.toml, meta.json, parts) is not a batch-sweep's to write
    results.json into (one was written beside them); its own folder resumes (tested above)."""
    (tmp_path / "sweep" / "parts").mkdir(parents=True)
    for name in ("meta.json", "sweep.toml"):
        (tmp_path / "sweep" / name).write_text("x", encoding="utf-8")
    check_refused(main, ["batch-sweep", "--quick", "--out", "{tmp}/sweep"],
                  "--out: {tmp}/sweep holds meta.json, not a batch-sweep's file: give a new folder", tmp_path, capsys,
                  prog="validation")  # fmt: skip


def test_a_kept_runs_null_noise_sums_read_as_the_nan_the_run_gave(tmp_path: Path):
    """A diverged run's noise sums are nan, which the kept run's strict JSON holds as null: the
    resumed sweep's entry is the uninterrupted one's (it used to stop on int + None)."""
    from types import SimpleNamespace

    from validation.batch_sweep import point_entry
    from validation.batch_sweep_resume import SETTINGS, keep, kept

    rows = [{"step": 10, "grad_sq": 2.0, "trace": 40.0}, {"step": 20, "grad_sq": float("nan"), "trace": float("nan")},
            {"step": 30, "grad_sq": 1.0, "trace": 30.0}]  # fmt: skip
    result = PointResult(16, 0, 0.05, steps_to_target=None, steps_run=40, noise=rows)
    config = SimpleNamespace(out=tmp_path, **{key: 1 for key in SETTINGS})
    keep(config, result)  # written as null, read back as the run's nan
    again = kept(config, 16, 0)
    assert again is not None
    fresh, resumed = point_entry(result, result.noise), point_entry(again, again.noise)
    assert fresh == resumed and fresh["noise_scale"] is None  # a nan sum: no whole-run estimate
    assert fresh["noise_first"] == 20.0  # the first span's ratio, the nan one left out


def test_a_folder_of_kept_runs_with_other_settings_is_refused_not_written_over(tmp_path):
    """A rerun into a sweep's folder at another learning rate retrained every run and replaced
    the first sweep's results without a word."""
    from types import SimpleNamespace

    from hetsim.core.errors import ConfigError
    from validation.batch_sweep_resume import SETTINGS, check_same_settings, kept_path, settings

    config = SimpleNamespace(out=tmp_path, **{key: 1 for key in SETTINGS if key != "lr"}, lr=0.05)
    path = kept_path(tmp_path, 16, 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"settings": settings(config), "result": {}}))
    check_same_settings(config)  # the same settings: a resume
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=r"^--out: .* holds a sweep with another lr \(0\.05, here 0\.03\)"):
        check_same_settings(SimpleNamespace(**{**vars(config), "lr": 0.03}))
    assert path.read_bytes() == before


@pytest.mark.slow
@pytest.mark.multiprocess
def test_sigterm_with_jobs_stops_the_workers_keeps_the_finished_runs_and_says_so(tmp_path: Path) -> None:
    """With --jobs the pool's block ran every queued run before a signal took effect, and SIGTERM
    left the workers running, orphaned, for minutes, saying nothing."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "s"
    command = [sys.executable, "-m", "validation", "batch-sweep", "--workload", "digits-cnn", "--batches", "1,2,4",
               "--seeds", "4", "--quick", "--jobs", "2", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((out / ".runs").glob("*.json")):
        time.sleep(0.05)
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert (
        proc.returncode == 128 + signal.SIGTERM and err.strip().splitlines()[-1] == "validation: terminated (SIGTERM)"
    )
    kept = len(list((out / ".runs").glob("*.json")))
    assert 1 <= kept < 12 and not (out / "results.json").exists()
    gone = time.monotonic() + 5
    while time.monotonic() < gone and any(Path(f"/proc/{pid}").exists() for pid in workers):
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived the sweep"


@pytest.mark.slow  # trains 23 steps: 1.1 s
def test_a_run_cut_at_its_step_cap_is_evaluated_at_the_cap() -> None:
    """A run that stopped at 1500 steps had its last evaluation at 1494: the censored fit took it
    as needing more than 1500 steps where it was known only to need more than 1494."""
    import torch

    from validation.batch_sweep_train import OPTIMIZERS, train_to_target
    from validation.workloads import resolve_workload

    workload = resolve_workload("digits-cnn")
    data = workload.load(0, torch.device("cpu"))
    cut = train_to_target(workload, data, 0, 16, 0.03, OPTIMIZERS["sgd"], 1.0, 23, 10)  # evaluated 10 apart, and at 23
    assert cut.steps_to_target is None and cut.steps_run == 23 and cut.curve[-1]["step"] == 23
