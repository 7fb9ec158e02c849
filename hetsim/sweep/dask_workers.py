"""What a LocalCluster's worker processes do at start (:class:`QuietInterrupt`), apart so that
:mod:`hetsim.sweep.run` imports dask.distributed only when a Dask scheduler is asked for."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

INTERRUPTED = 130  # a process ended by Ctrl-C, as a shell reports it


def _end(signum: int, frame: Any) -> None:
    os._exit(INTERRUPTED)  # no cleanup to wait for: the command is stopping the cluster


class QuietInterrupt(WorkerPlugin):
    """A LocalCluster's worker ends at once and silently on Ctrl-C. The terminal sends it to
    the whole process group, and the command handles it (its one line, then the cluster
    closed); each worker used to print a KeyboardInterrupt traceback beside that line. (Ignored
    instead, as a local pool's workers ignore it, a worker went on with its cell of seconds
    while the cluster waited to close it.) Set in every worker that starts, a restarted one
    included."""

    name = "hetsim-quiet-interrupt"

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():  # signal.signal works there only
            signal.signal(signal.SIGINT, _end)
