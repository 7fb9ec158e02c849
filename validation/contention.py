"""The noisy neighbour of ``--contention RANK=DUTY``: a busy background process beside a rank, and
:class:`Neighbours`, the launcher's handle that starts them and always stops them.

``python -m validation.contention --duty D [--period-s P] [--cpus 0+1] [--parent PID]`` burns
one CPU (a tight pure-Python loop) for ``D * P`` seconds of every period of ``P`` seconds (0.1 s
by default) and sleeps the rest, forever; a duty of 1 is always busy. It is one busy thread: on
a rank pinned to several CPUs it takes one at a time, wherever the scheduler puts it. With
``--cpus`` it is pinned there (the launcher passes the rank's ``--cpus``); without, it is unpinned
and may run on any CPU. It imports nothing of hetsim (its start-up is light: tens of ms).

It never outlives its launcher: it asks the kernel to SIGKILL it when the parent dies
(``PR_SET_PDEATHSIG``, Linux), and it also checks its parent once per period, which covers a
parent that died before that request (the launcher passes its own pid as ``--parent``). (The
kernel's "parent" is the thread that started it: start :class:`Neighbours` from a thread that
lives as long as they should, as the launcher's main thread does.)
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import TracebackType

PERIOD_S = 0.1
MAX_NEIGHBOUR_CORES = 8.0  # --contention: at most this many cores of load (8 always-busy neighbours) beside a rank
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent ends (Linux; elsewhere, nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the parent check each period still ends it


def burn(seconds: float) -> None:
    """Keep one CPU busy for ``seconds`` of wall time."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for _ in range(200):
            x = (x * 31 + 7) & 0xFFFF


def run(duty: float, period_s: float, parent: int) -> int:
    """Burn ``duty`` of every period until the parent is gone (then status 0)."""
    while os.getppid() == parent:
        busy = duty * period_s
        burn(busy)
        if period_s > busy:
            time.sleep(period_s - busy)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The neighbour's command line; it runs until its parent ends or it is stopped."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: end quietly; the launcher stops us anyway
    die_with_parent()
    parser = argparse.ArgumentParser(prog="validation.contention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duty", type=float, required=True, help="busy fraction of each period, in (0, 1]")
    parser.add_argument("--period-s", type=float, default=PERIOD_S, help=f"period in seconds (default {PERIOD_S})")
    parser.add_argument("--cpus", default=None, help="pin to these CPU ids, e.g. 0 or 0+2 (default: unpinned)")
    parser.add_argument("--parent", type=int, default=None, help="end when this is no longer the parent")
    args = parser.parse_args(argv)
    if not 0 < args.duty <= 1 or args.period_s <= 0:
        parser.error("--duty must be in (0, 1] and --period-s positive")
    if args.cpus is not None:
        try:
            os.sched_setaffinity(0, {int(c) for c in args.cpus.split("+")})
        except (ValueError, OSError) as exc:
            parser.error(f"--cpus {args.cpus}: {exc}")
    return run(args.duty, args.period_s, os.getppid() if args.parent is None else args.parent)


def neighbour_command(duty: float, cpus: Sequence[int] | None, period_s: float = PERIOD_S) -> list[str]:
    """The command line of one neighbour, child of this process."""
    command = [sys.executable, "-m", "validation.contention", "--duty", repr(float(duty))]
    command += ["--period-s", repr(float(period_s)), "--parent", str(os.getpid())]
    if cpus:
        command += ["--cpus", "+".join(map(str, cpus))]
    return command


def duties(load: float) -> list[float]:
    """The neighbours of a rank whose ``--contention`` is ``load``, the CPU time they add in cores:
    up to 1, one neighbour busy ``load`` of the time; above, ``ceil(load)`` neighbours sharing it
    evenly (2: two always-busy neighbours, so a rank alone on one CPU gets a third of it)."""
    count = max(1, math.ceil(load))
    return [load / count] * count


class Neighbours:
    """The noisy neighbours of each ``contention`` entry (rank -> load in cores, :func:`duties`),
    each on that rank's ``cpus`` when it has some. A context manager: :meth:`stop` runs on the way
    out, whatever happened."""

    def __init__(
        self,
        contention: Mapping[int, float],
        cpus: Mapping[int, Sequence[int]] | None = None,
        period_s: float = PERIOD_S,
    ) -> None:
        self.contention = dict(contention)
        self.cpus = dict(cpus or {})
        self.period_s = period_s
        self.procs: dict[int, list[subprocess.Popen[bytes]]] = {}

    def start(self) -> Neighbours:
        """Start every neighbour (stopping those already started when one fails to start)."""
        try:
            for rank, load in sorted(self.contention.items()):
                for duty in duties(load):
                    command = neighbour_command(duty, self.cpus.get(rank), self.period_s)
                    self.procs.setdefault(rank, []).append(subprocess.Popen(command, stdin=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 1.0) -> None:
        """End every neighbour: SIGTERM, then SIGKILL after ``timeout_s``; each one is reaped."""
        procs = [p for group in self.procs.values() for p in group]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> Neighbours:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
