"""``hetsim simulate``: every bad or hostile input and the one line it gets (exit status 2,
nothing written in ``--out``, no process left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import json

import pytest

from hetsim.cli.main import main
from tests.helpers import scenario_dict
from tests.refusals import BACKUP_ALONE, HUGE, ONE, WORKER_KEYS, case, check_refused, deep, toml, write_files

GOODPUT = ["--policy", "goodput", "--set", "workload.efficiency.noise_scale=100", "--set",
           "workload.efficiency.base_batch=32"]  # fmt: skip
EMPTY_DELAY = scenario_dict([{"per_sample_s": 0.001, "delay": {"dist": "empirical", "file": "empty.csv"}}])

CASES = [
    # options
    case("unknown-policy", ["--policy", "fastest"], "--policy: unknown policy 'fastest' (known: {policies})"),
    case("no-policy", ["--policy", ""], "--policy: no policy given"),
    case("policy-left-out", ["--policy", "equal,,dynamic"], "--policy: an empty name in 'equal,,dynamic'"),  # was run
    case("policy-twice", ["--policy", "equal,equal"], "--policy: a policy is listed twice"),
    case("seed-negative", ["--seed", "-1"], "--seed: must be >= 0, got -1"),
    case("seed-past-toml", ["--seed", str(2**63)],  # a file could not hold it: TOML's integers are 64-bit
         f"--seed: must be <= {2**63 - 1} (TOML's largest integer), got {2**63}"),
    case("seed-text", ["--seed", "abc"], "hetsim simulate: argument --seed: invalid int value: 'abc'"),
    # checked as the command starts (hetsim.engines.check_engine), not by argparse: listing the
    # registry's engines as choices would import them into every command line (see hetsim.cli.main)
    case("unknown-engine", ["--engine", "warp"], "--engine: unknown engine 'warp' (known: simpy, vector, auto)"),
    case("unknown-option", ["--bogus"], "unrecognized arguments: --bogus"),
    case("option-of-sweep", ["--jobs", "2"], "unrecognized arguments: --jobs"),
    case("set-without-equals", ["--set", "workload"], "--set: expected PATH=VALUE, got 'workload'"),
    case("set-without-path", ["--set", "=3"], "--set: expected PATH=VALUE, got '=3'"),
    case("out-in-a-file", ["--out", "{tmp}/file/out"], "--out: {tmp}/file is a file, not a folder",
         {"file": "x"}),
    case("sample-every-without-sample", ["--sample-every", "5"],  # was ignored: the whole trace was kept
         "--sample-every: only with --trace sample (it keeps every K-th step's rows)"),
    case("refused-with-an-unfitted-worker", ["--set", "workers.0.unfitted='a guess'", "--sample-every", "5"],
         "--sample-every: only with --trace sample (it keeps every K-th step's rows)"),  # and no warning before it
    case("out-is-a-file", ["--out", "{tmp}/file"], "--out: {tmp}/file exists and is not a folder", {"file": "x"}),
    case("out-empty", ["--out", "", "--force"],  # not the working folder
         "hetsim simulate: argument --out: an empty path: name a file or folder"),
    # types, bounds and names of scenario fields (--set)
    case("batch-text", ["--set", "workload.global_batch=abc"],
         "workload.global_batch: must be an integer, got a string ('abc')"),
    case("epochs-quoted", ["--set", 'workload.epochs="3"'], "workload.epochs: must be an integer, got a string ('3')"),
    case("epochs-empty", ["--set", "workload.epochs="], "workload.epochs: must be an integer, got a string ('')"),
    case("batch-float", ["--set", "workload.global_batch=1e3"],
         "workload.global_batch: must be an integer, got float (1000.0)"),
    case("batch-nan", ["--set", "workload.global_batch=nan"],
         "workload.global_batch: must be an integer, got float (nan)"),
    case("batch-bool", ["--set", "workload.global_batch=true"],
         "workload.global_batch: must be an integer, got a boolean (true)"),
    case("batch-zero", ["--set", "workload.global_batch=0"],
         "workload.global_batch: must be in [1, 1099511627776], got 0"),
    case("batch-negative", ["--set", "workload.global_batch=-5"],
         "workload.global_batch: must be in [1, 1099511627776], got -5"),
    case("batch-huge", ["--set", f"workload.global_batch={HUGE}"],
         f"workload.global_batch: must be in [1, 1099511627776], got {HUGE}"),
    case("batch-2^62", ["--set", f"workload.global_batch={2**62}"],
         f"workload.global_batch: must be in [1, 1099511627776], got {2**62}"),
    case("batch-below-workers", ["--set", "workload.global_batch=2"],
         "workload.global_batch: 2 is smaller than the number of workers (4)"),
    case("workers-10^10", ["--set", "workers.0.count=10000000000"],
         "workload.global_batch: 512 is smaller than the number of workers (10000000002)"),
    case("workers-10^10-big-batch", ["paper", "--set", "workers.0.count=10000000000",
                                      "--set", "workload.global_batch=100000000000",
                                      "--set", "workload.dataset_size=100000000000"],
         "workers.count: 10000000001 workers in all, more than the 1048576 a scenario can hold"),
    case("two-entries-one-name", ["--set", "workers.1.name='a100'"],  # plan.json's left_out could not say which
         "workers.1.name: 'a100' is workers.0's name too: give each [[workers]] entry its own (count = N makes N of "
         "one kind)"),
    case("caps-too-small", ["--set", "workers.0.max_batch=100", "--set", "workers.1.max_batch=8"],
         "workers.max_batch: the caps hold at most 216 samples per step, less than global_batch 512"),
    case("epochs-zero", ["--set", "workload.epochs=0"], "workload.epochs: must be in [1, 1099511627776], got 0"),
    case("dataset-zero", ["--set", "workload.dataset_size=0"],
         "workload.dataset_size: must be in [1, 1099511627776], got 0"),
    case("too-many-steps", ["paper", "--set", "workload.epochs=100000000"],
         "workload: 19500000000 steps, more than the 6.71e+07 a run can summarise"),
    case("trace-too-long", ["paper", "--set", "workload.epochs=200000", "--set", "workers.0.count=8"],
         "workload: 39000000 steps x 9 workers = 3.51e+08 trace rows, more than the 2.68e+08 a run can hold: "
         "fewer epochs or a larger global batch (or --trace none)"),
    case("step-too-long", ["paper", "--set", "workers.0.per_sample_s=1e300"],
         "workers.0: a step of 256 samples would take 2.56e+302 s: check the units"),
    # slowdown episodes and failures: what drawing them over the run would not finish (it hung, memory growing)
    case("episodes-every-nanosecond",
         ["paper", "--set", "workers.0.slowdown={every_s=1e-9, duration_s=1e-9, factor=2}"],
         "workers.0.slowdown: about 1.07e+12 episodes over the run (about 2.15e+03 s), more than the 1e+06 a run "
         "can draw: check the units"),
    case("episodes-factor-huge", ["paper", "--set", "workers.0.slowdown={every_s=1, duration_s=1, factor=1e12}"],
         "workers.0.slowdown.factor: 1e+12 makes a slowed step of 1e+12 s: check the units"),
    case("failures-every-nanosecond", ["paper", "--set", "workers.1.failure={mtbf_s=1e-9, repair_s=1e-9}"],
         "workers.1.failure: about 1.35e+12 episodes over the run (about 2.7e+03 s), more than the 1e+06 a run "
         "can draw: check the units"),
    case("gradient-negative", ["--set", "workload.gradient_mb=-1"], "workload.gradient_mb: must be >= 0, got -1"),
    case("seed-field-negative", ["--set", "seed=-1"], f"seed: must be in [0, {2**63 - 1}], got -1"),
    case("seed-field-past-toml", ["--set", f"seed={2**63}"], f"seed: must be in [0, {2**63 - 1}], got {2**63}"),
    case("name-int", ["--set", "name=3"], "name: must be a string, got int (3)"),
    case("unknown-key", ["--set", "colour=1"],
         "colour: unknown key (allowed: name, description, seed, workload, network, workers, policy)"),
    case("unknown-worker-key", ["--set", "workers.0.colour=1"],
         f"workers.0.colour: unknown key (allowed: {WORKER_KEYS})"),
    case("no-such-worker", ["--set", "workers.9.per_sample_s=1"], "workers.9: no entry '9' in a list of 2"),
    case("no-workers", ["--set", "workers=[]"], "workers: must be a non-empty list of [[workers]] tables"),
    case("per-sample-negative", ["--set", "workers.0.per_sample_s=-1"], "workers.0.per_sample_s: must be > 0, got -1"),
    case("per-sample-zero", ["--set", "workers.0.per_sample_s=0"], "workers.0.per_sample_s: must be > 0, got 0"),
    case("per-sample-nan", ["--set", "workers.0.per_sample_s=nan"], "workers.0.per_sample_s: must be finite, got nan"),
    case("per-sample-inf", ["--set", "workers.0.per_sample_s=inf"], "workers.0.per_sample_s: must be finite, got inf"),
    case("count-zero", ["--set", "workers.0.count=0"], "workers.0.count: must be >= 1, got 0"),
    case("max-batch-zero", ["--set", "workers.0.max_batch=0"], "workers.0.max_batch: must be >= 1, got 0"),
    case("slowdown-group-empty", ["--set", "workers.0.slowdown={every_s=5, duration_s=1, factor=2, group=''}"],
         "workers.0.slowdown.group: must not be empty, got ''"),  # was a group of its own, shared by every ''
    case("worker-name-blank", ["--set", "workers.0.name=' '"], "workers.0.name: must not be empty, got ' '"),
    case("own-policy-params-do-not-fit", ["--set", "policy.name=backup", "--set", "policy.backups=4"],  # was left out
         "policy.backups: must be smaller than the number of workers (4), got 4"),  # with a note, exit 0
    case("unfitted-number", ["--set", "workers.0.unfitted=3"], "workers.0.unfitted: must be a string, got int (3)"),
    case("delay-negative", ["--set", "workers.0.delay={dist='constant', value=-0.1}"],
         "workers.0.delay.value: must be >= 0, got -0.1"),
    case("delay-nan", ["--set", "workers.0.delay={dist='constant', value=nan}"],
         "workers.0.delay.value: must be finite, got nan"),
    case("delay-not-a-table", ["--set", "workers.0.delay=fast"],
         "workers.0.delay: must be a table, got a string ('fast')"),
    case("unknown-distribution", ["--set", "workers.0.delay={dist='weibull', shape=2}"],
         "workers.0.delay.dist: unknown distribution 'weibull' (known: {distributions})"),
    case("distribution-missing-parameter", ["--set", "workers.0.delay={dist='gamma', shape=4}"],
         "workers.0.delay.scale: missing (required)"),
    case("distribution-bad-parameter", ["--set", "workers.0.delay={dist='gamma', shape=-1, scale=1}"],
         "workers.0.delay.shape: must be > 0, got -1"),
    case("noise-negative", ["--set", "workers.0.noise={dist='lognormal', sigma=-1}"],
         "workers.0.noise.sigma: must be >= 0, got -1"),
    case("noise-persistence-1", ["--set", "workers.0.noise={dist='lognormal', sigma=0.1, persistence=1}"],
         "workers.0.noise.persistence: must be in [0, 1), got 1"),
    case("slowdown-every-zero", ["--set", "workers.0.slowdown={every_s=0, duration_s=1, factor=2}"],
         "workers.0.slowdown.every_s: must be > 0, got 0"),
    case("failure-negative", ["--set", "workers.0.failure={mtbf_s=-1, repair_s=1}"],
         "workers.0.failure.mtbf_s: must be > 0, got -1"),
    case("unknown-network", ["--set", "network.kind=carrier-pigeon"],
         "network.kind: unknown network 'carrier-pigeon' (known: {networks})"),
    case("network-latency-negative", ["--set", "network={kind='ring', latency_s=-1, bandwidth_gbps=1}"],
         "network.latency_s: must be >= 0, got -1"),
    case("network-bandwidth-zero", ["--set", "network={kind='ring', latency_s=0, bandwidth_gbps=0}"],
         "network.bandwidth_gbps: must be > 0, got 0"),
    case("hierarchical-without-nodes", ["--set", "network={kind='hierarchical'}"],
         "workers.0.node: missing (the hierarchical network needs every worker's node)"),
    case("cost-and-affine", ["--set", "workers.0.cost={model='warp'}"],
         "workers.0.overhead_s: give either a cost table or overhead_s/per_sample_s (with --set, replace the whole "
         "entry: workers.0={...})"),
    # policies and their parameters
    case("unknown-policy-name", ["--set", "policy.name=fastest", "--policy", "equal"],
         "policy.name: unknown policy 'fastest' (known: {policies})"),
    case("policy-parameter-of-another-policy", ["workstation", "--set", "policy.alpha=0.1", "--policy", "equal"],
         "policy.alpha: not a parameter of the scenario's policy 'dynamic' (its parameters: none); for another "
         "policy's, set policy.name too"),
    case("policy-parameter-named", ["--set", "policy={name='adaptive', forgetting=5}", "--policy", "adaptive"],
         "policy.forgetting: must be in (0, 1], got 5"),
    case("backups-too-many", ["--set", "policy={name='backup', backups=5}", "--policy", "backup"],
         "policy.backups: must be smaller than the number of workers (4), got 5"),
    case("backup-one-worker", ["{tmp}/one.toml", "--policy", "equal,backup"],
         BACKUP_ALONE, {"one.toml": toml(ONE)}),
    case("policy-parameter-unnamed", ["paper", "--set", "policy={name='adaptive', forgetting=5}", "--set",
                                      "workload.epochs=1"], "policy.forgetting: must be in (0, 1], got 5"),
    case("policy-parameter-other-policy", ["paper", "--set", "policy={name='adaptive', forgetting=5}", "--policy",
                                           "equal", "--set", "workload.epochs=1"],
         "policy.forgetting: must be in (0, 1], got 5"),
    # statistical efficiency and goodput
    case("goodput-without-efficiency", ["paper", "--policy", "goodput"],
         "workload.efficiency: missing: policy 'goodput' chooses the global batch by statistical efficiency "
         "(give noise_scale and base_batch)"),
    case("noise-scale-zero", ["paper", *GOODPUT, "--set", "workload.efficiency.noise_scale=0"],
         "workload.efficiency.noise_scale: must be > 0, got 0"),
    case("noise-scale-negative", ["paper", *GOODPUT, "--set", "workload.efficiency.noise_scale=-5"],
         "workload.efficiency.noise_scale: must be > 0, got -5"),
    case("noise-scale-nan", ["paper", *GOODPUT, "--set", "workload.efficiency.noise_scale=nan"],
         "workload.efficiency.noise_scale: must be finite, got nan"),
    case("noise-scale-schedule", ["paper", *GOODPUT, "--set", "workload.efficiency.noise_scale=[[0, 100], [0, 200]]"],
         "workload.efficiency.noise_scale: progress must increase: point 1 (0) is not after 0"),
    case("base-batch-missing", ["paper", "--policy", "goodput", "--set", "workload.efficiency.noise_scale=100"],
         "workload.efficiency.base_batch: missing (required)"),
    case("base-batch-zero", ["paper", *GOODPUT, "--set", "workload.efficiency.base_batch=0"],
         "workload.efficiency.base_batch: must be in [1, 1099511627776], got 0"),
    case("target-steps-negative", ["paper", *GOODPUT, "--set", "workload.efficiency.target_steps=-3"],
         "workload.efficiency.target_steps: must be > 0, got -3"),
    case("efficiency-unknown-key", ["paper", *GOODPUT, "--set", "workload.efficiency.speed=1"],
         "workload.efficiency.speed: unknown key (allowed: noise_scale, grad_sqr, grad_var, base_batch, target_steps, "
         "batch_exponent, measured_batch, lr_scaling, lr, optimizer, measured_on, fit_batches, noise_scale_sd, "
         "batch_exponent_sd, target_steps_sd, covariance, run_sd, run_dof)"),
    case("min-batch-above-max", ["paper", *GOODPUT, "--set", "policy.name=goodput", "--set", "policy.min_batch=512",
                                 "--set", "policy.max_batch=256"], "policy.max_batch: must be >= 512, got 256"),
    case("min-batch-zero", ["paper", *GOODPUT, "--set", "policy.name=goodput", "--set", "policy.min_batch=0"],
         "policy.min_batch: must be >= 1, got 0"),
    # scenario files
    case("no-such-scenario", ["no/such/file.toml"],
         "scenario: 'no/such/file.toml' is neither a file nor a built-in scenario ({builtins})"),
    case("not-toml", ["{tmp}/s.toml"],
         "{tmp}/s.toml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, column 6)",
         {"s.toml": "this is not = = toml"}),
    case("yaml", ["{tmp}/s.yaml"],
         "{tmp}/s.yaml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, column 5)",
         {"s.yaml": "name: x\n"}),
    case("binary", ["{tmp}/s.toml"],
         "{tmp}/s.toml: not valid TOML: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
         {"s.toml": b"\xff\xfe\x00garbage"}),
    case("not-json", ["{tmp}/s.json"], "{tmp}/s.json: not valid JSON: Expecting value: line 1 column 7 (char 6)",
         {"s.json": '{"a": '}),
    case("empty-toml", ["{tmp}/s.toml"], "workload: missing (required)", {"s.toml": ""}),
    case("empty-json", ["{tmp}/s.json"], "{tmp}/s.json: not valid JSON: Expecting value: line 1 column 1 (char 0)",
         {"s.json": ""}),
    case("json-list", ["{tmp}/s.json"], "{tmp}/s.json: the file must hold a table (object) at the top",
         {"s.json": "[1, 2]"}),
    case("json-without-workload", ["{tmp}/s.json"], "workload: missing (required)",
         {"s.json": json.dumps({"name": "x"})}),
    case("missing-dataset-size", ["{tmp}/s.toml"], "workload.dataset_size: missing (required)",
         {"s.toml": "name = 'x'\n[workload]\nglobal_batch = 8\n"}),
    case("byte-order-mark", ["{tmp}/s.toml"],
         "{tmp}/s.toml: starts with a byte-order mark (BOM): save it as UTF-8 without one",
         {"s.toml": "\ufeff" + toml(ONE)}),
    case("deep-toml", ["{tmp}/deep.toml"], "{tmp}/deep.toml: not valid TOML: nested too deeply",
         {"deep.toml": deep(".toml")}),
    case("deep-json", ["{tmp}/deep.json"], "{tmp}/deep.json: not valid JSON: nested too deeply",
         {"deep.json": deep(".json")}),
    case("a-folder", ["{tmp}/folder"], "{tmp}/folder: a folder, not a file", {"folder/x": ""}),
    case("scenario-empty", [""], "scenario: empty: give a file or a built-in scenario ({builtins})"),
    case("empty-measurements", ["{tmp}/s.toml"], "workers.0.delay.file: needs at least one value",
         {"empty.csv": "", "s.toml": toml(EMPTY_DELAY)}),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_simulate_refuses_bad_input(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    out = [] if "--out" in argv else ["--out", "{tmp}/out"]
    check_refused(main, ["simulate", *argv, *out], line, tmp_path, capsys)


def test_force_without_out_is_refused(tmp_path, capsys, monkeypatch):
    """--force alone replaced nothing and said nothing (the cases above all write --out)."""
    monkeypatch.chdir(tmp_path)
    check_refused(main, ["simulate", "--force"], "--force: only with --out (it replaces the results in that folder)",
                  tmp_path, capsys)  # fmt: skip
