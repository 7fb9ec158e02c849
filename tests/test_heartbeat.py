"""The launcher's liveness check: a stale heartbeat names a rank only when its process agrees
(stopped, or its CPU time has stood still as long), so a rank starved on a loaded machine is not
killed as hung."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from validation.heartbeat import DIR_ENV, PARENT_ENV, STALE_S, Watch, beat_file, cpu_state

pytestmark = [  # each test starts a Python process (slow: a subprocess start-up)
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)"),
    pytest.mark.slow,
]


@pytest.fixture
def process(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[bytes]]:
    code = {"spin": "while True: pass", "sleep": "import time; time.sleep(60)"}[request.param]
    proc = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(0.3)  # started and, for "spin", using the CPU
    yield proc
    proc.kill()
    proc.wait()


def stale_beat(folder: Path, rank: int, doing: str) -> float:
    """A beat file last written well past STALE_S ago; the wall-clock now."""
    path = beat_file(folder, rank)
    path.write_text(doing, encoding="utf-8")
    old = time.time() - 10 * STALE_S
    os.utime(path, (old, old))
    return time.time()


@pytest.mark.parametrize("process", ["spin"], indirect=True)
def test_a_rank_still_using_the_cpu_is_not_named_however_old_its_beat(process, tmp_path):
    watch = Watch(tmp_path)
    now = stale_beat(tmp_path, 0, "epoch 0 step 3")
    assert watch.stopped(0, process.pid, now) is None
    time.sleep(0.2)  # its CPU time moves on
    assert watch.stopped(0, process.pid, now + 2 * STALE_S) is None


@pytest.mark.parametrize("process", ["spin"], indirect=True)
def test_a_stopped_rank_is_named_at_once(process, tmp_path):
    watch = Watch(tmp_path)
    now = stale_beat(tmp_path, 1, "epoch 2 step 7")
    os.kill(process.pid, signal.SIGSTOP)
    try:
        for _ in range(100):  # the state letter changes once the signal is delivered
            if cpu_state(process.pid)[0] in "Tt":  # type: ignore[index]
                break
            time.sleep(0.01)
        assert watch.stopped(1, process.pid, now) == "epoch 2 step 7"
    finally:
        os.kill(process.pid, signal.SIGCONT)


@pytest.mark.parametrize("process", ["sleep"], indirect=True)
def test_a_rank_whose_cpu_time_stands_still_is_named_after_stale_s(process, tmp_path):
    watch = Watch(tmp_path)
    now = stale_beat(tmp_path, 2, "start-up")
    assert watch.stopped(2, process.pid, now) is None  # its CPU time was first seen now
    assert watch.stopped(2, process.pid, now + STALE_S - 1) is None
    assert watch.stopped(2, process.pid, now + STALE_S + 1) == "start-up"


@pytest.mark.parametrize("process", ["sleep"], indirect=True)
def test_a_fresh_beat_is_never_a_stop(process, tmp_path):
    watch = Watch(tmp_path)
    beat_file(tmp_path, 0).write_text("epoch 0 step 0", encoding="utf-8")
    assert watch.stopped(0, process.pid) is None
    assert watch.stopped(1, process.pid) is None  # no beat yet: it has not begun


def test_a_process_that_is_gone_leaves_the_beat_alone_to_decide(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    now = stale_beat(tmp_path, 0, "shutdown")
    assert cpu_state(proc.pid) is None
    assert Watch(tmp_path).stopped(0, proc.pid, now) == "shutdown"


def test_ranks_whose_launcher_died_remove_its_folder_the_last_one_out(tmp_path):
    """A launcher killed with SIGKILL cannot remove its heartbeat folder: each rank that finds
    its launcher gone removes its beat, and the last one the folder (it was left in /tmp)."""
    folder = tmp_path / "beats"
    folder.mkdir()
    beat_file(folder, 1).write_text("rank 1's last beat", encoding="utf-8")
    env = {**os.environ, DIR_ENV: str(folder), PARENT_ENV: str(os.getpid() + 1)}  # not its parent: gone
    code = "import time\nfrom validation import heartbeat\nheartbeat.start({rank}, lambda: 'x')\ntime.sleep(30)"

    def orphan(rank: int) -> int:
        return subprocess.run([sys.executable, "-c", code.format(rank=rank)], env=env, timeout=60).returncode

    assert orphan(0) == 1 and [p.name for p in folder.iterdir()] == ["rank-1"]
    assert orphan(1) == 1 and not folder.exists()
