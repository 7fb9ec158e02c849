"""Bad input to the efficiency path: tables, batch-sweep results and their commands (each case
once a traceback, a folder left behind, a value taken that no run could mean, or a warning)."""

from __future__ import annotations

import json

import pytest

from hetsim.cli.main import main
from tests.refusals import DEEP, case, check_refused, write_files

BIG = "1" + "0" * 400  # an integer past a float's range: math.isfinite raised on it
TABLE = "[workload.efficiency]\nnoise_scale = 100\nbase_batch = 16\ntarget_steps = 300\n"
POINTS = [{"batch": b, "seed": 0, "steps_to_target": 100.0, "noise_scale": 40.0} for b in (16, 32)]
SWEEP = {"workload": "w", "base_batch": 16, "lr_scaling": "sqrt", "target_accuracy": 0.9, "points": POINTS}


def sweep(**fields: object) -> str:
    return json.dumps({**SWEEP, **fields})


PLAN = ["plan", "paper", "--efficiency", "{tmp}/e.toml", "--policy", "equal,optimal"]


CASES = [
    case("noise-beyond-a-float", PLAN,
         "--efficiency: {tmp}/e.toml: workload.efficiency.noise_scale: must be finite, got an integer of about 400 "
         "digits", {"e.toml": f"[workload.efficiency]\nnoise_scale = {BIG}\nbase_batch = 16\n"}),
    case("lr-absurd", PLAN, "--efficiency: {tmp}/e.toml: workload.efficiency.lr: must be in (0, 1e+06], got 1e+308",
         {"e.toml": TABLE + "lr = 1e308\n"}),
    case("base-batch-huge", PLAN,
         "--efficiency: {tmp}/e.toml: workload.efficiency.base_batch: must be in [1, 1099511627776], got "
         "9223372036854775807", {"e.toml": TABLE.replace("16", str(2**63 - 1))}),
    case("run-sd-absurd", PLAN, "--efficiency: {tmp}/e.toml: workload.efficiency.run_sd: must be in [0, 50], got 1000",
         {"e.toml": TABLE + "run_sd = 1000\n"}),
    case("dof-past-scipy", PLAN,  # scipy's t took no integer of 2^64: a traceback
         "--efficiency: {tmp}/e.toml: workload.efficiency.run_dof: must be in [1, 1099511627776], got "
         "18446744073709551616", {"e.toml": TABLE + f"run_dof = {2**64}\n"}),
    case("correlation-of-tiny-errors", PLAN,  # the correlations overflowed, with two RuntimeWarnings
         "--efficiency: {tmp}/e.toml: workload.efficiency.covariance: must be positive semi-definite (a correlation "
         "beyond -1 or 1)", {"e.toml": TABLE + "target_steps_sd = 1e-200\nnoise_scale_sd = 1e-200\n"
                                       "covariance = [[0, 5], [5, 0]]\n"}),
    case("plan-out-not-json", ["plan", "paper", "--out", "{tmp}/plan.toml"],
         "--out: {tmp}/plan.toml: unknown file type '.toml' (use .json)"),
    case("sweep-folders-not-left", ["calibrate-efficiency", "{tmp}/none", "-o", "{tmp}/new/sub/eff.toml"],
         "RUN: cannot read {tmp}/none: No such file or directory"),  # the -o folders were made, and left
    case("sweep-nested-deep", ["calibrate-efficiency", "{tmp}/s"],
         "RUN: {tmp}/s/results.json is not JSON: maximum recursion depth exceeded while decoding a JSON array from a "
         "unicode string", {"s/results.json": "[" * DEEP + "]" * DEEP}),
    case("sweep-target-negative", ["calibrate-efficiency", "{tmp}/s"],
         "{tmp}/s/results.json:target_accuracy: must be in (0, 1], got -5",
         {"s/results.json": sweep(target_accuracy=-5)}),
    case("sweep-no-workload", ["calibrate-efficiency", "{tmp}/s"],
         "{tmp}/s/results.json:workload: must be the workload's name, got NoneType (None)",
         {"s/results.json": sweep(workload=None)}),
    case("batches-underscore", ["calibrate-efficiency", "{tmp}/s", "--batches", "16,3_2"],
         "--batches: expected whole numbers separated by commas, got '16,3_2'", {"s/results.json": sweep()}),
    case("batches-twice", ["calibrate-efficiency", "{tmp}/s", "--batches", "16,32,16"],
         "--batches: 16 is given twice in '16,32,16'", {"s/results.json": sweep()}),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_the_efficiency_path_refuses_bad_input(argv, line, files, tmp_path, capsys):
    write_files(tmp_path, files)
    check_refused(main, argv, line, tmp_path, capsys)
