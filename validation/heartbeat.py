"""Liveness between the built-in launcher and its ranks, in both directions.

A rank started by ``python -m validation run`` (the launcher sets :data:`DIR_ENV`) runs a daemon
thread that, every :data:`BEAT_S`, rewrites ``<dir>/rank-<r>`` with what the rank is doing, and
ends the rank at once when its parent (the launcher) is gone. A rank that is stopped or hung
(SIGSTOP, a deadlock in native code) stops beating; the launcher sees its file go stale after
:data:`STALE_S` and fails the run naming it, long before a collective's timeout would, and
before the healthy ranks' timeouts could be mistaken for the cause. A stale beat alone is not
enough where the launcher can read the rank's ``/proc`` entry (:class:`Watch`): a rank that is
stopped (state T) is named at once, one still using the CPU (starved on a loaded machine, or in a
long call that holds the GIL) is left running until its CPU time too has stood still for
:data:`STALE_S`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

DIR_ENV = "HETSIM_HEARTBEAT_DIR"
PARENT_ENV = "HETSIM_LAUNCHER_PID"  # the launcher's pid: a launcher that died before the beat began still counts
BEAT_S = 0.5
STALE_S = 8.0  # no beat for this long: the rank has stopped (a beat is due every BEAT_S; a loaded
# two-core machine has been seen to delay one by more than 8 s while the rank was still running)


def beat_file(folder: Path, rank: int) -> Path:
    return Path(folder) / f"rank-{rank}"


def start(rank: int, doing: Callable[[], str]) -> threading.Thread | None:
    """Start beating for ``rank`` (``doing()`` says what it is doing) when a launcher asked for it."""
    folder = os.environ.get(DIR_ENV)
    if not folder:
        return None
    path = beat_file(Path(folder), rank)
    parent = int(os.environ.get(PARENT_ENV, os.getppid()))

    def run() -> None:
        while True:
            if os.getppid() != parent:  # the launcher died: nobody supervises this rank any more
                _leave(path)
                os._exit(1)
            tmp = path.with_suffix(".tmp")
            try:
                tmp.write_text(doing(), encoding="utf-8")
                os.replace(tmp, path)
            except OSError:
                pass  # the launcher removes the folder when it ends
            time.sleep(BEAT_S)

    thread = threading.Thread(target=run, name="heartbeat", daemon=True)
    thread.start()
    return thread


def _leave(path: Path) -> None:
    """Remove this rank's beat, and the folder once it is empty: a launcher that was killed
    (SIGKILL) cannot remove it, so the last rank out does."""
    for gone in (path, path.with_suffix(".tmp")):
        gone.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # another rank's beat is still there: the last one out removes the folder


def stopped(folder: Path, rank: int, now: float | None = None) -> str | None:
    """What a rank was doing when it stopped beating, or None while it beats (or has not begun)."""
    path = beat_file(folder, rank)
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
        if age <= STALE_S:
            return None
        return path.read_text(encoding="utf-8") or "an unknown step"
    except OSError:
        return None


def cpu_state(pid: int) -> tuple[str, int] | None:
    """The process's state letter and CPU time (user + system, in clock ticks) from ``/proc``;
    None where it cannot be read (not Linux, or the process is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the command's name
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[11]) + int(fields[12])  # fields 3, 14 and 15 of proc(5)


class Watch:
    """The launcher's view of its ranks' liveness: :func:`stopped`, confirmed by the process
    itself. Call :meth:`stopped` for every running rank at every poll: it also records when each
    rank's CPU time last moved."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._cpu: dict[int, tuple[int, float]] = {}  # rank -> (CPU ticks, when they last changed)

    def stopped(self, rank: int, pid: int, now: float | None = None) -> str | None:
        """What ``rank`` (process ``pid``) was doing when it stopped, or None while it runs."""
        now = time.time() if now is None else now
        state = cpu_state(pid)
        if state is not None:
            ticks = state[1]
            seen = self._cpu.get(rank)
            if seen is None or seen[0] != ticks:
                self._cpu[rank] = (ticks, now)
        doing = stopped(self.folder, rank, now)
        if doing is None or state is None or state[0] in "Tt":
            return doing
        return doing if now - self._cpu[rank][1] > STALE_S else None
