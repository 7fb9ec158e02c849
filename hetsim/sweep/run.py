"""Parameter sweeps: grid expansion (pure) and execution (local processes or a Dask cluster).

A *cell* is one grid point under one policy; it runs every replication (the same seeds in every
cell, spawned from the sweep's seed, so policies and grid points are compared on common random
numbers). Cells are the unit of work, of parallelism and of what is written to disk, so a
sweep killed at any moment loses at most the cells in flight.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsim.core.errors import CellFailed, ConfigError
from hetsim.core.options import DEFAULT_CONNECT_TIMEOUT_S, MAX_JOBS  # there for hetsim.cli.main's parser
from hetsim.core.params import Param
from hetsim.engines import engine_named
from hetsim.run.metrics import Summary
from hetsim.run.simulate import simulate_summary
from hetsim.sweep.spec import SweepSpec, grid_points, point_scenario

RESERVED_COLUMNS = frozenset(
    {"cell", "replication", "seed", "speedup_vs_equal", "speedup_by", *Summary.__dataclass_fields__}
)


@dataclass(frozen=True)
class Cell:
    index: int
    point: tuple[int, ...]  # one label index per axis
    policy: str


def replication_seeds(spec: SweepSpec) -> tuple[int, ...]:
    """One seed per replication, spawned from the sweep's seed."""
    return tuple(int(s.generate_state(1)[0]) for s in np.random.SeedSequence(spec.seed).spawn(spec.replications))


def expand(spec: SweepSpec) -> list[Cell]:
    """Every (grid point, policy) in a fixed order: grid points (last axis fastest), then policies."""
    for axis in spec.axes:
        if axis.name in RESERVED_COLUMNS:
            raise ConfigError(f"grid.{axis.name}", "this name is taken by a result column; rename the axis")
    points = grid_points(spec.axes)
    n = len(spec.policies)
    return [Cell(i * n + j, p, pol) for i, p in enumerate(points) for j, pol in enumerate(spec.policies)]


def cell_labels(spec: SweepSpec, cell: Cell) -> dict[str, Any]:
    return {axis.name: axis.labels[k] for axis, k in zip(spec.axes, cell.point)}


def run_cell(spec: SweepSpec, cell: Cell) -> tuple[Cell, list[dict[str, Any]]]:
    """Simulate every replication of one cell; one flat row per replication."""
    scenario = point_scenario(spec, cell.point)
    labels = cell_labels(spec, cell)
    engine = engine_named(spec.engine)  # a file's name
    rows = []
    for rep, seed in enumerate(replication_seeds(spec)):
        where = ", ".join(f"{k}={v}" for k, v in labels.items())
        try:
            policy = scenario.named_policy(cell.policy)  # a fresh one for every run (policies are stateful)
            summary = simulate_summary(scenario, policy, seed=seed, engine=engine)
        except ConfigError as exc:  # met during the run (a plug-in's time of nan): which cell met it
            raise ConfigError(exc.field, f"{exc.problem} (cell {cell.index}: policy {cell.policy}, {where}, "
                              f"seed {seed})") from None  # fmt: skip
        except Exception as exc:  # a bug: one line naming the cell, not a worker's traceback
            raise CellFailed(
                f"cell {cell.index} (policy {cell.policy}, {where}, seed {seed}) failed: {type(exc).__name__}: {exc}"
            ) from None
        rows.append({"cell": cell.index, **labels, "replication": rep, "seed": seed, **summary.to_dict()})
    return cell, rows


# ----------------------------------------------------------------------------- executors


def _ignore_interrupts() -> None:
    """In a pool worker: Ctrl-C reaches the whole process group, and only the parent handles it
    (it stops the workers), so a worker prints no traceback; SIGTERM, which the parent sends to
    stop a worker, ends it at once (the parent's own SIGTERM handler is not inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class LocalExecutor:
    """Cells on a pool of local processes (``jobs == 1``: in this process, no pool)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.description = f"{jobs} local process{'es' if jobs > 1 else ''}"
        self._pool: ProcessPoolExecutor | None = None

    def run(self, spec: SweepSpec, cells: Iterable[Cell]) -> Iterator[tuple[Cell, list[dict[str, Any]]]]:
        cells = list(cells)
        if self.jobs == 1:
            for cell in cells:
                yield run_cell(spec, cell)
            return
        self._pool = pool = ProcessPoolExecutor(max_workers=self.jobs, initializer=_ignore_interrupts)
        try:
            pending = {pool.submit(run_cell, spec, cell) for cell in cells}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
        except BaseException:  # interrupted, or a cell failed: stop the cells in flight too
            self.close()
            raise
        pool.shutdown()
        self._pool = None

    def close(self) -> None:
        """Stop the cells in flight and drop the rest, if a pool is still running. The command
        calls this whatever ended the sweep: an interrupt that lands in the caller, between two
        cells, never reaches :meth:`run`'s handler, and the interpreter's exit would otherwise
        wait for every queued cell."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        for child in multiprocessing.active_children():
            child.terminate()
        # Then joined: the pool's manager thread sees its processes gone, closes its wake-up pipe
        # and ends. Left running, it raced the interpreter's exit hook, which writes to that pipe
        # without the pool's lock in CPython 3.11 (later ones lock it: CPython gh-125451), and a
        # failed cell's one line was followed by "OSError: [Errno 9] Bad file descriptor" now and then.
        pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Cells on a Dask cluster: an existing scheduler (``tcp://host:8786``), reached within
    ``connect_timeout_s`` seconds, or a LocalCluster of ``jobs`` workers."""

    def __init__(self, scheduler: str, jobs: int, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        try:
            from distributed import Client
        except ImportError:  # pragma: no cover - the 'distributed' extra is part of make install
            raise ConfigError("--scheduler", "needs dask.distributed: pip install 'hetsim[distributed]'") from None
        self.cluster = None
        if scheduler == "local":
            from hetsim.sweep.dask_workers import start_local

            self.cluster, self.client = start_local(jobs)
            self.description = f"a Dask LocalCluster of {jobs} workers"
        else:
            check_scheduler(scheduler, connect_timeout_s)
            try:
                self.client = Client(scheduler, timeout=connect_timeout_s)
            except (OSError, TimeoutError, ValueError) as exc:
                raise ConfigError("--scheduler", f"cannot reach {scheduler}: {str(exc).splitlines()[0]}") from None
            self.description = f"the Dask scheduler at {scheduler}"

    def run(self, spec: SweepSpec, cells: Iterable[Cell]) -> Iterator[tuple[Cell, list[dict[str, Any]]]]:
        from distributed import as_completed

        cells = list(cells)
        if not cells:
            return
        # The spec as a task's result, not scattered data: a worker that dies (killed for memory)
        # takes its copy with it, and a task's the scheduler computes again; scattered, the one
        # copy of a one-worker cluster was lost and every cell with it.
        spec_future = self.client.submit(_same, spec, pure=False)
        futures = self.client.map(run_cell, [spec_future] * len(cells), cells, pure=False)
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            self.client.cancel(futures)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _same(value: Any) -> Any:
    """``value`` itself (a task whose result is the sweep's spec)."""
    return value


def check_scheduler(address: str, timeout_s: float) -> None:
    """What answers at ``address`` is a Dask scheduler (it names itself one when asked who it is),
    reached, asked and answered within ``timeout_s`` in all: a web server there (the dashboard's
    port) held ``Client`` for minutes, and a server of another protocol made it read a frame
    of exabytes."""
    import asyncio
    import socket
    import time

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    deadline = time.monotonic() + timeout_s
    try:  # something listens there (Dask's own connect would also wait for its handshake)
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls"):
            socket.create_connection(parse_host_port(location), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise ConfigError("--scheduler", f"cannot reach {address}: {why}") from None

    from distributed.security import Security

    def left() -> float:
        return max(deadline - time.monotonic(), 0.01)

    async def identity() -> Any:  # with the client's TLS settings (dask's config), as Client connects
        comm = await connect(address, timeout=left(), **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(identity(), left()))
    except Exception:  # it listens, but answers in another protocol: no reply in time, or frames its reader refused
        reply = None
    if not (isinstance(reply, dict) and reply.get("type") == "Scheduler"):
        raise ConfigError("--scheduler", f"{address} is not a Dask scheduler (its address is tcp://HOST:8786 by "
                                         "default; the dashboard's port, 8787, is a web page)")  # fmt: skip


def make_executor(
    jobs: int, scheduler: str | None, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
) -> LocalExecutor | DaskExecutor:
    """Connect (or start) before anything is written, so an unreachable scheduler leaves no trace."""
    Param("--jobs", "integer", low=1, high=MAX_JOBS).check(jobs)
    Param("--connect-timeout-s", low=0.0, low_open=True).check(connect_timeout_s)
    return LocalExecutor(jobs) if scheduler is None else DaskExecutor(scheduler, jobs, connect_timeout_s)


@dataclass
class Progress:
    """Counts finished cells and estimates rate and time left; rendering is the caller's."""

    total: int
    done: int = 0
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = time.monotonic()

    def advance(self) -> None:
        self.done += 1

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    @property
    def eta_s(self) -> float:
        return (self.total - self.done) / self.rate if self.rate > 0 else float("inf")
