"""Real heterogeneity: per-rank threads and CPU affinity, and the noisy neighbour of
``--contention`` (busy as asked, pinned to its rank's CPUs, and never outliving its launcher)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from validation.cli import main
from validation.contention import Neighbours, duties
from validation.launch import child_pids

ROOT = Path(__file__).resolve().parents[1]
TWO_CPUS = {0, 1} <= os.sched_getaffinity(0)
SHORT_RUN = ["--world-size", "2", "--epochs", "1", "--probe-repeats", "1", "--policies", "equal"]
SHORT_RUN += ["--global-batch", "64"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def runnable_seconds(pid: int) -> float:
    """Time ``pid`` has wanted a CPU so far: on one, or waiting in a run queue for one (the CPU
    time alone, where the kernel keeps no schedstat). On a shared machine the CPU time of a
    busy process falls short of its demand; this does not."""
    try:
        on_cpu, waiting = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
    except OSError:
        return cpu_seconds(pid)
    return (int(on_cpu) + int(waiting)) / 1e9


def allowed_cpus(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def neighbours_of(launcher: int) -> list[int]:
    """Running noisy neighbours started by ``launcher`` (by their ``--parent``: found even once orphaned)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        parent = argv[argv.index(b"--parent") + 1] if b"--parent" in argv[:-1] else b""
        if b"validation.contention" in argv and parent == str(launcher).encode() and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def start_run(out: Path, *options: str) -> subprocess.Popen[str]:
    """SHORT_RUN with ``options`` (one given there replaces SHORT_RUN's: an option is given once)."""
    given = {o for o in options if o.startswith("--")}
    kept = [a for k, a in enumerate(SHORT_RUN) if not ({a, SHORT_RUN[k - 1] if k else ""} & given)]
    command = [sys.executable, "-m", "validation", "run", *kept, "--out", str(out), *options]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


@pytest.mark.multiprocess
@pytest.mark.serial  # its duty cycle measured over 1 s of wall time
@pytest.mark.skipif(not TWO_CPUS, reason="needs CPUs 0 and 1")
def test_the_neighbour_is_busy_for_its_duty_pinned_and_stopped():
    with Neighbours({1: 0.5}, {1: (1,)}) as neighbours:
        pid = neighbours.procs[1][0].pid
        time.sleep(0.2)  # its start-up
        wanted, used, t0 = runnable_seconds(pid), cpu_seconds(pid), time.monotonic()
        time.sleep(1.0)
        elapsed = time.monotonic() - t0
        assert 0.3 <= (runnable_seconds(pid) - wanted) / elapsed <= 0.7  # busy half of the time
        assert (cpu_seconds(pid) - used) / elapsed >= 0.1  # and really burning CPU, even on a busy machine
        assert allowed_cpus(pid) == "1"
    assert not alive(pid)


@pytest.mark.multiprocess
@pytest.mark.parametrize("load, expected", [(0.5, [0.5]), (1.0, [1.0]), (2.0, [1.0, 1.0]), (2.5, [2.5 / 3] * 3)])
def test_a_load_above_one_core_is_shared_by_several_neighbours(load, expected):
    assert duties(load) == pytest.approx(expected) and sum(duties(load)) == pytest.approx(load)


@pytest.mark.multiprocess
def test_two_cores_of_load_start_two_neighbours_and_stop_both():
    with Neighbours({0: 2.0}, {}) as neighbours:
        procs = neighbours.procs[0]
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.returncode is not None for p in procs)


def test_a_neighbour_whose_parent_is_already_gone_ends_at_once():
    neighbour = subprocess.run(
        [sys.executable, "-m", "validation.contention", "--duty", "1", "--parent", "1"], cwd=ROOT, timeout=10
    )
    assert neighbour.returncode == 0


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.skipif(not TWO_CPUS, reason="needs CPUs 0 and 1")
def test_threads_and_cpus_are_applied_and_the_neighbour_ends_with_the_run(tmp_path):
    run = start_run(tmp_path / "run", "--threads", "0=2,1=1", "--cpus", "0=0,1=1", "--contention", "1=0.5")
    assert wait_for(lambda: neighbours_of(run.pid), 30), "no neighbour started"
    (neighbour,) = neighbours_of(run.pid)
    assert wait_for(lambda: allowed_cpus(neighbour) == "1", 5)  # it pins itself to rank 1's CPUs as it starts
    _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "validation: rank 0: threads 2, cpus [0]" in err
    assert "validation: rank 1: threads 1, cpus [1]" in err
    assert not alive(neighbour) and not neighbours_of(run.pid)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_the_neighbour_is_stopped_when_a_rank_crashes(tmp_path):
    run = start_run(tmp_path / "run", "--contention", "1=0.5", "--crash-at", "1=3")
    assert wait_for(lambda: neighbours_of(run.pid), 30), "no neighbour started"
    _, err = run.communicate(timeout=120)
    assert run.returncode == 1 and "rank 1 failed first" in err
    assert not neighbours_of(run.pid)
    assert "threads" not in err and "cpus" not in err  # ranks say nothing of a placement nobody asked for


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.serial  # every process gone within 2 s of the launcher
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_launcher_leaves_no_neighbour_and_no_rank(how, tmp_path):
    out = tmp_path / "run"
    run = start_run(out, "--contention", "1=0.5", "--epochs", "50")
    children: list[int] = []
    try:
        # training has begun: the ranks beat (and watch the launcher) once the first epoch is written
        assert wait_for(lambda: (out / "trace.csv").exists(), 90), "the run did not start"
        children = child_pids(run.pid)  # the neighbour and the two ranks
        assert len(neighbours_of(run.pid)) == 1 and len(children) == 3
        run.send_signal(how)  # SIGKILL: they end themselves; SIGTERM: the launcher stops them
        assert run.wait(timeout=10) == (-signal.SIGKILL if how == signal.SIGKILL else 128 + signal.SIGTERM)
        assert wait_for(lambda: not any(alive(p) for p in children), 2.0), "a process outlived the launcher"
        if how == signal.SIGTERM:  # said, and the folder no longer claims a live run
            _, err = run.communicate()
            assert err.strip().splitlines()[-1] == "validation: terminated (SIGTERM)", err
            meta = json.loads((out / "meta.json").read_text())
            assert (meta["status"], meta["failure"]) == ("interrupted", "stopped by SIGTERM")
    finally:
        run.kill()
        run.communicate()
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


MISSING_CPU = max(os.sched_getaffinity(0)) + 1
TOO_MANY = len(os.sched_getaffinity(0)) + 1


@pytest.mark.parametrize(
    ("option", "value"),
    [("--threads", f"0={TOO_MANY}"), ("--cpus", f"0={MISSING_CPU}"), ("--contention", "1=0"), ("--contention", "1=9")],
)
def test_bad_placement_is_refused_in_one_line(option, value, tmp_path, capsys):
    before = set(child_pids(os.getpid()))
    assert main(["run", *SHORT_RUN, option, value, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"validation: error: {option}")
    assert set(child_pids(os.getpid())) <= before


def test_a_crashed_rank_is_named_before_the_peer_that_saw_it_die(tmp_path):
    from validation.heartbeat import Watch
    from validation.launch import _first_failure

    procs = [subprocess.Popen(["true"]) for _ in range(2)]
    for p in procs:
        p.wait()
    watch = Watch(tmp_path)
    assert _first_failure([1, 17], procs, watch) == ((1, 17), "exit status 17")  # both ended since the last look
    assert _first_failure([1, -9], procs, watch)[0] == (1, -9)
    assert _first_failure([1, 1], procs, watch)[0] == (0, 1)
    assert _first_failure([None, 0], procs, watch) == (None, "")
