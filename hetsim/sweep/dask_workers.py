"""The LocalCluster of ``sweep --scheduler local`` (:func:`start_local`), apart so that
:mod:`hetsim.sweep.run` imports dask.distributed only when a Dask scheduler is asked for.

Its worker processes are in the command's process group, so a terminal's Ctrl-C reaches them
too. The command handles it (its one line, then the cluster closed); each worker used to print
a KeyboardInterrupt traceback beside that line, and one interrupted as the cluster started left
the cluster unclosed. So SIGINT is ignored while the cluster starts (a Ctrl-C in that second is
lost: the workers inherit the ignoring, where a blocked signal's mask did not reach them), and
each worker, once set up, ends at once and silently on it (:class:`QuietInterrupt`). (Ignored
for good, as a local pool's workers ignore it, a worker went on with its cell of seconds while
the cluster waited to close it.)
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
    """In each worker as it starts (a restarted one too), which until then ignores SIGINT: Ctrl-C
    ends it at once and silently."""

    name = "hetsim-quiet-interrupt"

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():  # signal.signal works there only
            signal.signal(signal.SIGINT, _end)


@contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """SIGINT ignored meanwhile, in this process and in those it starts (an ignored signal stays
    ignored across exec, and Python keeps it so); its handler restored after. Only the main
    thread may set one: elsewhere (an embedding program), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def start_local(jobs: int) -> tuple[LocalCluster, Client]:
    """A LocalCluster of ``jobs`` single-threaded worker processes and its client; the cluster
    closed again if anything stops this before it is returned. Its workers' logs stay quiet: a
    failed cell is the command's one line."""
    cluster = None
    try:
        with _interrupts_ignored():
            cluster = LocalCluster(
                n_workers=jobs,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
                plugins={QuietInterrupt()},
            )
        return cluster, Client(cluster)
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
