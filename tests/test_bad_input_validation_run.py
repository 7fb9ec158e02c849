"""``validation run``: every bad or hostile option and run file, and the one line it gets (exit
status 2, before any rank starts: no run folder, no process left;
:func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import itertools
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from hetsim.core.provenance import COMMAND_ENV
from tests.refusals import HUGE, case, check_refused, deep, write_files
from validation.cli import main

KNOWN_DISTRIBUTIONS = "(known: {distributions})"
RUN_KEYS = ("combine, comm, contention, cpus, delay, devices, efficiency, epochs, eval_every, global_batch, lr, "
            "max_batch, "
            "momentum, "
            "noise_scale, per_sample_delay, policies, probe_fractions, probe_repeats, profile, seed, slowdown, "
            "target_accuracy, "
            "threads, timeout_s, warmup_steps, workload, world_size")  # fmt: skip
# these two are refused only by the ranks, once started: until fixed, they start processes
STARTS_RANKS = pytest.mark.multiprocess
# workload files (--workload FILE.py:ATTR): 12 training samples, a model made by ``net()``
WORKLOAD_FILE = """
import torch
from torch import nn
from validation.workloads.base import Workload

def net():
    return nn.Linear(3, 2)

x, y = torch.zeros(16, 3), torch.zeros(16, dtype=torch.int64)
WORKLOAD = Workload.from_parts("tiny", lambda: net(), (x[:12], y[:12]), (x[12:], y[12:]), nn.functional.cross_entropy)
"""
REGRESSION_FILE = WORKLOAD_FILE.replace("dtype=torch.int64", "dtype=torch.float32").replace("cross_entropy", "mse_loss")
BATCHNORM_NET = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 3, 3), nn.BatchNorm2d(3)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.layer1 = nn.Conv2d(3, 3, 3), nn.Sequential(Block(), Block())

net = Net
"""
INSTEAD = ("whose batch statistics make a rank's gradient depend on how the global batch is cut: use a per-sample "
           "normalisation (torch.nn.GroupNorm, torch.nn.LayerNorm) or weight normalisation "
           "(torch.nn.utils.parametrizations.weight_norm) instead")  # fmt: skip
ATTR_FORMS = "FILE.py:ATTR or MODULE:ATTR"

GOODPUT_RUN = ("--policies", "equal,goodput", "--noise-scale")  # goodput chooses its batch up to --max-batch

CASES = [
    # ranks, epochs, batch, learning rate, seed
    case("world-size-zero", ["--world-size", "0"], "--world-size: must be >= 1, got 0"),
    case("world-size-negative", ["--world-size", "-1"], "--world-size: must be >= 1, got -1"),
    case("world-size-text", ["--world-size", "two"], "validation run: argument --world-size: invalid int value: 'two'"),
    case("world-size-10^10", ["--world-size", "10000000000"],
         "--global-batch: 128 is smaller than the world size (10000000000)"),
    case("epochs-zero", ["--epochs", "0"], "--epochs: must be in [1, 1000000], got 0"),
    case("epochs-negative", ["--epochs", "-1"], "--epochs: must be in [1, 1000000], got -1"),
    case("epochs-huge", ["--world-size", "1", "--epochs", str(HUGE)], f"--epochs: must be in [1, 1000000], got {HUGE}"),
    case("batch-zero", ["--global-batch", "0"], "--global-batch: must be >= 1, got 0"),
    case("batch-below-ranks", ["--global-batch", "1"], "--global-batch: 1 is smaller than the world size (2)"),
    case("batch-above-data", ["--global-batch", "5000"],
         "--global-batch: 5000 is more than the 1438 training samples of digits-cnn"),
    case("batch-2^62", ["--global-batch", str(2**62)],
         f"--global-batch: {2**62} is more than the 1438 training samples of digits-cnn"),
    case("batch-above-transformer-data", ["--workload", "transformer", "--global-batch", "4096"],
         "--global-batch: 4096 is more than the 2048 training samples of transformer"),
    case("lr-nan", ["--lr", "nan"], "--lr: must be finite, got nan"),
    case("lr-inf", ["--lr", "inf"], "--lr: must be finite, got inf"),
    case("lr-negative", ["--lr", "-0.1"], "--lr: must be in [0, 1e+06], got -0.1"),
    case("seed-negative", ["--seed", "-1"], f"--seed: must be in [0, {2**63 - 1}], got -1"),
    case("seed-huge", ["--world-size", "1", "--seed", str(10**23)],
         f"--seed: must be in [0, {2**63 - 1}], got {10**23}"),
    case("timeout-zero", ["--timeout-s", "0"], "--timeout-s: must be in [1, 86400], got 0"),
    case("timeout-nan", ["--timeout-s", "nan"], "--timeout-s: must be finite, got nan"),
    case("timeout-inf", ["--timeout-s", "inf"], "--timeout-s: must be finite, got inf"),
    # past what a run can take: tracebacks from time.sleep, timedelta and float32 before
    case("out-empty", ["--out", ""], "validation run: argument --out: an empty path: name a file or folder"),
    case("timeout-huge", ["--timeout-s", "1e300"], "--timeout-s: must be in [1, 86400], got 1e+300"),
    case("lr-huge", ["--lr", "1e300"], "--lr: must be in [0, 1e+06], got 1e+300"),
    case("delay-huge", ["--delay", "1=1e12"], "--delay 1: a mean of 1e+12 s a step, more than 60: check the units"),
    case("delay-mean-huge", ["--delay", "1=exponential:1e12"],
         "--delay 1: a mean of 1e+12 s a step, more than 60: check the units"),
    case("per-sample-delay-huge", ["--per-sample-delay", "1=1e12"],
         "--per-sample-delay: must be in [0, 60], got 1e+12"),
    case("slowdown-huge", ["--slowdown", "1=1e300"], "--slowdown: must be in [1, 1000], got 1e+300"),
    case("probe-repeats-negative", ["--probe-repeats", "-1"], "--probe-repeats: must be in [0, 1000000], got -1"),
    case("eval-every-negative", ["--eval-every", "-3"], "--eval-every: must be in [0, 1000000], got -3"),
    case("eval-every-text", ["--eval-every", "often"], "--eval-every: must be an integer, got a string ('often')"),
    case("eval-every-within-profiled-steps", ["--profile", "3", "--eval-every", "4"],
         "--eval-every: 4 would evaluate within the 4 steps --profile records (its warm-up step included): use "
         "more than 4"),
    case("optimal-without-probe", ["--policies", "optimal", "--probe-repeats", "0"],
         "--probe-repeats: optimal needs the ranks' costs, which come from the probe: use at least 1"),
    # policies, workloads, devices, communication
    case("unknown-policy", ["--policies", "equal,nope"], "--policies: unknown policy 'nope' (known: {policies})"),
    case("probe-as-policy", ["--policies", "probe"], "--policies: 'probe' is the calibration phase, not a policy"),
    case("no-policy", ["--policies", ""], "--policies: no policy given"),
    case("policy-twice", ["--policies", "equal,equal"], "--policies: a policy is listed twice"),
    case("goodput-without-noise-scale", ["--policies", "goodput"],
         "--policies: goodput picks the batch by the noise scale: it needs --noise-scale (or --efficiency FILE) and "
         "--comm flat"),
    case("goodput-with-ddp", ["--policies", "goodput", "--noise-scale", "--comm", "ddp"],
         "--policies: goodput picks the batch by the noise scale: it needs --noise-scale (or --efficiency FILE) and "
         "--comm flat"),
    case("efficiency-missing", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: no such file: {tmp}/e.toml"),
    case("efficiency-not-toml", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml"],  # the path once, not twice
         "--efficiency: {tmp}/e.toml: not valid TOML: Invalid value (at end of document)", {"e.toml": "x = ["}),
    case("efficiency-empty", ["--policies", "goodput", "--efficiency", ""],
         "validation run: argument --efficiency: an empty path: name a file or folder"),
    case("efficiency-without-table", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: {tmp}/e.toml has no [workload.efficiency] table", {"e.toml": "[workload]\nname = 'x'\n"}),
    case("efficiency-bad-noise", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: {tmp}/e.toml: workload.efficiency.noise_scale: must be > 0, got -3",
         {"e.toml": "[workload.efficiency]\nnoise_scale = -3\nbase_batch = 16\n"}),
    case("efficiency-other-rule", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: fitted under the 'linear' learning-rate rule; this trainer scales the rate by the root of the "
         "batch (fit a batch-sweep of --lr-scaling sqrt)",
         {"e.toml": "[workload.efficiency]\nnoise_scale = 40\nbase_batch = 128\nlr_scaling = 'linear'\n"}),
    case("efficiency-other-base", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml"],
         "--efficiency: fitted with the learning rate set at global batch 16; run at --global-batch 16 with the "
         "sweep's --lr (or fit one at 128)", {"e.toml": "[workload.efficiency]\nnoise_scale = 40\nbase_batch = 16\n"}),
    case("efficiency-other-rate", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml", "--comm", "flat"],
         "--efficiency: measured with the learning rate 0.03 at global batch 32, which the square-root rule makes "
         "0.06 at --global-batch 128: run with --lr 0.06 (here 0.05)",
         {"e.toml": "[workload.efficiency]\nnoise_scale = 40\nbase_batch = 32\nlr = 0.03\nlr_scaling = 'sqrt'\n"}),
    case("efficiency-other-optimizer", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml", "--comm", "flat"],
         "--efficiency: measured with adam; this trainer runs SGD (fit a batch-sweep of --optimizer sgd)",
         {"e.toml": "[workload.efficiency]\nnoise_scale = 40\nbase_batch = 128\noptimizer = 'adam'\n"}),
    case("noise-scale-with-ddp", ["--noise-scale", "--comm", "ddp"],
         "--noise-scale: is measured from each rank's own gradient on the flat path: use --comm flat"),
    case("noise-scale-one-rank", ["--noise-scale", "--world-size", "1"],
         "--noise-scale: is measured from two or more ranks' gradients: use --world-size 2 or more"),
    case("efficiency-with-ddp", ["--policies", "goodput", "--efficiency", "{tmp}/e.toml", "--comm", "ddp"],
         "--policies: goodput picks the batch by the noise scale: it needs --noise-scale (or --efficiency FILE) and "
         "--comm flat", {"e.toml": "[workload.efficiency]\nnoise_scale = 30\nbase_batch = 16\n"}),
    case("max-batch-below", [*GOODPUT_RUN, "--max-batch", "64"], "--max-batch: must be in [128, 1438], got 64"),
    case("max-batch-below-global", [*GOODPUT_RUN, "--max-batch", "200", "--global-batch", "256"],
         "--max-batch: must be in [256, 1438], got 200"),
    case("max-batch-above", [*GOODPUT_RUN, "--max-batch", "2000"], "--max-batch: must be in [128, 1438], got 2000"),
    case("max-batch-text", [*GOODPUT_RUN, "--max-batch", "lots"],
         "--max-batch: must be an integer, got a string ('lots')"),
    case("max-batch-without-goodput", ["--max-batch", "256"],  # it was ignored
         "--max-batch: only with a policy that chooses its global batch (goodput)"),
    case("max-batch-float", [*GOODPUT_RUN, "--max-batch", "1e3"],
         "--max-batch: must be an integer, got a string ('1e3')"),
    case("target-zero", ["--target-accuracy", "0"], "--target-accuracy: must be in (0, 1], got 0"),
    case("target-above-one", ["--target-accuracy", "1.5"], "--target-accuracy: must be in (0, 1], got 1.5"),
    case("target-nan", ["--target-accuracy", "nan"], "--target-accuracy: must be finite, got nan"),
    case("unknown-workload", ["--workload", "bert"],
         f"--workload: unknown workload 'bert' (known: digits-cnn, resnet18, transformer; or {ATTR_FORMS})"),
    # workloads of one's own: FILE.py:ATTR, MODULE:ATTR
    case("workload-file-missing", ["--workload", "{tmp}/nope.py:WORKLOAD"], "--workload: {tmp}/nope.py: no such file"),
    case("workload-file-without-attribute", ["--workload", "{tmp}/w.py"],
         "--workload: '{tmp}/w.py' names a file but not what in it is the workload: use {tmp}/w.py:ATTR",
         {"w.py": WORKLOAD_FILE}),
    case("workload-empty-attribute", ["--workload", "{tmp}/w.py:"],
         f"--workload: expected {ATTR_FORMS} (ATTR a Python name), got '{{tmp}}/w.py:'", {"w.py": WORKLOAD_FILE}),
    case("workload-empty", ["--workload", ""], f"--workload: expected a workload name, {ATTR_FORMS}, got ''"),
    case("workload-not-python", ["--workload", "{tmp}/w.txt:WORKLOAD"],
         "--workload: {tmp}/w.txt: not a Python file (.py)", {"w.txt": WORKLOAD_FILE}),
    case("workload-folder", ["--workload", "{tmp}/d.py:WORKLOAD"], "--workload: {tmp}/d.py: not a Python file (.py)",
         {"d.py/x": ""}),
    case("workload-file-raises", ["--workload", "{tmp}/w.py:WORKLOAD"],
         "--workload: cannot import {tmp}/w.py: ZeroDivisionError: division by zero", {"w.py": "WORKLOAD = 1 / 0\n"}),
    case("workload-file-syntax", ["--workload", "{tmp}/w.py:WORKLOAD"],
         "--workload: cannot import {tmp}/w.py: SyntaxError: invalid syntax (w.py, line 1)",
         {"w.py": "WORKLOAD = =\n"}),
    case("workload-file-imports-nothing", ["--workload", "{tmp}/w.py:WORKLOAD"],
         "--workload: cannot import {tmp}/w.py: ModuleNotFoundError: No module named 'no_such_package'",
         {"w.py": "import no_such_package\n"}),
    case("workload-file-exits", ["--workload", "{tmp}/w.py:WORKLOAD"],
         "--workload: cannot import {tmp}/w.py: SystemExit: 3", {"w.py": "import sys\nsys.exit(3)\n"}),
    case("workload-from-parts-empty", ["--workload", "{tmp}/w.py:WORKLOAD"],
         "--workload: cannot import {tmp}/w.py: ValueError: Workload.from_parts: train: has no samples",
         {"w.py": WORKLOAD_FILE.replace("x[:12], y[:12]", "x[:0], y[:0]")}),
    case("workload-attribute-missing", ["--workload", "{tmp}/w.py:MINE"],
         "--workload: {tmp}/w.py has no attribute 'MINE' (its workloads: WORKLOAD)", {"w.py": WORKLOAD_FILE}),
    case("workload-an-int", ["--workload", "{tmp}/w.py:N"],
         "--workload: {tmp}/w.py:N is an int, not a Workload (nor a zero-argument factory returning one)",
         {"w.py": WORKLOAD_FILE + "N = 3\n"}),
    case("workload-factory-returns-a-model", ["--workload", "{tmp}/w.py:net"],
         "--workload: {tmp}/w.py:net() returned a Linear, not a Workload", {"w.py": WORKLOAD_FILE}),
    case("workload-factory-needs-arguments", ["--workload", "{tmp}/w.py:make"],
         "--workload: {tmp}/w.py:make() failed: TypeError: make() missing 1 required positional argument: 'n'",
         {"w.py": WORKLOAD_FILE + "def make(n):\n    return WORKLOAD\n"}),
    case("workload-model-factory-exits", ["--workload", "{tmp}/w.py:WORKLOAD"],  # exit status 0, silent
         "--workload: tiny: building the model failed: SystemExit: 0",
         {"w.py": WORKLOAD_FILE.replace("return nn.Linear(3, 2)", "raise SystemExit(0)")}),
    case("workload-factory-exits", ["--workload", "{tmp}/w.py:bye"],  # ended the command, exit status 0, silent
         "--workload: {tmp}/w.py:bye() failed: SystemExit: 0",
         {"w.py": WORKLOAD_FILE + "def bye():\n    raise SystemExit(0)\n"}),
    case("workload-model-factory-fails", ["--workload", "{tmp}/w.py:WORKLOAD"],
         "--workload: tiny: building the model failed: TypeError: Workload.from_parts: model_factory() returned a str, "
         "not a torch.nn.Module", {"w.py": WORKLOAD_FILE.replace("return nn.Linear(3, 2)", "return 'a model'")}),
    case("workload-batchnorm", ["--workload", "{tmp}/w.py:WORKLOAD"],
         f"--workload: tiny: layer1.0.bn1 is a BatchNorm2d (and 1 more BatchNorm layer(s)), {INSTEAD}",
         {"w.py": WORKLOAD_FILE + BATCHNORM_NET}),
    case("workload-regression-target", ["--workload", "{tmp}/w.py:WORKLOAD", "--global-batch", "4",
                                        "--target-accuracy", "0.9"],
         "--target-accuracy: tiny's labels are not classes (floating point, a regression's): it has a held-out loss "
         "and no accuracy to reach",
         {"w.py": REGRESSION_FILE}),
    case("workload-batch-above-its-data", ["--workload", "{tmp}/w.py:WORKLOAD", "--global-batch", "13"],
         "--global-batch: 13 is more than the 12 training samples of tiny", {"w.py": WORKLOAD_FILE}),
    case("workload-module-missing", ["--workload", "no_such_package.models:WORKLOAD"],
         "--workload: cannot import no_such_package.models: ModuleNotFoundError: No module named 'no_such_package'"),
    case("workload-module-name", ["--workload", "no such:WORKLOAD"],
         "--workload: 'no such' is neither a module name nor a .py file"),
    case("workload-module-attribute-missing", ["--workload", "validation.workloads.digits:MINE"],
         "--workload: validation.workloads.digits has no attribute 'MINE' (its workloads: WORKLOAD)"),
    case("workload-module-class-batch", ["--workload", "validation.workloads.transformer:ByteTransformer",
                                         "--global-batch", "2049"],
         "--global-batch: 2049 is more than the 2048 training samples of transformer"),
    case("workload-in-run-file", ["{tmp}/run.toml"], "workload: {tmp}/nope.py: no such file",
         {"run.toml": 'workload = "{tmp}/nope.py:WORKLOAD"\n'}),
    case("unknown-device", ["--devices", "tpu"], "--devices: unknown device 'tpu' (use cpu, cuda or cuda:N)"),
    case("devices-stray-comma", ["--devices", "cpu,"], "--devices: an empty item in 'cpu,'"),  # ran on 'cpu'
    case("momentum-too-large", ["{tmp}/run.toml"], "momentum: must be in [0, 1), got 5",
         {"run.toml": "momentum = 5\n"}),  # trained at chance accuracy
    case("devices-for-more-ranks", ["--devices", "cpu,cpu,cpu"],
         "--devices: 3 devices for 2 ranks (give one for all, or one per rank)"),
    case("no-such-cuda-device", ["--world-size", "1", "--devices", "cuda:99"],
         "--devices: rank 0 wants cuda:99 but this machine has {ncuda} CUDA device(s)"),
    case("two-ranks-on-one-gpu", ["--devices", "cuda:0,cuda:0"],
         "--devices: ranks 0 and 1 are both on cuda:0: one rank per GPU (put the others on other GPUs or on cpu)"),
    case("ddp-mixed-devices", ["--comm", "ddp", "--devices", "cuda:0,cpu"],
         "--comm: ddp needs every rank on one kind of device; use --comm flat for mixed devices"),
    case("unknown-comm", ["--comm", "nccl"],
         "validation run: argument --comm: invalid choice: 'nccl' (choose from 'flat', 'ddp')"),
    case("unknown-combine", ["--combine", "sum"],
         "validation run: argument --combine: invalid choice: 'sum' (choose from 'weighted', 'policy')"),
    # injected delays and slowdowns
    case("delay-without-rank", ["--delay", "1"], "--delay: expected RANK=VALUE, got '1'"),
    case("delay-rank-text", ["--delay", "x=0.1"], "--delay: rank must be an integer, got 'x'"),
    case("delay-rank-out-of-range", ["--delay", "5=0.1"], "--delay: rank 5 is outside 0..1"),
    case("delay-unknown-distribution", ["--delay", "1=weibull:2"],
         f"--delay 1: unknown distribution 'weibull' {KNOWN_DISTRIBUTIONS}"),
    case("delay-negative", ["--delay", "1=-0.1"], "--delay 1: must be >= 0, got -0.1"),
    case("delay-nan", ["--delay", "1=nan"], "--delay 1: must be finite, got nan"),
    case("delay-inf", ["--delay", "1=inf"], "--delay 1: must be finite, got inf"),
    case("delay-bad-parameter", ["--delay", "1=exponential:-1"], "--delay 1.mean: must be > 0, got -1"),
    case("delay-missing-parameter", ["--delay", "1=uniform:1"],
         "--delay 1: uniform takes 2 parameter(s) (low, high), got 1"),
    case("per-sample-delay-negative", ["--per-sample-delay", "1=-1"], "--per-sample-delay: must be in [0, 60], got -1"),
    case("per-sample-delay-nan", ["--per-sample-delay", "1=nan"], "--per-sample-delay: must be finite, got nan"),
    case("per-sample-delay-rank", ["--per-sample-delay", "9=0.1"], "--per-sample-delay: rank 9 is outside 0..1"),
    case("slowdown-below-one", ["--slowdown", "1=0.5"], "--slowdown: must be in [1, 1000], got 0.5"),
    case("slowdown-inf", ["--slowdown", "1=inf"], "--slowdown: must be finite, got inf"),
    case("slowdown-rank-text", ["--slowdown", "x=2"], "--slowdown: rank must be an integer, got 'x'"),
    case("slowdown-list", ["--slowdown", "0=1.5,1=0.5"],  # comma-separated items
         "--slowdown: must be in [1, 1000], got 0.5"),
    # placement
    case("threads-zero", ["--threads", "0=0"], "--threads: must be >= 1, got 0"),
    case("threads-rank-out-of-range", ["--threads", "2=1"], "--threads: rank 2 is outside 0..1"),
    case("threads-more-than-cpus", ["--threads", "0=1000000"],
         "--threads: rank 0 asks for 1000000 threads but this machine has {ncpus} CPUs"),
    case("cpus-rank-twice", ["--cpus", "0=0,0=1"], "--cpus: rank 0 is given twice"),  # the last one won, silently
    case("delay-rank-twice", ["--delay", "1=0", "--delay", "1=0.01"], "--delay: rank 1 is given twice"),
    case("cpus-empty-range", ["--cpus", "0=1-0"], "--cpus: empty CPU range '1-0'"),
    case("cpus-text", ["--cpus", "0=a"], "--cpus: expected CPU ids like 0, 0-3 or 0+2, got 'a'"),
    case("cpus-negative", ["--cpus", "0=-1"], "--cpus: expected CPU ids like 0, 0-3 or 0+2, got '-1'"),
    case("cpus-missing", ["--cpus", "0=99999"], "--cpus: CPU 99999 does not exist here (this machine's CPUs: {cpus})"),
    case("contention-without-rank", ["--contention", "1"], "--contention: expected RANK=VALUE, got '1'"),
    case("contention-above-eight", ["--contention", "0=9"], "--contention: must be in (0, 8], got 9"),
    case("contention-zero", ["--contention", "0=0"], "--contention: must be in (0, 8], got 0"),
    case("contention-nan", ["--contention", "0=nan"], "--contention: must be finite, got nan"),
    # --out
    case("out-in-a-file", ["--out", "{tmp}/file/run"], "--out: cannot write in {tmp}/file/run: Not a directory",
         {"file": "x"}),
    case("out-is-a-file", ["--out", "{tmp}/file"], "--out: {tmp}/file exists and is not a folder", {"file": "x"}),
    case("out-not-empty", ["--out", "{tmp}/full"], "--out: {tmp}/full exists and is not an empty folder",
         {"full/x": ""}),
    # run files
    case("no-such-run-file", ["no-such-file.toml"], "no-such-file.toml: no such file"),
    case("run-file-not-toml", ["{tmp}/run.toml"], "{tmp}/run.toml: not valid TOML: Invalid value (at line 1, column 7)",
         {"run.toml": "not = = toml"}),
    case("run-file-json-list", ["{tmp}/run.json"], "{tmp}/run.json: the file must hold a table (object) at the top",
         {"run.json": "[1]"}),
    case("run-file-empty", ["{tmp}/run.toml", "--epochs", "0"], "--epochs: must be in [1, 1000000], got 0",
         {"run.toml": ""}),
    case("run-file-bom", ["{tmp}/run.toml"],
         "{tmp}/run.toml: starts with a byte-order mark (BOM): save it as UTF-8 without one",
         {"run.toml": "\ufeffepochs = 2\n"}),
    case("run-file-deep", ["{tmp}/run.toml"], "{tmp}/run.toml: not valid TOML: nested too deeply",
         {"run.toml": deep(".toml")}),
    case("run-file-unknown-key", ["{tmp}/run.toml"], f"speed: unknown key (known: {RUN_KEYS})",
         {"run.toml": "epochs = 2\nspeed = 3\n"}),
    case("run-file-type", ["{tmp}/run.toml"], "epochs: must be a number, got a string ('two')",
         {"run.toml": 'epochs = "two"\n'}),
    case("run-file-number-as-text", ["{tmp}/run.toml"], "lr: must be a number, got a string ('0.1')",  # was taken
         {"run.toml": 'lr = "0.1"\n'}),
    case("run-file-optional-number-as-text", ["{tmp}/run.toml"],  # a key whose default is None slipped through
         "target_accuracy: must be a number, got a string ('0.5')", {"run.toml": 'target_accuracy = "0.5"\n'}),
    case("run-file-zero", ["{tmp}/run.toml"], "epochs: must be in [1, 1000000], got 0", {"run.toml": "epochs = 0\n"}),
    case("run-file-huge", ["{tmp}/run.toml"], "epochs: must be an integer, got float (1e+308)",  # not --epochs
         {"run.toml": "epochs = 1e308\n"}),
    case("run-file-delay", ["{tmp}/run.toml"], f"--delay 1: unknown distribution 'weibull' {KNOWN_DISTRIBUTIONS}",
         {"run.toml": '[delay]\n1 = "weibull:2"\n'}),
    case("unknown-option", ["--bogus"], "unrecognized arguments: --bogus"),
    # the trainer waits for every rank: async used to run as a synchronous loop under its name
    case("async-policy", ["--policies", "equal,async", "--out", "{tmp}/run"],
         "--policies: 'async' has no barrier, and this trainer waits for every rank each step"),
    case("ksync-policy", ["--policies", "ksync", "--out", "{tmp}/run"],
         "--policies: 'ksync' leaves the slowest gradients out, and this trainer waits for every rank each step"),
]  # fmt: skip


def machine(line: str) -> str:
    """``line`` with this machine's CPUs and CUDA devices filled in."""
    cpus = sorted(os.sched_getaffinity(0))
    line = line.replace("{ncpus}", str(len(cpus))).replace("{cpus}", ",".join(map(str, cpus)))
    if "{ncuda}" in line:
        from validation.cli import cuda_devices

        line = line.replace("{ncuda}", str(cuda_devices()))
    return line


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_run_refuses_bad_input_before_any_rank_starts(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)  # the default run folder, runs/validation-<time>, would be made here
    check_refused(main, ["run", *argv], machine(line), tmp_path, capsys, prog="validation")


@pytest.mark.parametrize("before", [None, "python -m validation run --typed-by-a-launcher"])
def test_main_leaves_the_command_variable_as_it_found_it(before, tmp_path, capsys, monkeypatch):
    """main sets HETSIM_COMMAND for the ranks it starts; called in-process it puts the variable
    back, so that a run this process starts later records its own command, not this one."""
    if before is None:
        monkeypatch.delenv(COMMAND_ENV, raising=False)
    else:
        monkeypatch.setenv(COMMAND_ENV, before)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--epochs", "0"]) == 2
    assert capsys.readouterr().err.startswith("validation: error: --epochs")
    assert os.environ.get(COMMAND_ENV) == before


@pytest.mark.multiprocess
def test_a_cpu_range_beyond_reason_is_one_line(tmp_path):
    """Run apart, under a 2 GiB address-space limit, so that the unbounded range cannot fill this machine."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    done = subprocess.run([sys.executable, "-m", "validation", "run", "--cpus", "0=0-1000000000000"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
                          preexec_fn=limit, capture_output=True, text=True, timeout=120)  # fmt: skip
    missing = next(cpu for cpu in itertools.count() if cpu not in os.sched_getaffinity(0))
    assert (done.returncode, done.stderr) == (2, f"validation: error: --cpus: CPU {missing} does not exist here "
                                                 f"(this machine's CPUs: {machine('{cpus}')})\n")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_more_cpu_ranks_than_the_machine_can_time_slice_is_one_line(tmp_path, capsys):
    """300 ranks on this 2-core machine started, each with its own torch (load 237); a world past
    four CPU ranks to a CPU is refused before any starts."""
    from validation.cli import RANKS_PER_CPU
    from validation.placement import available_cpus

    cpus = len(available_cpus())
    world = RANKS_PER_CPU * cpus + 1
    check_refused(main, ["run", "--world-size", str(world), "--global-batch", str(4 * world), "--out", "{tmp}/r"],
                  f"--world-size: {world} CPU ranks on {cpus} CPU(s): at most {RANKS_PER_CPU} to a CPU here (more "
                  "would time-slice each core between them: the steps measured would be the scheduler's, and every "
                  "rank holds its own torch)", tmp_path, capsys, "validation")  # fmt: skip
    assert not (tmp_path / "r").exists()
