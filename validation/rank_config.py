"""A run's per-rank options, as ``RANK=VALUE`` items on the command line and ``{rank = value}``
tables in a run file: the emulated slowness (:func:`injection`), each rank's threads, CPUs and
neighbours' load (:func:`placement`) and device (:func:`devices`), checked for the ranks the run has."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param
from validation.backend import check_one_rank_per_gpu, parse_devices
from validation.config_values import integer, number, parsed
from validation.contention import MAX_NEIGHBOUR_CORES
from validation.inject import parse_delay_spec
from validation.placement import available_cpus, parse_cpu_list
from validation.profile_config import MAX_SLOWDOWN

MAX_DELAY_S = 60.0  # an injected delay's mean per step (and a per-sample delay's, per sample): beyond, a unit mistake


def parse_rank_assignment(text: str, option: str) -> tuple[int, str]:
    """``RANK=VALUE`` -> (rank, value text)."""
    rank_text, sep, value = str(text).partition("=")
    if not sep or not value.strip():
        raise ConfigError(option, f"expected RANK=VALUE, got {text!r}")
    try:
        rank = int(rank_text)
    except ValueError:
        raise ConfigError(option, f"rank must be an integer, got {rank_text!r}") from None
    return rank, value.strip()


def rank_map(raw: Mapping[Any, Any] | None, items: Sequence[str], option: str) -> dict[int, str]:
    """A file table ``{rank: value}`` merged with command-line ``RANK=VALUE`` items (per rank; a
    command-line item wins over the file's value for its rank, and names each rank once)."""
    out: dict[int, str] = {}
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise ConfigError(option, "must be a table of RANK = VALUE")
        for key, value in raw.items():
            rank, text = parse_rank_assignment(f"{key}={value}", option)
            out[rank] = text
    given: set[int] = set()  # on the command line: a rank named twice is a mistake (a file's value is overridden)
    for item in items:
        for part in str(item).split(",") if option in LIST_OPTIONS else [item]:
            rank, text = parse_rank_assignment(part, option)
            if rank in given:
                raise ConfigError(option, f"rank {rank} is given twice")
            given.add(rank)
            out[rank] = text
    return out


LIST_OPTIONS = ("--threads", "--cpus", "--contention", "--slowdown")  # RANK=VALUE items, comma-separated


def injection(raw: Mapping[str, Any], args: argparse.Namespace, world_size: int, base: Any) -> dict[str, Any]:
    """The emulated slowness per rank (``delay``, ``per_sample_delay``, ``slowdown``): the run
    file's tables (else the default's, for the ranks the run has) with the command line's
    ``RANK=VALUE`` items on top; ranks whose value changes nothing are left out. ``base``: the
    default configuration (its tables for the ranks the run has)."""

    def given(key: str) -> Mapping[Any, Any]:
        if key in raw:
            return raw[key]
        return {r: v for r, v in getattr(base, key).items() if r < world_size}  # one rank: no default delay

    tables = {
        key: rank_map(given(key), getattr(args, key), option)
        for key, option in (
            ("delay", "--delay"),
            ("per_sample_delay", "--per-sample-delay"),
            ("slowdown", "--slowdown"),
        )
    }
    _within(tables, world_size)
    delay = {r: v for r, v in sorted(tables["delay"].items()) if delay_mean_s(v, r) > 0}
    per_sample = {
        r: number(v, "--per-sample-delay", maximum=MAX_DELAY_S) for r, v in sorted(tables["per_sample_delay"].items())
    }
    slowdown = {
        r: number(v, "--slowdown", minimum=1.0, maximum=MAX_SLOWDOWN) for r, v in sorted(tables["slowdown"].items())
    }
    return {
        "delay": delay,
        "per_sample_delay": {r: s for r, s in per_sample.items() if s > 0},
        "slowdown": {r: f for r, f in slowdown.items() if f > 1.0},
    }


def _within(tables: Mapping[str, Mapping[int, str]], world_size: int) -> None:
    """Every rank of the tables (by key: ``per_sample_delay`` is ``--per-sample-delay``) one of the run's."""
    for key, table in tables.items():
        for rank in table:
            if not 0 <= rank < world_size:
                raise ConfigError(f"--{key.replace('_', '-')}", f"rank {rank} is outside 0..{world_size - 1}")


def delay_mean_s(text: str, rank: int) -> float:
    """The mean of rank ``rank``'s ``--delay`` (checked: at most :data:`MAX_DELAY_S` a step)."""
    mean_s = parse_delay_spec(text, f"--delay {rank}").mean()
    if not mean_s <= MAX_DELAY_S:
        raise ConfigError(
            f"--delay {rank}", f"a mean of {mean_s:g} s a step, more than {MAX_DELAY_S:g}: check the units"
        )
    return mean_s


def placement(raw: Mapping[str, Any], args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    """Real heterogeneity: each rank's CPU threads, CPU affinity and noisy neighbours' load."""
    tables = {key: rank_map(raw.get(key), getattr(args, key), f"--{key}") for key in ("threads", "cpus", "contention")}
    _within(tables, world_size)
    cpus = {r: parse_cpu_list(v, "--cpus") for r, v in sorted(tables["cpus"].items())}
    n_cpus = len(available_cpus())
    threads = {r: integer(v, "--threads", minimum=1) for r, v in sorted(tables["threads"].items())}
    for rank, n in threads.items():
        if n > n_cpus:
            raise ConfigError("--threads", f"rank {rank} asks for {n} threads but this machine has {n_cpus} CPUs")
    load = Param("--contention", low=0.0, low_open=True, high=MAX_NEIGHBOUR_CORES, doc="CPU cores of load")
    contention = {r: float(load.check(parsed(v, float))) for r, v in sorted(tables["contention"].items())}
    return {"threads": threads, "cpus": cpus, "contention": contention}


def devices(value: Any, world_size: int, local_world_size: int | None) -> tuple[str, ...]:
    """One device for all ranks, or one per rank, from a string or a list; one rank per GPU on
    each machine (``local_world_size``: ranks per machine, torchrun's; default all on this one)."""
    if not isinstance(value, str) and not (isinstance(value, (list, tuple)) and all(isinstance(d, str) for d in value)):
        raise ConfigError("--devices", f"expected a comma-separated string or a list of device names, got {value!r}")
    devices = parse_devices(value if isinstance(value, str) else ",".join(value), world_size)
    check_one_rank_per_gpu(devices, local_world_size)
    return devices
