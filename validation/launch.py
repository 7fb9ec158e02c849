"""The built-in launcher: one subprocess per rank on this machine, rendezvous on 127.0.0.1 and a
free port, and fail-fast supervision.

Each rank runs ``python -m validation.train`` with the launcher's arguments and torchrun's
environment variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Nothing listens
beyond loopback: the launcher binds the rendezvous store's socket to 127.0.0.1 and passes it to
rank 0, and the ranks' gloo (or NCCL) sockets are put on the loopback interface
(:mod:`validation.backend`). When a rank exits
with a non-zero status, the others normally fail within a moment on their own (their next
collective sees the closed connection, or the process-group timeout expires); whoever is still
running after ``grace_s`` is ended. A rank that stops responding (no heartbeat, see
:mod:`validation.heartbeat`) fails the run at once. The launcher reports the rank that failed
first and how; ranks end themselves when the launcher dies. The noisy neighbours of
``--contention`` (:mod:`validation.contention`) start before the ranks and are stopped after
them, whatever happens; they too end themselves when the launcher dies.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hetsim.core.console import sigterm_as_interrupt
from validation import heartbeat
from validation.backend import LOCAL_STORE_ENV, LOOPBACK, STORE_FD_ENV, listen_loopback, loopback_environment
from validation.contention import Neighbours

POLL_S = 0.05
PEER_FAILED = 1  # validation.train's exit status when a collective failed, most often as another rank died


@dataclass(frozen=True)
class LaunchResult:
    exit_codes: tuple[int, ...]
    first_failure: tuple[int, int] | None  # (rank, exit status) of the first rank to fail
    wall_s: float
    reason: str = ""  # how the first failure showed: an exit status, or a rank that stopped beating

    @property
    def ok(self) -> bool:
        return self.first_failure is None and all(c == 0 for c in self.exit_codes)


def rank_environment(rank: int, world_size: int, port: int, threads: int = 1) -> dict[str, str]:
    """torchrun's variables for ``rank`` (the master on 127.0.0.1), the collective sockets on the
    loopback interface (:func:`~validation.backend.loopback_environment`, in place of any set),
    and OMP_NUM_THREADS for its ``threads``. A rank with several threads also gets
    OMP_WAIT_POLICY=PASSIVE (unless set already): OpenMP workers that spin while waiting take the
    CPU from the rank's peers and neighbours, and two threads pinned to one CPU made steps several
    times slower."""
    env = dict(os.environ)
    if threads > 1:
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR=LOOPBACK,
        MASTER_PORT=str(port),
        OMP_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
        **loopback_environment(),
    )
    return env


def _stop(procs: Sequence[subprocess.Popen], hard: bool = False) -> None:
    """End every rank still running: SIGTERM, then SIGKILL after a second (at once when ``hard``:
    a rank stuck in a collective aborts noisily on SIGTERM)."""
    for p in procs:
        if p.poll() is None and hard:
            p.kill()
        elif p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 1.0
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(
    rank_argv: Sequence[str],
    world_size: int,
    grace_s: float = 1.5,
    *,
    threads: Mapping[int, int] | None = None,
    cpus: Mapping[int, Sequence[int]] | None = None,
    contention: Mapping[int, float] | None = None,
    module: str = "validation.train",
) -> LaunchResult:
    """Run ``world_size`` ranks of ``python -m MODULE *rank_argv`` (``module``: the trainer by
    default; ``validation profile`` starts its own ranks) and wait for all. After
    the first failure (a non-zero exit, or a rank that stops beating) the others get ``grace_s``
    to end on their own, then are ended. ``threads`` sets each rank's OMP_NUM_THREADS (default 1);
    ``contention`` starts a noisy neighbour per rank (on that rank's ``cpus``, when it has some)
    before the ranks, stopped after them whatever happens (SIGTERM to the launcher included)."""
    t0 = time.monotonic()
    beats = Path(tempfile.mkdtemp(prefix="hetsim-heartbeat-"))
    procs: list[subprocess.Popen[bytes]] = []
    with sigterm_as_interrupt(), Neighbours(contention or {}, cpus):  # SIGTERM: the ranks stopped, as on Ctrl-C
        try:
            with listen_loopback() as store:  # rank 0's from its start; closed here once the ranks run
                for r in range(world_size):
                    procs.append(
                        _start_rank(r, world_size, [module, *rank_argv], store, beats, (threads or {}).get(r, 1))
                    )
            first_failure, reason = _supervise(procs, beats, grace_s)
        finally:
            _stop(procs)
            shutil.rmtree(beats, ignore_errors=True)
    returncodes = tuple(int(p.returncode) for p in procs)
    failed = None if first_failure is None else (first_failure[0], returncodes[first_failure[0]])
    return LaunchResult(returncodes, failed, time.monotonic() - t0, reason)


def _start_rank(
    rank: int, world_size: int, rank_argv: Sequence[str], store: socket.socket, beats: Path, threads: int
) -> subprocess.Popen[bytes]:
    """One rank of ``python -m *rank_argv`` (the module first); rank 0 inherits the store's socket."""
    env = rank_environment(rank, world_size, store.getsockname()[1], threads=threads)
    env.update({LOCAL_STORE_ENV: "1", heartbeat.DIR_ENV: str(beats), heartbeat.PARENT_ENV: str(os.getpid())})
    if rank == 0:
        env[STORE_FD_ENV] = str(store.fileno())
    command = [sys.executable, "-m", *rank_argv]
    # a session of its own: Ctrl-C (the terminal's SIGINT to its foreground group) reaches the
    # launcher alone, which stops the ranks (SIGTERM); a rank interrupted in its imports printed a
    # traceback. A rank whose launcher dies ends itself (its heartbeat watches the launcher).
    return subprocess.Popen(command, env=env, pass_fds=(store.fileno(),) if rank == 0 else (), start_new_session=True)


def _supervise(
    procs: Sequence[subprocess.Popen[bytes]], beats: Path, grace_s: float
) -> tuple[tuple[int, int | None] | None, str]:
    """Wait for the ranks; the first failure and how it showed (see :func:`launch`)."""
    first_failure: tuple[int, int | None] | None = None
    reason, deadline = "", None
    watch = heartbeat.Watch(beats)
    while True:
        codes = [p.poll() for p in procs]
        if first_failure is None:
            first_failure, reason = _first_failure(codes, procs, watch)
            if first_failure is not None:
                if first_failure[1] is None:  # a stopped rank never ends by itself; its peers would abort in gloo
                    _stop(procs, hard=True)
                    break
                deadline = time.monotonic() + grace_s
        if all(c is not None for c in codes):
            break
        if deadline is not None and time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    return first_failure, reason


def _first_failure(
    codes: Sequence[int | None], procs: Sequence[subprocess.Popen[bytes]], watch: heartbeat.Watch
) -> tuple[tuple[int, int | None] | None, str]:
    """The first rank that failed: exited non-zero, or stopped beating (status None: still alive).
    When several exited since the last look, one that failed by itself comes before one that
    only saw a peer die (:data:`PEER_FAILED`): a crash makes its peers fail within milliseconds."""
    exited = [(rank, code) for rank, code in enumerate(codes) if code is not None and code != 0]
    if exited:
        first, status = min(exited, key=lambda e: e[1] == PEER_FAILED)  # stable: the lowest such rank
        return (first, status), f"exit status {status}"
    for rank, code in enumerate(codes):
        doing = watch.stopped(rank, procs[rank].pid) if code is None else None
        if doing is not None:
            return (rank, None), f"stopped responding (no heartbeat for {heartbeat.STALE_S:g} s) during {doing}"
    return None, ""


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, in the order they started (Linux, from /proc): a
    launcher's ranks, for the tests and benchmarks that stop or kill one."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # after the command's name
            except OSError:
                continue
            if int(fields[1]) == pid:  # field 4, the parent; field 22, the start time
                found.append((int(fields[19]), int(entry.name)))
    return [p for _, p in sorted(found)]
