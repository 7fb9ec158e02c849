"""The LocalCluster of ``sweep --scheduler local`` (:func:`start_local`), apart so that
:mod:`hetsim.sweep.run` imports dask.distributed only when a Dask scheduler is asked for.

Its worker processes are in the command's process group, so a terminal's Ctrl-C reaches them
too. The command handles it (its one line, then the cluster closed); each worker used to print
a KeyboardInterrupt traceback beside that line, and one interrupted as the cluster started left
the cluster unclosed. So while the cluster starts SIGINT is ignored, as the workers started
then inherit (a Ctrl-C in that time is lost: a blocked signal's mask did not reach them), and
SIGTERM is held until the cluster is up; each worker, once set up, ends at once and silently on
Ctrl-C (:class:`QuietInterrupt`). A worker restarted later (its process killed) is covered once
it is set up. Where the command itself ignores Ctrl-C (a background job of a script) or handles
it its own way (a program that embeds it), its workers ignore it. (Ignored for good, as a local
pool's workers ignore it, a worker went on with its cell of seconds while the cluster waited to
close it.)
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

INTERRUPTED = 130  # a process ended by Ctrl-C, as a shell reports it


def _end(signum: int, frame: Any) -> None:
    os._exit(INTERRUPTED)  # nothing to wait for: the command is closing the cluster (parts are its own writes)


class QuietInterrupt(WorkerPlugin):
    """In each worker as it is set up (a restarted one too): Ctrl-C ends it at once and silently
    (``end``), or is ignored (the command does not stop on it)."""

    name = "hetsim-quiet-interrupt"

    def __init__(self, end: bool) -> None:
        self.end = end

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():  # signal.signal works there only
            signal.signal(signal.SIGINT, _end if self.end else signal.SIG_IGN)


@contextmanager
def _starting() -> Iterator[None]:
    """SIGINT ignored meanwhile, in this process and in those it starts (an ignored signal stays
    ignored across exec, and Python keeps it so); a SIGTERM the command handles is held and
    handled on leaving; both handlers restored. Only the main thread may set them: elsewhere
    (an embedding program's thread), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    term = signal.getsignal(signal.SIGTERM)
    if callable(term):
        signal.signal(signal.SIGTERM, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, interrupt)
        signal.signal(signal.SIGTERM, term)
        if held and callable(term):
            term(held[0], None)  # Terminated, say: raised here, after the cluster is up to be closed


def _stops_on_ctrl_c() -> bool:
    """Whether this command ends on Ctrl-C in Python's way (KeyboardInterrupt): not where it was
    started with SIGINT ignored, or where its program set a handler of its own."""
    return signal.getsignal(signal.SIGINT) is signal.default_int_handler


def start_local(jobs: int) -> tuple[LocalCluster, Client]:
    """A LocalCluster of ``jobs`` single-threaded worker processes and its client; the cluster
    closed again if anything stops this before it is returned. Its workers' logs stay quiet: a
    failed cell is the command's one line."""
    cluster = None
    plugin = QuietInterrupt(end=_stops_on_ctrl_c())
    try:
        with _starting():
            cluster = LocalCluster(
                n_workers=jobs,
                threads_per_worker=1,
                processes=True,
                dashboard_address="127.0.0.1:0",  # None still serves one, on 8787: a warning where that is taken
                silence_logs=logging.CRITICAL,
                plugins={plugin},
            )
        return cluster, Client(cluster)
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
