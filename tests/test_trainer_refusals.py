"""Refusals of the trainer library (validation.uneven) and the example under torchrun: one line
from rank 0 that reaches the user, and a BatchNorm model named before any collective."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from validation import uneven
from validation.backend import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_a_refusal_is_rank_zeros_one_line_and_every_other_rank_waits_for_it(monkeypatch, capsys):
    """Under torchrun a rank that exits with an error stops the others: rank 1, refused at once,
    could stop rank 0 before its line was out (the example's refusal lost in 4 of 9 launches)."""
    import time

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    assert uneven.refuse(ValueError("--device: no cuda:1"), 1, "mine") == 2  # what rank 1 alone found is said
    assert slept == [uneven.run.REFUSAL_GRACE_S]
    assert capsys.readouterr().err == "mine: error: rank 1: --device: no cuda:1\n"
    assert uneven.refuse(ValueError("--policy: no"), 0, "mine") == 2
    assert capsys.readouterr().err == "mine: error: --policy: no\n" and len(slept) == 1


@pytest.mark.multiprocess
def test_under_torchrun_the_examples_refusal_reaches_the_user(tmp_path):
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    done = subprocess.run(
        [torchrun, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
         "examples/train_your_model.py", "--policy", "async", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "train_your_model: error:" in line]
    line = ("train_your_model: error: --policy: 'async' has no barrier, and this trainer waits for every rank each "
            "step: give a barrier policy (equal, proportional, dynamic, ...)")  # fmt: skip
    assert lines == [line], done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # about a second or more: out of make test-fast
def test_uneven_step_refuses_a_batchnorm_model_by_name_before_any_collective():
    """The library path refuses what --workload refuses: it used to fail inside its first step's
    priming pass with torch's 'Expected more than 1 value per channel' on every rank."""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    with pytest.raises(ValueError, match=r"^model: 1 is a BatchNorm1d, whose batch statistics make a rank's gradient"):
        uneven.UnevenStep(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.device("cpu"))


@pytest.mark.parametrize(
    ("stop", "status", "failure"),
    [
        (KeyboardInterrupt(), "interrupted", "stopped by SIGINT"),
        (ValueError("nan loss"), "failed", "ValueError: nan loss"),
    ],
)
def test_a_scripts_run_that_stops_says_how_in_its_meta(stop, status, failure, tmp_path):
    # under torchrun no launcher of ours marks the end: it stayed "running" for good
    import json

    from validation.record import RunWriter

    writer = RunWriter(tmp_path / "run", {"policies": ["equal"]})  # rank 0's, as open_run makes it
    with pytest.raises(type(stop)), uneven.marked_end(writer):
        raise stop
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert (meta["status"], meta["failure"]) == (status, failure)
