"""Where a rank runs on this machine's CPUs: parsing and checking ``--cpus`` lists, applying a
rank's CPU affinity to its own process (Linux ``sched_setaffinity``, every thread it has), and
reporting the threads and CPUs in effect. Importing this module does not import torch (only
:func:`placement_in_effect` does, when called).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hetsim.core.errors import ConfigError


def available_cpus() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def parse_cpu_list(text: str, option: str = "--cpus") -> tuple[int, ...]:
    """``0`` | ``0-3`` | ``0+2`` (a set) -> sorted CPU ids, each one this machine has."""
    cpus: set[int] = set()
    have = available_cpus()
    for part in str(text).split("+"):
        first, sep, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise ConfigError(option, f"expected CPU ids like 0, 0-3 or 0+2, got {text!r}") from None
        if high < low:
            raise ConfigError(option, f"empty CPU range {part!r}")
        top = max(have) + 1  # ids past this one add nothing but a longer list to refuse
        cpus.update(range(low, min(high, max(low, top)) + 1))
    missing = sorted(cpus - have)
    if missing:
        listed = ",".join(map(str, sorted(have)))
        raise ConfigError(option, f"CPU {missing[0]} does not exist here (this machine's CPUs: {listed})")
    return tuple(sorted(cpus))


def apply_placement(threads: int, cpus: tuple[int, ...] | None) -> None:
    """Pin this process to ``cpus`` when given (all of its threads: torch and gloo may have started
    some), and set ``OMP_NUM_THREADS`` to ``threads`` for anything it starts later. The thread count
    of torch itself is the caller's (``torch.set_num_threads``), as this module is torch-free."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if cpus is None:
        return
    tasks = Path("/proc/self/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    os.sched_setaffinity(0, cpus)


def placement_in_effect() -> dict[str, Any]:
    """What this process really runs with: ``{"threads": torch's intra-op threads, "cpus": the
    sorted CPUs it may run on}``."""
    import torch

    return {"threads": int(torch.get_num_threads()), "cpus": sorted(os.sched_getaffinity(0))}
