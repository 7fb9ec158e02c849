"""A validation run on one machine listens on loopback only: while a short real run goes, every TCP
socket in LISTEN state that one of its processes (the launcher, the ranks) holds is bound to a
loopback address. Read from /proc (Linux): each process's socket inodes from /proc/<pid>/fd,
matched with the listening sockets of /proc/net/tcp and /proc/net/tcp6."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from hetsim.core.errors import ConfigError
from validation.backend import LOOPBACK, STORE_FD_ENV, RankEnv, listen_loopback, local_store, loopback_interface
from validation.cli import main
from validation.launch import child_pids, rank_environment

ROOT = Path(__file__).resolve().parents[1]
LISTEN = "0A"  # the TCP state column of /proc/net/tcp


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp's local address: 32-bit words in host byte order, as hex."""
    raw = bytes.fromhex(hex_address)
    words = [raw[i : i + 4] for i in range(0, len(raw), 4)]
    packed = b"".join(w[::-1] if sys.byteorder == "little" else w for w in words)
    return ipaddress.ip_address(packed)


def listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, local address, port) of every TCP socket in LISTEN state that one of ``pids`` holds."""
    owner: dict[str, int] = {}
    for pid in pids:
        for link in _fd_links(pid):
            if link.startswith("socket:["):
                owner[link[len("socket:[") : -1]] = pid
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in owner:
                host, port = fields[1].split(":")
                found.append((owner[fields[9]], str(_address(host)), int(port, 16)))
    return found


def _fd_links(pid: int) -> list[str]:
    """What ``pid``'s open file descriptors point to (those that close meanwhile left out)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fds)
    except OSError:  # the process ended meanwhile
        return []
    links = []
    for name in names:
        try:
            links.append(os.readlink(fds / name))
        except OSError:
            continue
    return links


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(child_pids(p))
    return out


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc (Linux)")
def test_the_checker_sees_a_socket_listening_on_every_interface():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as everywhere, socket.socket() as local:
        everywhere.bind(("0.0.0.0", 0))
        everywhere.listen()
        local.bind(("127.0.0.1", 0))
        local.listen()
        found = {port: address for _, address, port in listening([os.getpid()])}
        assert found[everywhere.getsockname()[1]] == "0.0.0.0" and not is_loopback("0.0.0.0")
        assert found[local.getsockname()[1]] == "127.0.0.1" and is_loopback("127.0.0.1")
    assert not is_loopback("::") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")


def test_a_launched_rank_is_told_loopback_for_the_master_and_the_collectives():
    env = rank_environment(1, 2, 29500)
    assert env["MASTER_ADDR"] == LOOPBACK
    if loopback_interface() is None:
        pytest.skip("no interface named lo or lo0")
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == loopback_interface()


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc (Linux)")
def test_rank_0s_store_serves_on_the_launchers_loopback_socket():
    sock = listen_loopback()
    port = sock.getsockname()[1]
    environ = {"MASTER_PORT": str(port), STORE_FD_ENV: str(sock.detach())}  # the store owns the socket now
    store = local_store(RankEnv(0, 1, 0), timedelta(seconds=10), environ)
    store.set("key", "value")
    assert store.get("key") == b"value"
    mine = [(address, p) for _, address, p in listening([os.getpid()])]
    assert (LOOPBACK, port) in mine and all(is_loopback(address) for address, _ in mine)
    with pytest.raises(ConfigError, match=STORE_FD_ENV):
        local_store(RankEnv(0, 2, 0), timedelta(seconds=1), {"MASTER_PORT": str(port)})


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc (Linux)")
def test_a_running_run_listens_on_loopback_only_and_keeps_its_folder_to_itself(tmp_path, capsys):
    """A run of many epochs, watched from its start until it trains: every socket its launcher
    and ranks listen on is on loopback (the rendezvous store's while the ranks start, then
    gloo's, of both ranks); and a second run into its folder is refused in one line while the
    first goes on, alone."""
    out = tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "validation", "run", "--epochs", "30", "--policies", "equal", "--probe-repeats", "1",
         "--out", str(out)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    seen: set[tuple[int, str, int]] = set()
    try:
        deadline, training = time.monotonic() + 120, None
        while run.poll() is None and time.monotonic() < deadline:
            seen.update(listening(descendants(run.pid)))
            if training is None and (out / "meta.json").exists():
                training = time.monotonic()  # rank 0 wrote the run's meta: the ranks are up
            if training is not None and time.monotonic() > training + 1.0:
                break
            time.sleep(0.02)
        assert run.poll() is None, run.communicate()[1].decode(errors="replace")
        assert main(["run", "--epochs", "1", "--out", str(out)]) == 2
        assert capsys.readouterr().err.strip() == f"validation: error: --out: {out.resolve()} is in use by another run"
        assert run.poll() is None  # the first run goes on, alone
    finally:
        run.terminate()
        run.wait(timeout=30)
    assert seen, "saw no listening socket of the run (the rendezvous store listens while the ranks start)"
    exposed = sorted(s for s in seen if not is_loopback(s[1]))
    assert not exposed, f"listening beyond loopback (pid, address, port): {exposed}"
    ranks = {pid for pid, _, _ in seen}
    assert len(ranks) >= 2, f"listening sockets of only {ranks}: the store's and gloo's, of both ranks, expected"
