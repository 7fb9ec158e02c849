"""Ctrl-C of a real ``validation run`` while its ranks start: one line, no traceback from a rank
interrupted in its imports, no rank left running, and no folder left holding only its lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _default_interrupt() -> None:
    """SIGINT at its default, as in a terminal's foreground job (a shell without job control
    starts background jobs with it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ranks_of(out: Path) -> list[int]:
    """The pids of processes whose command line names ``out`` (the run's ranks, the launcher)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(out) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.multiprocess
@pytest.mark.parametrize("after_s", [0.8, 1.6])
def test_ctrl_c_while_the_ranks_start_is_one_line_and_leaves_nothing(tmp_path, after_s):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "validation", "run", "--epochs", "1", "--policies", "equal",
               "--probe-repeats", "1", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True, preexec_fn=_default_interrupt)  # fmt: skip
    time.sleep(after_s)  # the launcher has started its ranks, which are importing torch
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, -signal.SIGINT), err  # 128 + SIGINT, or its death by it: a shell shows both alike
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("validation: interrupted"), err
    if out.exists():  # the ranks had begun the run folder: it says how the run ended
        assert json.loads((out / "meta.json").read_text())["status"] == "interrupted"
    deadline = time.monotonic() + 5
    while _ranks_of(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ranks_of(out)


def test_a_run_that_fails_before_writing_anything_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """The ranks failed before rank 0 began the run folder: the folder the command made for them,
    holding only its lock, goes, as after a refusal."""
    import validation.launch
    from validation.cli import main
    from validation.launch import LaunchResult

    monkeypatch.setattr(validation.launch, "launch", lambda *a, **k: LaunchResult((2, 2), (0, 2), 0.1, "exit status 2"))
    assert main(["run", "--epochs", "1", "--out", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err.strip().endswith("it failed before writing anything")
    assert not (tmp_path / "run").exists()
