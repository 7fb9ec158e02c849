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
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("validation: interrupted"), err
    if out.exists():  # the ranks had begun the run folder: it says how the run ended
        assert json.loads((out / "meta.json").read_text())["status"] == "interrupted"
    deadline = time.monotonic() + 5
    while _ranks_of(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ranks_of(out)
