"""The run configuration of a real validation run: one frozen :class:`RunConfig`, built from the
embedded default, an optional CONFIG file (TOML or JSON, the same keys) and command-line
options, validated in one place. The launcher and every rank build it from the same argv, so
all ranks agree on it; every problem raises :class:`~hetsim.core.errors.ConfigError` naming the
option.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hetsim.core.console import parse_policies
from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_LR, MAX_SEED, Param
from hetsim.policies import policy_class
from hetsim.scenario.config import checked_efficiency, read_efficiency, read_table
from validation import rank_config
from validation.config_checks import check_across, check_table_fits
from validation.config_values import integer, number, parsed
from validation.options import COMBINE_MODES, COMM_MODES, DEFAULT_POLICIES  # there for the parser
from validation.rank_config import parse_rank_assignment
from validation.workloads import resolve_workload
from validation.workloads.base import Workload

MAX_PROFILED = 1000  # --profile: a profiler trace of more steps would be too large to read back
MAX_STEPS = 10**6  # epochs, probe rounds, warm-up steps: a real run of more would never end (and the plan is a list)
MAX_TIMEOUT_S = 86400.0  # --timeout-s: a day (datetime.timedelta overflows far beyond)


@dataclass(frozen=True)
class RunConfig:
    """Everything a rank needs to run. Rank-keyed maps use 0-based ranks.

    The default is the embedded run: 2 CPU ranks on the digits, global batch 128, 10 epochs per
    policy, rank 1 emulating a slower device with a per-step delay of 2 ms plus 0.1 ms per
    sample, 10 probe rounds."""

    world_size: int = 2
    policies: tuple[str, ...] = DEFAULT_POLICIES
    epochs: int = 10
    global_batch: int = 128
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    delay: Mapping[int, str] = field(default_factory=lambda: {1: "0.002"})
    per_sample_delay: Mapping[int, float] = field(default_factory=lambda: {1: 0.0001})
    slowdown: Mapping[int, float] = field(default_factory=dict)
    devices: tuple[str, ...] = ("cpu",)
    probe_fractions: tuple[float, ...] = (0.0625, 0.125, 0.25, 0.5, 0.75)
    probe_repeats: int = 10
    warmup_steps: int = 3
    timeout_s: float = 30.0
    combine: str = "weighted"
    workload: str = "digits-cnn"
    comm: str = "flat"
    threads: Mapping[int, int] = field(default_factory=dict)
    cpus: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    contention: Mapping[int, float] = field(default_factory=dict)
    target_accuracy: float | None = None
    noise_scale: bool = False
    efficiency: Mapping[str, Any] | None = None  # goodput's [workload.efficiency] table (None: measured in the run)
    max_batch: int | None = None  # the largest global batch a policy that varies_batch may choose (None: default)
    profile: int = 0  # steps of each policy recorded with torch.profiler on every rank (0: none)
    eval_every: int = 0  # a held-out evaluation every this many steps of an epoch too (0: at epoch ends only)
    out: Path | None = None
    crash_at: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("delay", "per_sample_delay", "slowdown", "threads", "contention"):
            out[key] = {str(k): v for k, v in getattr(self, key).items()}
        out["cpus"] = {str(k): list(v) for k, v in self.cpus.items()}
        out["out"] = str(self.out) if self.out is not None else None
        out.pop("crash_at")
        return out


FILE_KEYS = {f.name for f in fields(RunConfig)} - {"out", "crash_at"}  # a run file's keys: the options'
NUMBER_KEYS = {f.name for f in fields(RunConfig) if str(f.type).removesuffix(" | None") in ("int", "float")}


def read_run_file(path: Path) -> dict[str, Any]:
    """A run file's options (TOML or JSON), only the known keys."""
    raw = read_table(path)
    unknown = sorted(set(raw) - FILE_KEYS)
    if unknown:
        raise ConfigError(unknown[0], f"unknown key (known: {', '.join(sorted(FILE_KEYS))})")
    for key, value in raw.items():  # a file has types: "1" is text there (an option's text is parsed)
        if key in NUMBER_KEYS and isinstance(value, str):
            raise ConfigError(key, f"must be a number, got a string ({value!r})")
    return raw


MOMENTUM = Param("momentum", low=0.0, high=1.0, high_open=True, doc="SGD's momentum (1 or more diverges)")


def _policies(value: Any, option: str) -> tuple[str, ...]:
    return tuple(parse_policies(value, option, reserved={"probe": "'probe' is the calibration phase, not a policy"}))


def _efficiency(value: Any) -> dict[str, Any] | None:
    """``--efficiency FILE`` (or a run file's ``efficiency``, a path or the table itself): the
    ``[workload.efficiency]`` table of FILE (TOML or JSON), checked as hetsim checks a scenario's."""
    if value is None:
        return None
    return checked_efficiency(value) if isinstance(value, dict) else read_efficiency(str(value))


def build_config(args: argparse.Namespace, world_size_env: int | None = None, local: int | None = None) -> RunConfig:
    """The validated configuration from the default, the run file and the options in ``args``. A
    problem with a value the run file gave (its option not given) names the file's key, not the
    option (``epochs: must be an integer``, where the file said ``epochs = 1e308``)."""
    raw = read_run_file(args.config) if getattr(args, "config", None) is not None else {}
    try:
        return _built(args, raw, world_size_env, local)
    except ConfigError as exc:
        key = exc.field.removeprefix("--").replace("-", "_")
        if exc.field.startswith("--") and key in raw and getattr(args, key, None) in (None, []):
            raise ConfigError(key, exc.problem) from None
        raise


def _built(args: argparse.Namespace, raw: Mapping[str, Any], world_env: int | None, local: int | None) -> RunConfig:
    base = RunConfig()

    def pick(key: str, cli: Any) -> Any:
        return cli if cli is not None else raw.get(key, getattr(base, key))

    world_size = integer(pick("world_size", args.world_size), "--world-size", minimum=1)
    if world_env is not None:
        world_size = world_env
    policies = _policies(pick("policies", args.policies), "--policies")
    epochs = integer(pick("epochs", args.epochs), "--epochs", minimum=1, maximum=MAX_STEPS)
    global_batch = integer(pick("global_batch", args.global_batch), "--global-batch", minimum=1)
    if global_batch < world_size:
        raise ConfigError("--global-batch", f"{global_batch} is smaller than the world size ({world_size})")
    workload_spec = str(pick("workload", args.workload))  # a name, FILE.py:ATTR or MODULE:ATTR: each rank resolves it
    workload = resolve_workload(workload_spec)
    n_train = workload.train_size()
    if global_batch > n_train:
        raise ConfigError(
            "--global-batch", f"{global_batch} is more than the {n_train} training samples of {workload.name}"
        )
    injection = rank_config.injection(raw, args, world_size, base)
    devices = rank_config.devices(
        pick("devices", args.devices), world_size, local
    )  # local: ranks per machine (torchrun)
    probe_repeats = integer(pick("probe_repeats", args.probe_repeats), "--probe-repeats", maximum=MAX_STEPS)
    combine = _mode(pick("combine", args.combine), "--combine", COMBINE_MODES)
    comm = _mode(pick("comm", args.comm), "--comm", COMM_MODES)
    noise_scale = bool(pick("noise_scale", args.noise_scale))
    efficiency = _efficiency(pick("efficiency", getattr(args, "efficiency", None)))
    check_across(policies, world_size, probe_repeats, (noise_scale, efficiency), comm, devices)
    check_table_fits(efficiency, global_batch, lr := number(pick("lr", args.lr), "--lr", maximum=MAX_LR))
    return replace(
        base,
        world_size=world_size,
        policies=policies,
        epochs=epochs,
        global_batch=global_batch,
        lr=lr,
        momentum=float(MOMENTUM.check(parsed(raw.get("momentum", base.momentum), float))),
        seed=integer(pick("seed", args.seed), "--seed", maximum=MAX_SEED),  # the run's scenario carries it
        **injection,
        devices=devices,
        probe_fractions=_fractions(raw.get("probe_fractions", base.probe_fractions)),
        probe_repeats=probe_repeats,
        warmup_steps=integer(raw.get("warmup_steps", base.warmup_steps), "warmup_steps", maximum=MAX_STEPS),
        timeout_s=number(pick("timeout_s", args.timeout_s), "--timeout-s", minimum=1.0, maximum=MAX_TIMEOUT_S),
        combine=combine,
        workload=workload_spec,
        comm=comm,
        **rank_config.placement(raw, args, world_size),
        target_accuracy=_target(pick("target_accuracy", args.target_accuracy), workload),
        noise_scale=noise_scale,
        efficiency=efficiency,
        max_batch=_max_batch(pick("max_batch", args.max_batch), global_batch, n_train, policies, args.max_batch),
        **_observing(lambda key: pick(key, getattr(args, key, None)), n_train // global_batch),
        out=args.out,
        crash_at=_crash_at(args.crash_at, world_size),
    )


def _observing(option: Callable[[str], Any], epoch_steps: int) -> dict[str, Any]:
    """``--profile STEPS``: the profiler's warm-up step and STEPS recorded ones, all in each policy's
    first epoch (between epochs come the evaluation and the probe's rounds, which are no step);
    ``--eval-every K``: an evaluation after every K steps of an epoch, none of them among the
    profiled steps (a profiled step would time it). ``option(key)``: the option's value as given."""
    steps = integer(option("profile"), "--profile", maximum=MAX_PROFILED)
    if steps and steps + 1 > epoch_steps:
        raise ConfigError("--profile", f"{steps} steps and the profiler's warm-up step are more than an epoch's "
                                       f"{epoch_steps} steps (each policy is profiled in its first epoch)")  # fmt: skip
    every = integer(option("eval_every"), "--eval-every", maximum=MAX_STEPS)
    if steps and 0 < every <= steps + 1:
        raise ConfigError("--eval-every", f"{every} would evaluate within the {steps + 1} steps --profile records "
                                          f"(its warm-up step included): use more than {steps + 1}")  # fmt: skip
    return {"profile": steps, "eval_every": every}


def _target(value: Any, workload: Workload) -> float | None:
    """``--target-accuracy``, for a workload that has an accuracy (classes for labels)."""
    accuracy = Param("--target-accuracy", default=None, low=0.0, low_open=True, high=1.0, doc="an accuracy")
    if value is None:
        return None
    target = float(accuracy.check(parsed(value, float)))
    if not workload.has_accuracy():
        raise ConfigError("--target-accuracy", f"{workload.name}'s labels are not classes (floating point, a "
                          "regression's): it has a held-out loss and no accuracy to reach")  # fmt: skip
    return target


def _max_batch(value: Any, global_batch: int, n_train: int, policies: Sequence[str], typed: Any = None) -> int:
    """``--max-batch``: at least the global batch, at most the training set; by default four times
    the global batch, within a quarter of the training set (an epoch of at least 4 steps). Typed
    on a command line whose policies all keep the global batch, it would be ignored: refused."""
    if typed is not None and not any(policy_class(p).varies_batch for p in policies):
        raise ConfigError("--max-batch", "only with a policy that chooses its global batch (goodput)")
    if value is None:
        return max(global_batch, min(4 * global_batch, n_train // 4))
    limit = Param("--max-batch", "integer", low=global_batch, high=n_train, doc="samples per step")
    return int(limit.check(parsed(value, int)))


def _fractions(values: Sequence[Any]) -> tuple[float, ...]:
    fraction = Param("probe_fractions", low=0.0, low_open=True, high=1.0, doc="a fraction of the global batch")
    fractions = tuple(float(fraction.check(f)) for f in values)
    if not fractions:
        raise ConfigError("probe_fractions", "needs at least one fraction of the global batch")
    return fractions


def _mode(value: Any, option: str, known: Sequence[str]) -> str:
    return str(Param(option, "choice", choices=tuple(known)).check(value))


def _crash_at(text: str | None, world_size: int) -> tuple[int, int] | None:
    """The hidden test hook ``--crash-at RANK=STEP``: that rank dies hard before run step STEP."""
    if text is None:
        return None
    rank, step = parse_rank_assignment(text, "--crash-at")
    if not 0 <= rank < world_size:
        raise ConfigError("--crash-at", f"rank {rank} is outside 0..{world_size - 1}")
    return rank, int(number(step, "--crash-at"))
