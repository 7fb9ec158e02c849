"""The command-line options of ``python -m validation run`` and ``python -m validation.train``
(the launcher and every rank parse the same argv); :mod:`validation.config` validates them.

The values the options list (:data:`DEFAULT_POLICIES`, :data:`COMBINE_MODES`,
:data:`COMM_MODES`) are defined here and imported by :mod:`validation.config`, not the other way
round: that module imports hetsim's scenario and policy modules (numpy, scipy), which building
the parser (``python -m validation --help``) should not wait for.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hetsim.core.console import path_argument
from validation.workloads import BUILTIN_WORKLOADS

DEFAULT_POLICIES = ("equal", "dynamic", "dynamic-enhanced", "adaptive")  # --policies
COMBINE_MODES = ("weighted", "policy")  # --combine
COMM_MODES = ("flat", "ddp")  # --comm


def default_out() -> Path:
    """``runs/validation-YYYYMMDD-HHMMSS``: the run folder when ``--out`` is not given (here, not
    in :mod:`validation.train`, so that the launcher does not import torch to name it)."""
    return Path("runs") / time.strftime("validation-%Y%m%d-%H%M%S")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``python -m validation run`` and ``python -m validation.train``."""
    parser.add_argument("config", nargs="?", type=path_argument, default=None,
                        help="run file (TOML or JSON) with the same keys as the options")  # fmt: skip
    parser.add_argument(
        "--world-size", type=int, default=None, help="number of ranks (default 2; torchrun's WORLD_SIZE wins)"
    )
    parser.add_argument(
        "--policies", default=None, help=f"comma-separated policies (default: {','.join(DEFAULT_POLICIES)})"
    )
    parser.add_argument("--epochs", type=int, default=None, help="epochs per policy (default 10)")
    parser.add_argument("--global-batch", type=int, default=None, help="samples per step (default 128)")
    parser.add_argument("--lr", type=float, default=None, help="SGD learning rate (default 0.05)")
    parser.add_argument(
        "--seed", type=int, default=None, help="seed of the data split, shuffles, weights and delays (default 0)"
    )
    add_heterogeneity_options(parser)
    parser.add_argument(
        "--devices",
        default=None,
        help="one device for all ranks or one per rank: cpu | cuda | cuda:0,cuda:1 (default cpu)",
    )
    parser.add_argument(
        "--probe-repeats", type=int, default=None, help="rounds of probe steps (default 10; 0 skips the probe)"
    )
    parser.add_argument("--timeout-s", type=float, default=None, help="process-group timeout in seconds (default 30)")
    parser.add_argument(
        "--combine",
        choices=COMBINE_MODES,
        default=None,
        help="weighted: sum_i (b_i/B) g_i for every policy (default); policy: the plain mean of the ranks' "
        "gradients for policies without weighted_gradients (the paper's DP-SGD)",
    )
    parser.add_argument(
        "--workload",
        default=None,
        metavar="NAME|FILE.py:ATTR|MODULE:ATTR",
        help=f"what to train: {', '.join(BUILTIN_WORKLOADS)} or a name a HETSIM_PLUGINS module registers; or a "
        "Workload object (or zero-argument factory) in a file or module (default digits-cnn)",
    )
    parser.add_argument(
        "--comm",
        choices=COMM_MODES,
        default=None,
        help="flat: one weighted all-reduce after backward (default); ddp: DistributedDataParallel "
        "(bucketed, overlapped with backward)",
    )
    parser.add_argument("--target-accuracy", type=float, metavar="A", help="held-out accuracy: time to reach it")
    parser.add_argument(
        "--eval-every", default=None, metavar="STEPS",
        help="evaluate the held-out set every STEPS steps of an epoch too, not only at its end (RUN/evals.csv; "
        "the time to --target-accuracy is then read at the first evaluation reaching it; default 0: epoch ends)",
    )  # fmt: skip
    add_batch_options(parser)
    parser.add_argument(
        "--out", type=path_argument, default=None, metavar="DIR", help="run folder (default runs/validation-<time>)"
    )
    add_profile_option(parser)
    parser.add_argument("--crash-at", default=None, help=argparse.SUPPRESS)


def add_batch_options(parser: argparse.ArgumentParser) -> None:
    """The noise scale, and what goodput's choice of the global batch reads."""
    parser.add_argument("--noise-scale", action="store_true", default=None, help="estimate the gradient noise scale")
    parser.add_argument(
        "--efficiency", default=None, type=path_argument, metavar="FILE",
        help="goodput's statistical efficiency: the [workload.efficiency] table of FILE (as hetsim "
        "calibrate-efficiency writes it: a noise scale that may depend on the batch and on progress) "
        "instead of the run's own noise-scale estimate",
    )  # fmt: skip
    parser.add_argument(
        "--max-batch", default=None, metavar="N",
        help="largest global batch goodput may choose (default 4x --global-batch, within a quarter of the data)",
    )  # fmt: skip


def add_profile_option(parser: argparse.ArgumentParser) -> None:
    """``--profile STEPS``: torch.profiler traces of each policy's steps (validation.uneven.profiling)."""
    parser.add_argument(
        "--profile", default=None, metavar="STEPS",
        help="record torch.profiler traces of STEPS steps of each policy on every rank, in RUN/profiler/ "
        "(for python -m hetsim import-trace --format torch-profiler; default 0: none)",
    )  # fmt: skip


def add_heterogeneity_options(parser: argparse.ArgumentParser) -> None:
    """What makes the ranks differ: injected delays (emulation), and CPU threads, affinity and
    noisy neighbours (real)."""
    parser.add_argument(
        "--delay",
        action="append",
        default=[],
        metavar="RANK=SPEC",
        help="per-step injected delay: seconds or a distribution, e.g. 1=0.02 or 1=exponential:0.02 (1=0 removes one)",
    )
    parser.add_argument(
        "--per-sample-delay", action="append", default=[], metavar="RANK=SECONDS", help="injected delay per sample"
    )
    parser.add_argument(
        "--slowdown",
        action="append",
        default=[],
        metavar="RANK=FACTOR,...",
        help="emulate a slower device: sleep (FACTOR - 1) x the measured compute after each step (FACTOR >= 1), "
        "e.g. 1=2 or 0=1.5,1=2",
    )
    parser.add_argument(
        "--threads", action="append", default=[], metavar="RANK=N,...", help="CPU threads of a rank (default 1 each)"
    )
    parser.add_argument(
        "--cpus",
        action="append",
        default=[],
        metavar="RANK=CPUS,...",
        help="pin a rank to CPUs: 0=0,1=1 (one CPU each) or 0=0-1 (a range) or 0=0+2 (a set)",
    )
    parser.add_argument(
        "--contention",
        action="append",
        default=[],
        metavar="RANK=LOAD,...",
        help="noisy neighbours: busy processes on that rank's CPUs adding LOAD cores of work, in (0, 8]: "
        "0.5 is one neighbour busy half the time, 2 two always-busy ones",
    )
