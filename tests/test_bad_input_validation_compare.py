"""``validation compare``: every bad or hostile run folder and option, and the one line it gets
(exit status 2, the folder left as it was, no process: :func:`tests.test_bad_input.check_refused`).
The run folders are made by hand with the run's own writer: no training, no processes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.refusals import DEEP, HUGE, check_refused
from validation.cli import main
from validation.record import RankTiming, RunWriter, step_rows

TARGET = {"seed": 0, "target_accuracy": 0.4}


NO_NOISE_SCALE = "run_dir: {run} has no noise scale estimate (run it with --noise-scale, or --efficiency)"


def fake_run(path: Path, finished: bool = True, config: dict[str, Any] | None = None) -> None:
    """A two-rank run folder: a probe of four steps, then (``finished``) one epoch of ``equal``."""
    meta = {"global_batch": 8, "steps_per_epoch": 2, "epochs": 1, "world_size": 2, "gradient_mb": 0.1,
            "policies": ["equal"], "config": config or {"seed": 0}}  # fmt: skip
    writer = RunWriter(path, meta)
    for step, split in enumerate([(2, 6), (6, 2), (4, 4), (1, 7)]):
        timings = [RankTiming(0.001 * split[0], 0.001, 0.001), RankTiming(0.001 * split[1], 0.001, 0.001)]
        writer.add_steps(step_rows("probe", 0, step, 0.01 * step, split, timings))
    if finished:
        for step in range(2):
            timings = [RankTiming(0.004, 0.001, 0.001), RankTiming(0.004, 0.001, 0.001)]
            writer.add_steps(step_rows("equal", 0, step, 0.1 + 0.01 * step, (4, 4), timings))
        writer.add_epoch(lambda: {"policy": "equal", "epoch": 0, "train_loss": 1.0, "test_loss": 1.1,
                                  "test_accuracy": 0.5, "elapsed_s": 0.03, "split": "4/4", "global_batch": 8,
                                  "noise_scale": None})  # fmt: skip
    writer.flush()
    if finished:
        writer.finish(["equal"])


Damage = Callable[[Path], None]


def meta(**fields: Any) -> Damage:
    """meta.json with ``fields`` replaced (None: removed)."""

    def damage(run: Path) -> None:
        data = json.loads((run / "meta.json").read_text(encoding="utf-8"))
        data.update(fields)
        (run / "meta.json").write_text(json.dumps({k: v for k, v in data.items() if v is not None}), encoding="utf-8")

    return damage


def write(name: str, content: str | bytes) -> Damage:
    def damage(run: Path) -> None:
        if isinstance(content, bytes):
            (run / name).write_bytes(content)
        else:
            (run / name).write_text(content, encoding="utf-8")

    return damage


def remove(*names: str) -> Damage:
    def damage(run: Path) -> None:
        for name in names:
            (run / name).unlink()

    return damage


def epochs(**columns: Any) -> Damage:
    """epochs.csv with ``columns`` set."""
    return table("epochs.csv", **columns)


def evals(**columns: Any) -> Damage:
    """evals.csv with ``columns`` set."""
    return table("evals.csv", **columns)


def table(name: str, **columns: Any) -> Damage:
    def damage(run: Path) -> None:
        frame = pd.read_csv(run / name)
        for column, value in columns.items():
            frame[column] = value
        frame.to_csv(run / name, index=False)

    return damage


def then(*damages: Damage) -> Damage:
    def damage(run: Path) -> None:
        for d in damages:
            d(run)

    return damage


NOISY = epochs(noise_scale=50.0)  # a run made with --noise-scale
TRACE_COLUMNS = "policy, epoch, step, worker, local_batch, start_s, compute_s, wait_s, comm_s, included"


def compare_case(id: str, damage: Damage, argv: list[str], line: str, finished: bool = True,
                 config: dict[str, Any] | None = None, marks: Any = ()) -> Any:  # fmt: skip
    return pytest.param(damage, argv, line, finished, config, id=id, marks=marks)


def nothing(run: Path) -> None:
    pass


CASES = [
    # the folder
    compare_case("no-such-folder", nothing, ["{tmp}/nope"], "{tmp}/nope: no such run folder"),
    compare_case("a-file", nothing, ["{run}/meta.json"], "{run}/meta.json: no such run folder"),
    compare_case("no-meta", remove("meta.json"), ["{run}"], "{run}: not a validation run folder (no meta.json)"),
    compare_case("no-trace", remove("trace.parquet", "trace.csv"), ["{run}"],
                 "{run}: no trace.parquet or trace.csv (the run died before its first epoch)"),
    compare_case("trace-garbage", write("trace.parquet", b"garbage"), ["{run}"],
                 "{run}/trace.parquet: not a readable Parquet table: Could not open Parquet input source "
                 "'{run}/trace.parquet': Parquet file size is 7 bytes, smaller than the minimum file footer (8 bytes)"),
    compare_case("trace-csv-columns", then(remove("trace.parquet"), write("trace.csv", "policy,worker\nequal,0\n")),
                 ["{run}"], f"epoch: missing column in {{run}}/trace.csv (a trace needs {TRACE_COLUMNS})"),
    compare_case("nothing-finished", nothing, ["{run}", "--tolerance", "0.5"],
                 "run_dir: {run} has no policy with a finished epoch to compare", finished=False),
    # meta.json
    compare_case("meta-not-json", write("meta.json", "{nope"), ["{run}"],
                 "{run}/meta.json: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
                 "(char 1)"),
    compare_case("meta-bom", lambda run: write("meta.json", "\ufeff" + (run / "meta.json").read_text())(run), ["{run}"],
                 "{run}/meta.json: starts with a byte-order mark (BOM): save it as UTF-8 without one"),
    compare_case("meta-steps-zero", meta(steps_per_epoch=0), ["{run}"],
                 "{run}/meta.json:steps_per_epoch: must be in [1, 1099511627776], got 0"),
    compare_case("meta-batch-huge", meta(global_batch=HUGE), ["{run}"],
                 f"{{run}}/meta.json:global_batch: must be in [1, 1099511627776], got {HUGE}"),
    compare_case("meta-deep", write("meta.json", "[" * DEEP + "]" * DEEP), ["{run}"],
                 "{run}/meta.json: not valid JSON: nested too deeply"),
    compare_case("meta-list", write("meta.json", "[1, 2]"), ["{run}"],
                 "{run}/meta.json: the file must hold a table (object) at the top"),
    compare_case("meta-without-global-batch", meta(global_batch=None), ["{run}"],
                 "{run}/meta.json:global_batch: missing"),
    compare_case("meta-batch-text", meta(global_batch="lots"), ["{run}"],
                 "{run}/meta.json:global_batch: must be an integer, got a string ('lots')"),
    compare_case("meta-gradient-text", meta(gradient_mb="x"), ["{run}"],
                 "{run}/meta.json:gradient_mb: must be a number, got a string ('x')"),
    compare_case("meta-config-list", meta(config=[1]), ["{run}"],
                 "{run}/meta.json:config: must be a table, got a list"),
    compare_case("meta-epochs-float", meta(epochs=1.5), ["{run}"],
                 "{run}/meta.json:epochs: must be an integer, got float (1.5)"),
    compare_case("meta-world-size-missing", meta(world_size=None), ["{run}"], "{run}/meta.json:world_size: missing"),
    compare_case("meta-gradient-negative", meta(gradient_mb=-1), ["{run}"],
                 "{run}/meta.json:gradient_mb: must be >= 0, got -1"),
    compare_case("meta-policies-text", meta(policies="equal"), ["{run}"],
                 "{run}/meta.json:policies: must be a list of policy names, got a string ('equal')"),
    compare_case("meta-policies-number", meta(policies=["equal", 3]), ["{run}"],
                 "{run}/meta.json:policies.1: must be a string, got int (3)"),
    compare_case("meta-seed-text", meta(config={"seed": "x"}), ["{run}"],
                 "{run}/meta.json:config.seed: must be an integer, got a string ('x')"),
    compare_case("meta-max-batch-zero", meta(config={"max_batch": 0}), ["{run}"],
                 "{run}/meta.json:config.max_batch: must be in [1, 1099511627776], got 0"),
    compare_case("meta-combine-unknown", meta(config={"combine": "mean"}), ["{run}"],
                 "{run}/meta.json:config.combine: must be 'weighted' or 'policy', got 'mean'"),
    compare_case("meta-injection-list", meta(injection=[1]), ["{run}"],
                 "{run}/meta.json:injection: must be a table, got a list"),
    compare_case("meta-injection-delay-text", meta(injection={"delay": {"1": "soon"}}), ["{run}"],
                 "{run}/meta.json:injection.delay.1: expected seconds or NAME:PARAMS, got 'soon'"),
    compare_case("meta-injection-slowdown-small", meta(injection={"slowdown": {"0": 0.5}}), ["{run}"],
                 "{run}/meta.json:injection.slowdown.0: must be >= 1, got 0.5"),
    compare_case("meta-plan-list", meta(plan=[1]), ["{run}"], "{run}/meta.json:plan: must be a table, got a list"),
    compare_case("meta-plan-split-short", meta(plan={"policy": "optimal", "split": [8], "fixed": True}), ["{run}"],
                 "{run}/meta.json:plan.split: must be a list of 2 local batches, one per rank"),
    compare_case("meta-plan-split-sum", meta(plan={"policy": "optimal", "split": [3, 4], "fixed": True}), ["{run}"],
                 "{run}/meta.json:plan.split: sums to 7, not the run's global batch 8"),
    compare_case("meta-plan-split-negative", meta(plan={"policy": "optimal", "split": [-1, 9], "fixed": True}),
                 ["{run}"], "{run}/meta.json:plan.split.0: must be in [0, 1099511627776], got -1"),
    compare_case("meta-plan-fixed-text", meta(plan={"policy": "optimal", "split": [3, 5], "fixed": "yes"}), ["{run}"],
                 "{run}/meta.json:plan.fixed: must be true or false, got a string ('yes')"),
    compare_case("meta-plan-policy-missing", meta(plan={"split": [3, 5], "fixed": True}), ["{run}"],
                 "{run}/meta.json:plan.policy: must be a string, got NoneType (None)"),
    # options
    compare_case("tolerance-negative", nothing, ["{run}", "--tolerance", "-1"], "--tolerance: must be >= 0, got -1"),
    compare_case("tolerance-nan", nothing, ["{run}", "--tolerance", "nan"], "--tolerance: must be finite, got nan"),
    compare_case("tolerance-text", nothing, ["{run}", "--tolerance", "abc"],
                 "validation compare: argument --tolerance: invalid float value: 'abc'"),
    compare_case("calibrate-on-unknown", nothing, ["{run}", "--calibrate-on", "nope"],
                 "--calibrate-on: the run has no rows for 'nope' (it has: probe, equal)"),
    compare_case("model-unknown", nothing, ["{run}", "--model", "spline"],
                 "--model: unknown model 'spline' (choose auto, affine, hinge, table)"),
    compare_case("no-folder", nothing, [], "validation compare: the following arguments are required: run_dir"),
    # --time-to-target
    compare_case("time-to-target-without-target", nothing, ["{run}", "--time-to-target"],
                 "run_dir: {run} has no target accuracy: --time-to-target needs a `validation run` with "
                 "--target-accuracy (and --noise-scale or --efficiency)"),
    compare_case("time-to-target-without-noise-scale", nothing, ["{run}", "--time-to-target"],
                 NO_NOISE_SCALE, config=TARGET),
    compare_case("time-to-target-noise-scale-text", epochs(noise_scale="x"), ["{run}", "--time-to-target"],
                 NO_NOISE_SCALE, config=TARGET),
    compare_case("time-to-target-not-reached", then(NOISY, evals(test_accuracy=0.1)), ["{run}", "--time-to-target"],
                 "run_dir: equal never reached accuracy 0.4: no target to calibrate on", config=TARGET),
    compare_case("time-to-target-not-reached-by-an-epoch", then(NOISY, epochs(test_accuracy=0.1), remove("evals.csv")),
                 ["{run}", "--time-to-target"], "run_dir: equal never reached accuracy 0.4: no target to calibrate on",
                 config=TARGET),  # a run folder from before evals.csv: the epochs' ends
    compare_case("time-to-target-evals-no-step", then(NOISY, write("evals.csv", "policy,test_accuracy\nequal,0.5\n")),
                 ["{run}", "--time-to-target"], "{run}/evals.csv:step: missing column", config=TARGET),
    compare_case("time-to-target-eval-step-text", then(NOISY, evals(step="late")), ["{run}", "--time-to-target"],
                 "{run}/evals.csv:step: must be a whole number >= 0, got 'late' (equal's row 1)", config=TARGET),
    compare_case("time-to-target-evals-garbage", then(NOISY, write("evals.csv", b"\x00\xff garbage")),
                 ["{run}", "--time-to-target"], "{run}/evals.csv: not a readable CSV table: 'utf-8' codec can't "
                 "decode byte 0xff in position 1: invalid start byte", config=TARGET),
    compare_case("time-to-target-no-summary", then(NOISY, remove("summary.json")), ["{run}", "--time-to-target"],
                 "{run}/summary.json: no such file", config=TARGET),
    compare_case("time-to-target-summary-list", then(NOISY, write("summary.json", "[1]")),
                 ["{run}", "--time-to-target"],
                 "{run}/summary.json: the file must hold a table (object) at the top", config=TARGET),
    compare_case("time-to-target-target-text", then(NOISY, meta(config={**TARGET, "target_accuracy": "high"})),
                 ["{run}", "--time-to-target"],
                 "{run}/meta.json:config.target_accuracy: must be a number, got a string ('high')", config=TARGET),
    compare_case("time-to-target-epochs-garbage", write("epochs.csv", b"\x00\xff garbage"),
                 ["{run}", "--time-to-target"],
                 "{run}/epochs.csv: not a readable CSV table: 'utf-8' codec can't decode byte 0xff in position 1: "
                 "invalid start byte", config=TARGET),
    compare_case("time-to-target-summary-policies-missing", then(NOISY, write("summary.json", "{}")),
                 ["{run}", "--time-to-target"], "{run}/summary.json:policies: missing", config=TARGET),
    compare_case("time-to-target-summary-time-text",
                 then(NOISY, write("summary.json", '{"policies": [{"policy": "equal", "time_to_target_s": "x"}]}')),
                 ["{run}", "--time-to-target"],
                 "{run}/summary.json:policies.0.time_to_target_s: must be a number, got a string ('x')", config=TARGET),
    compare_case("time-to-target-summary-entry-list", then(NOISY, write("summary.json", '{"policies": [[1]]}')),
                 ["{run}", "--time-to-target"], "{run}/summary.json:policies.0: must be a table, got a list",
                 config=TARGET),
    compare_case("time-to-target-epochs-empty", write("epochs.csv", ""), ["{run}", "--time-to-target"],
                 "{run}/epochs.csv: not a readable CSV table: No columns to parse from file", config=TARGET),
    compare_case("time-to-target-epochs-ragged", write("epochs.csv", "policy,noise_scale\nequal,5\nequal,5,6,7\n"),
                 ["{run}", "--time-to-target"],
                 "{run}/epochs.csv: not a readable CSV table: Error tokenizing data. C error: Expected 2 fields in "
                 "line 3, saw 4", config=TARGET),
    compare_case("time-to-target-epochs-no-accuracy", then(write("epochs.csv", "policy,epoch,noise_scale\nequal,0,5\n"),
                                                            remove("evals.csv")),
                 ["{run}", "--time-to-target"], "{run}/epochs.csv:test_accuracy: missing column", config=TARGET),
    compare_case("time-to-target-epoch-text", then(NOISY, epochs(epoch="first"), remove("evals.csv")),
                 ["{run}", "--time-to-target"],
                 "{run}/epochs.csv:epoch: must be a whole number >= 0, got 'first' (equal's row 1)", config=TARGET),
]  # fmt: skip


@pytest.mark.parametrize(("damage", "argv", "line", "finished", "config"), CASES)
def test_compare_refuses_bad_input(damage, argv, line, finished, config, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    fake_run(run, finished, config)
    damage(run)
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{run}", str(run)) for a in argv]
    check_refused(main, ["compare", *argv], line.replace("{run}", str(run)), tmp_path, capsys, prog="validation")


def test_the_target_is_calibrated_on_equal_else_the_first_policy_at_a_fixed_batch(tmp_path):
    """Under the weighted combine any policy at a fixed global batch learns as equal does per
    step: a run without equal (adaptive beside goodput) calibrates on its first such policy; a
    run whose every policy changes its batch is refused, naming why."""
    from types import SimpleNamespace

    from hetsim.core.errors import ConfigError
    from validation.time_to_target import reference_policy

    def run(*policies):
        return SimpleNamespace(policies=list(policies), path=tmp_path)

    assert reference_policy(run("dynamic", "equal", "goodput")) == "equal"
    assert reference_policy(run("goodput", "adaptive", "dynamic")) == "adaptive"
    with pytest.raises(ConfigError, match=r"every policy changes its global batch \(goodput\); run one at a fixed"):
        reference_policy(run("goodput"))
