"""``hetsim plan``: every bad or hostile input and the one line it gets (exit status 2, nothing
written, no process left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import sys

import pytest

from hetsim.cli.main import main
from tests.refusals import HUGE, ONE, case, check_refused, toml, write_files

NO_TARGET = "workload.efficiency={noise_scale=512, base_batch=256}"
RANGE = "--batch-range: expected two increasing positive integers LO,HI, got"

CASES = [
    # the cluster
    case("one-worker", ["{tmp}/one.toml"], "workers: plan needs two or more workers, got 1", {"one.toml": toml(ONE)}),
    case("no-such-scenario", ["nope"], "scenario: 'nope' is neither a file nor a built-in scenario ({builtins})"),
    case("bad-set", ["paper", "--set", "workers.0.per_sample_s=-1"], "workers.0.per_sample_s: must be > 0, got -1"),
    case("unknown-policy", ["paper", "--policy", "nope"], "--policy: unknown policy 'nope' (known: {policies})"),
    case("goodput-without-efficiency", ["paper", "--policy", "goodput"],
         "workload.efficiency: missing: policy 'goodput' chooses the global batch by statistical efficiency "
         "(give noise_scale and base_batch)"),
    case("seed-negative", ["paper", "--seed", "-1"], "--seed: must be >= 0, got -1"),
    case("option-of-simulate", ["paper", "--trace", "full"], "unrecognized arguments: --trace full"),
    # --objective
    case("objective-unknown", ["paper", "--objective", "fast"],
         "hetsim plan: argument --objective: invalid choice: 'fast' (choose from 'throughput', 'time_to_target')"),
    case("time-to-target-without-efficiency", ["paper", "--objective", "time_to_target"],
         "--objective: time_to_target needs [workload.efficiency] with target_steps in the scenario"),
    case("time-to-target-without-target", ["paper", "--objective", "time_to_target", "--set", NO_TARGET],
         "--objective: time_to_target needs [workload.efficiency] with target_steps in the scenario"),
    # --batch-range
    case("range-one-number", ["paper", "--batch-range", "64"], f"{RANGE} '64'"),
    case("range-three-numbers", ["paper", "--batch-range", "64,128,256"], f"{RANGE} '64,128,256'"),
    case("range-decreasing", ["paper", "--batch-range", "128,64"], f"{RANGE} '128,64'"),
    case("range-equal", ["paper", "--batch-range", "64,64"], f"{RANGE} '64,64'"),
    case("range-zero", ["paper", "--batch-range", "0,64"], f"{RANGE} '0,64'"),
    case("range-negative", ["paper", "--batch-range=-8,64"], f"{RANGE} '-8,64'"),
    case("range-text", ["paper", "--batch-range", "a,b"], f"{RANGE} 'a,b'"),
    case("range-floats", ["paper", "--batch-range", "1e3,2e3"], f"{RANGE} '1e3,2e3'"),
    case("range-other-digits", ["paper", "--batch-range", "\u0663,\u0664"], f"{RANGE} '\u0663,\u0664'"),
    case("range-empty", ["paper", "--batch-range="], f"{RANGE} ''"),
    case("range-below-the-workers", ["paper", "--batch-range", "1,64"],
         "--batch-range: LO must be at least the number of workers (2), got 1"),
    case("range-beyond-the-caps", ["mixed-gpus", "--batch-range", "64,2048"],
         "--batch-range: HI must be at most 1280, what the workers' max_batch allow, got 2048"),
    case("range-beyond-the-dataset", ["paper", "--batch-range", "64,60000"],
         "--batch-range: HI must be at most workload.dataset_size (50000), got 60000"),
    case("range-never-reaches", ["paper", "--objective", "time_to_target", "--batch-range", "64,128", "--set",
                                 "workload.efficiency={noise_scale=512, base_batch=256, target_steps=100000}"],
         "workload.epochs: no policy reaches the target in 10 epochs at global batch 128",  # in the range, not 256
         marks=pytest.mark.slow),  # every policy simulated first: 3.5 s
    case("range-huge", ["paper", "--batch-range", f"8,{HUGE}"],
         f"--batch-range: HI must be at most workload.dataset_size (50000), got {HUGE}"),
    case("wait-for-all-and-ksync", ["paper", "--policy", "equal,ksync", "--wait-for-all"],
         "--policy: ksync does not wait for every worker each step, which --wait-for-all asks"),
    case("wait-for-all-and-goodput", ["paper", "--policy", "equal,goodput", "--wait-for-all", "--set", NO_TARGET],
         "--policy: goodput changes the global batch as it trains, and --wait-for-all plans for a trainer that keeps "
         "the plan's (--batch-range chooses one)"),
    # --out
    case("out-a-folder", ["paper", "--out", "{tmp}"], "--out: {tmp} is a folder"),
    case("out-under-a-file", ["paper", "--out", "{tmp}/afile/plan.json"],
         "--out: cannot write {tmp}/afile/plan.json: {tmp}/afile is not a folder", {"afile": "x"}),
    case("out-deep-under-a-file", ["paper", "--out", "{tmp}/afile/sub/plan.json"],
         "--out: cannot write {tmp}/afile/sub/plan.json: {tmp}/afile is not a folder", {"afile": "x"}),
    case("out-deep-in-an-unwritable-folder", ["paper", "--out", "/proc/self/nope/plan.json"],
         "--out: cannot write /proc/self/nope/plan.json: /proc/self is not writable",  # not even for root
         marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")),
    # --efficiency FILE (what calibrate-efficiency -o writes)
    case("efficiency-no-such-file", ["paper", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: no such file: {tmp}/e.toml"),
    case("efficiency-a-folder", ["paper", "--efficiency", "{tmp}"], "--efficiency: a folder, not a file: {tmp}"),
    case("efficiency-empty-path", ["paper", "--efficiency", ""],
         "hetsim plan: argument --efficiency: an empty path: name a file or folder"),
    case("efficiency-without-table", ["paper", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: {tmp}/e.toml has no [workload.efficiency] table", {"e.toml": "[workload]\nepochs = 2\n"}),
    case("efficiency-not-toml", ["paper", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: {tmp}/e.toml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, "
         "column 5)", {"e.toml": "not toml\n"}),
    case("efficiency-bad-noise", ["paper", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: {tmp}/e.toml: workload.efficiency.noise_scale: must be > 0, got -3",
         {"e.toml": "[workload.efficiency]\nnoise_scale = -3\nbase_batch = 16\n"}),
    case("efficiency-unknown-rule", ["paper", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: {tmp}/e.toml: workload.efficiency.lr_scaling: must be one of 'sqrt', 'linear', 'none', "
         "got 'cubic'",
         {"e.toml": "[workload.efficiency]\nnoise_scale = 3\nbase_batch = 16\nlr_scaling = 'cubic'\n"}),
    case("efficiency-without-target", ["paper", "--efficiency", "{tmp}/e.toml", "--objective", "time_to_target"],
         "--objective: time_to_target needs [workload.efficiency] with target_steps in the scenario ({tmp}/e.toml "
         "has none)", {"e.toml": "[workload.efficiency]\nnoise_scale = 3\nbase_batch = 16\n"}),
    case("out-and-a-bad-range", ["paper", "--out", "{tmp}/new/plan.json", "--batch-range", "64"],
         f"{RANGE} '64'"),  # refused before the folder for --out is made
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_plan_refuses_bad_input(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    check_refused(main, ["plan", *argv], line, tmp_path, capsys)
