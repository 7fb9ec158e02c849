"""The built-in launcher: one subprocess per rank on this machine, rendezvous on 127.0.0.1 and a
free port, and fail-fast supervision.

Each rank runs ``python -m validation.train`` with the launcher's arguments and torchrun's
environment variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). When a rank exits
with a non-zero status, the others normally fail within a moment on their own (their next
collective sees the closed connection, or the process-group timeout expires); whoever is still
running after ``grace_s`` is terminated. The launcher reports the rank that failed first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from validation.backend import free_port

POLL_S = 0.05


@dataclass(frozen=True)
class LaunchResult:
    exit_codes: tuple[int, ...]
    first_failure: tuple[int, int] | None  # (rank, exit status) of the first rank to fail
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.first_failure is None and all(c == 0 for c in self.exit_codes)


def rank_environment(rank: int, world_size: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 2.0
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(rank_argv: Sequence[str], world_size: int, grace_s: float = 3.0) -> LaunchResult:
    """Run ``world_size`` ranks of ``python -m validation.train *rank_argv`` and wait for all."""
    t0 = time.monotonic()
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "validation.train", *rank_argv], env=rank_environment(r, world_size, port)
        )
        for r in range(world_size)
    ]
    first_failure: tuple[int, int] | None = None
    deadline: float | None = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            if first_failure is None:
                failed = [(r, c) for r, c in enumerate(codes) if c is not None and c != 0]
                if failed:
                    first_failure = failed[0]
                    deadline = time.monotonic() + grace_s
            if all(c is not None for c in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                _stop(procs)
                break
            time.sleep(POLL_S)
    finally:
        _stop(procs)
    returncodes = tuple(int(p.returncode) for p in procs)
    return LaunchResult(returncodes, first_failure, time.monotonic() - t0)
