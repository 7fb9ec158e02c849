"""The options of ``python -m validation profile`` and the checked configuration they make.

Owns :func:`add_profile_options` (the parser's part; building it imports neither torch nor
numpy) and :func:`build_profile_config`, which checks every option before anything starts or is
written: the workload is imported and its model built once (a BatchNorm refused), every device
is a known kind (whether this machine has it: ``validation.cli.check_local_devices``), every
per-rank list fits the number of devices. Per-rank options take
either one value per rank in rank order (``--threads 2,1``) or ``RANK=VALUE`` items as
``validation run`` does (``--threads 0=2,1=1``); ``--max-batch`` also takes one value for all.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hetsim.core.console import path_argument
from hetsim.core.errors import ConfigError
from hetsim.core.files import check_out_folder, check_own_folder
from hetsim.core.params import MAX_SEED, Param
from validation.backend import check_ddp_devices, parse_devices
from validation.contention import MAX_NEIGHBOUR_CORES
from validation.placement import available_cpus, parse_cpu_list
from validation.workloads import BUILTIN_WORKLOADS

DEFAULT_BUDGET_S = 60.0
DEFAULT_GLOBAL_BATCH = 128  # validation run's
MAX_SLOWDOWN = 1000.0  # --slowdown (here and in validation run): beyond, a unit mistake

# what validation.profile_output writes, and the plan the own-job walkthrough writes beside it (kept)
PROFILE_FILES = ("scenario.toml", "profile.csv", "meta.json", "plan.json")


@dataclass(frozen=True)
class ProfileConfig:
    """A checked profile request; rank-keyed maps use 0-based ranks."""

    workload: str = "digits-cnn"
    devices: tuple[str, ...] = ("cpu", "cpu")
    threads: dict[int, int] = field(default_factory=dict)
    cpus: dict[int, tuple[int, ...]] = field(default_factory=dict)
    contention: dict[int, float] = field(default_factory=dict)
    slowdown: dict[int, float] = field(default_factory=dict)  # an emulated slower device, as validation run's
    budget_s: float = DEFAULT_BUDGET_S
    max_batch: tuple[int, ...] = ()  # per rank: the most a CPU rank is given, where a GPU's back-off starts
    global_batch: int = DEFAULT_GLOBAL_BATCH
    dataset_size: int = 0  # the workload's training samples
    seed: int = 0
    warmup: int = 2
    repeats: int = 7
    batches: tuple[int, ...] = ()  # fixed batch sizes instead of the adaptive grid (benchmarks/profile_agreement.py)
    comm: str = "ddp"  # how the synchronous steps exchange gradients: as the trainer to be planned for
    out: Path = Path("runs/profile")

    @property
    def world_size(self) -> int:
        return len(self.devices)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("threads", "contention", "slowdown"):
            out[key] = {str(k): v for k, v in getattr(self, key).items()}
        out["cpus"] = {str(k): list(v) for k, v in self.cpus.items()}
        out["devices"], out["max_batch"], out["out"] = list(self.devices), list(self.max_batch), str(self.out)
        out["batches"] = list(self.batches)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileConfig:
        """The inverse of :meth:`to_dict` (how a rank reads its launcher's configuration)."""
        mapped = {"threads", "cpus", "contention", "slowdown", "devices", "max_batch", "batches", "out"}
        return cls(
            **{k: v for k, v in data.items() if k not in mapped},
            threads={int(k): int(v) for k, v in data["threads"].items()},
            cpus={int(k): tuple(v) for k, v in data["cpus"].items()},
            contention={int(k): float(v) for k, v in data["contention"].items()},
            slowdown={int(k): float(v) for k, v in data["slowdown"].items()},
            devices=tuple(data["devices"]),
            max_batch=tuple(data["max_batch"]),
            batches=tuple(data["batches"]),
            out=Path(data["out"]),
        )


def add_profile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload", default="digits-cnn", metavar="NAME|FILE.py:ATTR|MODULE:ATTR",
        help=f"what to profile: {', '.join(BUILTIN_WORKLOADS)}, a registered name, or a Workload in a file or "
        "module (default digits-cnn)",
    )  # fmt: skip
    parser.add_argument(
        "--devices", default="cpu,cpu", help="one device per rank: cpu,cpu or cuda:0,cuda:1,cpu (default cpu,cpu)"
    )
    parser.add_argument("--threads", default=None, metavar="N,...", help="CPU threads per rank: 2,1 or 0=2,1=1")
    parser.add_argument("--cpus", default=None, metavar="CPUS,...", help="pin ranks to CPUs: 0,1 or 0=0-1,1=1")
    parser.add_argument(
        "--contention", default=None, metavar="LOAD,...",
        help="noisy neighbours per rank, in cores of load as validation run's: 0,0.5 or 1=2",
    )  # fmt: skip
    parser.add_argument(
        "--slowdown", default=None, metavar="FACTOR,...",
        help="emulate slower devices (what validation run's --slowdown does): after each step a rank sleeps "
        "(FACTOR - 1) x its measured time; one factor per rank, 1,2, or RANK=FACTOR items, 1=2",
    )  # fmt: skip
    parser.add_argument(
        "--comm", choices=("ddp", "flat"), default="ddp",
        help="how the trainer you plan for exchanges gradients (the trainer's steps, in four blocks spread over "
        "the budget, run it): ddp (DistributedDataParallel, the default) or flat (validation run's default)",
    )  # fmt: skip
    parser.add_argument(
        "--budget-s", type=float, default=DEFAULT_BUDGET_S, metavar="S",
        help=f"seconds each rank spends measuring step times (default {DEFAULT_BUDGET_S:g})",
    )  # fmt: skip
    parser.add_argument(
        "--max-batch", default=None, metavar="N[,N...]",
        help="the largest local batch, one for all or one per rank: a CPU rank's, and where a GPU's "
        "out-of-memory back-off starts (default the global batch)",
    )  # fmt: skip
    parser.add_argument(
        "--global-batch", type=int, default=DEFAULT_GLOBAL_BATCH, metavar="B",
        help=f"the scenario's global batch (default {DEFAULT_GLOBAL_BATCH}, at most the training set)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the samples drawn and the weights (default 0)")
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per batch size (default 7)")
    parser.add_argument("--out", type=path_argument, default=None, metavar="DIR", help="default runs/profile-<time>")
    parser.add_argument("--batches", default=None, help=argparse.SUPPRESS)  # fixed sizes: held-out checks


def build_profile_config(args: argparse.Namespace) -> ProfileConfig:
    """The checked configuration (ConfigError on the first bad option, before anything runs)."""
    from validation.workloads import resolve_workload

    devices = parse_devices(args.devices, len([d for d in str(args.devices).split(",") if d.strip()]) or 1)
    world = len(devices)
    workload = resolve_workload(str(args.workload))
    n_train = workload.train_size()
    global_batch = int(Param("--global-batch", "integer", low=world, high=n_train).check(args.global_batch))
    max_batch = _max_batches(args.max_batch, world, global_batch, n_train)
    if sum(max_batch) < global_batch:
        raise ConfigError("--max-batch", f"the ranks hold at most {sum(max_batch)} samples, less than the global "
                          f"batch {global_batch}")  # fmt: skip
    out = args.out if args.out is not None else Path("runs") / time.strftime("profile-%Y%m%d-%H%M%S")
    check_out_folder(out, "--out")  # before the budget is spent measuring for it
    check_own_folder(out, "--out", PROFILE_FILES, "profile")  # a profile again replaces one; a run's folder is kept
    check_ddp_devices(args.comm, devices)
    threads = {r: int(Param("--threads", "integer", low=1, high=len(available_cpus())).check(_int(v)))
               for r, v in per_rank(args.threads, world, "--threads").items()}  # fmt: skip
    load = Param("--contention", low=0.0, high=MAX_NEIGHBOUR_CORES, doc="CPU cores of load")
    contention = {r: float(load.check(_float(v))) for r, v in per_rank(args.contention, world, "--contention").items()}
    slowdown = slowdowns(args.slowdown, world)
    return ProfileConfig(
        workload=str(args.workload),
        devices=devices,
        threads=threads,
        cpus={r: parse_cpu_list(v, "--cpus") for r, v in per_rank(args.cpus, world, "--cpus").items()},
        contention={r: d for r, d in contention.items() if d > 0},
        slowdown={r: f for r, f in slowdown.items() if f > 1.0},
        budget_s=float(Param("--budget-s", low=0.0, low_open=True, high=86400.0).check(args.budget_s)),
        max_batch=max_batch,
        global_batch=global_batch,
        dataset_size=n_train,
        seed=int(Param("--seed", "integer", low=0, high=MAX_SEED).check(args.seed)),
        repeats=int(Param("--repeats", "integer", low=3, high=1000).check(args.repeats)),
        batches=_batches(args.batches, min(max_batch)),
        comm=str(args.comm),
        out=out,
    )


def per_rank(text: str | None, world: int, option: str) -> dict[int, str]:
    """``a,b,...`` (one per rank, in order) or ``RANK=VALUE,...`` -> {rank: value text}."""
    if text is None:
        return {}
    items = [t.strip() for t in str(text).split(",")]
    if not all(items):
        raise ConfigError(option, f"an empty item in {text!r} (a stray comma?)")
    keyed = ["=" in t for t in items]
    if any(keyed) and not all(keyed):
        raise ConfigError(option, f"give one value per rank or RANK=VALUE items, not both: {text!r}")
    if not all(keyed) and len(items) != world:
        raise ConfigError(option, f"{len(items)} values for {world} ranks (one per rank, or RANK=VALUE items)")
    out: dict[int, str] = {}
    for position, item in enumerate(items):
        rank_text, _, value = item.partition("=") if "=" in item else (str(position), "=", item)
        try:
            rank = int(rank_text)
        except ValueError:
            raise ConfigError(option, f"rank must be an integer, got {rank_text!r}") from None
        if not 0 <= rank < world:
            raise ConfigError(option, f"rank {rank} is outside 0..{world - 1}")
        if not value.strip():
            raise ConfigError(option, f"rank {rank} has no value")
        if rank in out:
            raise ConfigError(option, f"rank {rank} is given twice")
        out[rank] = value.strip()
    return out


def _max_batches(text: str | None, world: int, global_batch: int, n_train: int) -> tuple[int, ...]:
    if text is None:
        return (global_batch,) * world
    items = [t.strip() for t in str(text).split(",")]
    values = per_rank(text, world, "--max-batch") if len(items) > 1 or "=" in items[0] else dict.fromkeys(
        range(world), items[0])  # fmt: skip
    check = Param("--max-batch", "integer", low=2, high=n_train, doc="samples (at least 2: a table needs two)")
    return tuple(int(check.check(_int(values.get(r, str(global_batch))))) for r in range(world))


def _batches(text: str | None, cap: int) -> tuple[int, ...]:
    """The hidden ``--batches a,b,...``: distinct sizes in [1, the smallest --max-batch], at least two."""
    if text is None:
        return ()
    size = Param("--batches", "integer", low=1, high=cap, doc="samples")
    batches = tuple(sorted({int(size.check(_int(t.strip()))) for t in str(text).split(",")}))
    if len(batches) < 2:
        raise ConfigError("--batches", "needs at least two batch sizes")
    return batches


def slowdowns(text: str | None, world: int, option: str = "--slowdown") -> dict[int, float]:
    """``--slowdown``'s factors of the ranks it names (``1,2`` or ``1=2``), each in [1, 1000]."""
    factor = Param(option, low=1.0, high=MAX_SLOWDOWN, doc="times the measured time")
    return {r: float(factor.check(_float(v))) for r, v in per_rank(text, world, option).items()}


def _int(text: str | int) -> Any:
    try:
        return int(text)
    except ValueError:
        return text


def _float(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text
