"""``hetsim sweep --scheduler tcp://...``: a real Dask scheduler is used as the local pool is (the
same results), and an address where something else answers is refused in one line within its
timeout: a web server (the dashboard's port) held the client for minutes, a server of another
protocol made it read a frame of exabytes and die with a traceback."""

from __future__ import annotations

import http.server
import socketserver
import threading
import time
from collections.abc import Iterator

import pandas as pd
import pytest

from hetsim.cli.main import main
from tests.test_sweep import only_run, write_sweep


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # its log goes to this process's stderr, which is checked
        pass


class _Junk(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"\xff" * 64)  # eight bytes of it read as a frame's length: 2^64 - 1
        time.sleep(1.0)


def _serving(server: socketserver.TCPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def web_server() -> Iterator[str]:
    yield from _serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet))


@pytest.fixture
def junk_server() -> Iterator[str]:
    yield from _serving(socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Junk))


@pytest.mark.slow
@pytest.mark.parametrize("server", ["web_server", "junk_server"])
def test_an_address_that_is_no_dask_scheduler_is_one_line(server, request, tmp_path, capsys):
    address = request.getfixturevalue(server)
    sweep = write_sweep(tmp_path)
    started = time.monotonic()
    argv = ["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--scheduler", address, "--connect-timeout-s", "1"]
    assert main(argv) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert err == (f"hetsim: error: --scheduler: {address} is not a Dask scheduler (its address is tcp://HOST:8786 by "
                   "default; the dashboard's port, 8787, is a web page)\n")  # fmt: skip
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_real_scheduler_at_its_address_gives_the_local_pools_results(tmp_path, capsys):
    from distributed import LocalCluster

    sweep = write_sweep(tmp_path)
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "local"), "--jobs", "1"]) == 0
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        address = cluster.scheduler_address
        assert main(["sweep", str(sweep), "--runs", str(tmp_path / "dask"), "--scheduler", address]) == 0
    frames = [pd.read_parquet(only_run(tmp_path / where) / "results.parquet") for where in ("local", "dask")]
    assert frames[0].sort_values("cell").reset_index(drop=True).equals(frames[1].sort_values("cell").reset_index(
        drop=True))  # fmt: skip


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_local_cluster_of_one_worker_survives_its_death(tmp_path):
    # The sweep's spec was scattered: the one copy of a one-worker cluster died with the worker
    # (killed for memory, say), and every cell with it (FutureCancelledError, exit 1).
    import dataclasses
    import multiprocessing
    import os
    import signal

    from hetsim.sweep.run import DaskExecutor, LocalExecutor, expand
    from hetsim.sweep.spec import load_sweep

    spec = dataclasses.replace(load_sweep(write_sweep(tmp_path, steps_per_epoch=100, epochs=3)), engine="simpy")
    expected = {cell.index: rows for cell, rows in LocalExecutor(1).run(spec, expand(spec))}
    executor = DaskExecutor("local", 1)
    try:
        cells = executor.run(spec, expand(spec))
        first, rows = next(cells)
        got = {first.index: rows}
        (worker,) = [p for p in multiprocessing.active_children() if "Dask Worker" in p.name]
        os.kill(worker.pid, signal.SIGKILL)  # the nanny starts another; the cells left run there
        got.update((cell.index, rows) for cell, rows in cells)
    finally:
        executor.close()
    assert got == expected


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_local_cluster_says_nothing_where_the_default_dashboard_port_is_taken():
    """``--scheduler local`` printed distributed's "Port 8787 is already in use" beside a user's
    own Dask dashboard: its dashboard asked for None, which still serves one on 8787."""
    import socket
    import warnings

    from hetsim.sweep.dask_workers import start_local

    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", 8787))
            taken.listen()
        except OSError:  # taken already: the case itself
            pass
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cluster, client = start_local(1)
        try:
            assert cluster.scheduler.http_server.port != 8787  # a free port, on loopback
        finally:
            client.close()
            cluster.close()
