"""Where a rank runs on this machine's CPUs: parsing and checking ``--cpus`` lists, and applying
a rank's threads and affinity to its own process (Linux ``sched_setaffinity``).
Importing this module does not import torch.
"""

from __future__ import annotations

import os

from hetsim.errors import ConfigError


def available_cpus() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def parse_cpu_list(text: str, option: str = "--cpus") -> tuple[int, ...]:
    """``0`` | ``0-3`` | ``0+2`` (a set) -> sorted CPU ids, each one this machine has."""
    cpus: set[int] = set()
    for part in str(text).split("+"):
        first, sep, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise ConfigError(option, f"expected CPU ids like 0, 0-3 or 0+2, got {text!r}") from None
        if high < low:
            raise ConfigError(option, f"empty CPU range {part!r}")
        cpus.update(range(low, high + 1))
    missing = sorted(cpus - available_cpus())
    if missing:
        have = ",".join(map(str, sorted(available_cpus())))
        raise ConfigError(option, f"CPU {missing[0]} does not exist here (this machine's CPUs: {have})")
    return tuple(sorted(cpus))
