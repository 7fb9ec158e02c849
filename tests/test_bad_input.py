"""Bad and hostile input gets one line naming the field, exit status 2, and nothing written,
whatever the command (the README's promise).

The corpus lives in one parametrised test per command, ``tests/test_bad_input_<command>.py``,
each case with the exact line it gets; they share :func:`~tests.refusals.check_refused` and the
helpers of :mod:`tests.refusals`. This file keeps the checks that do not fit one (argv, line) pair.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import pytest
import tomli_w

from hetsim.cli.main import main
from tests.helpers import scenario_dict
from tests.refusals import (
    check_refused,
)


def test_simulate_out_writes_all_or_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").mkdir()  # a late file that cannot be written: a folder is in its way
    argv = ["simulate", "paper", "--policy", "equal", "--set", "workload.epochs=1", "--out", str(out), "--force"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.json" in err
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]  # nothing else was left behind
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nor a temporary folder
    (out / "summary.json").rmdir()
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "trace.csv", "trace.parquet"]


def test_policies_that_cannot_run_are_left_out_with_a_note_unless_named(tmp_path, capsys):
    one = tmp_path / "one.toml"
    one.write_text(tomli_w.dumps(scenario_dict([{"per_sample_s": 0.001}], global_batch=8)), encoding="utf-8")
    assert main(["simulate", str(one), "--json"]) == 0
    captured = capsys.readouterr()
    ran = [s["policy"] for s in json.loads(captured.out)]
    assert "backup" not in ran and "equal" in ran and "ksync" in ran
    alone = "policy.backups: must be smaller than the number of workers (1), got 1 (backup needs two workers or more)"
    assert captured.err == (
        "note: goodput left out: it needs [workload.efficiency] (the gradient noise scale), which the scenario lacks\n"
        f"note: backup left out: {alone}\n"
    )
    assert main(["simulate", str(one), "--policy", "equal,backup"]) == 2
    assert capsys.readouterr().err == f"hetsim: error: {alone}\n"


def test_check_refused_sees_what_it_must(tmp_path, capsys):
    """The checker itself: a second line, a file written or a wrong status each fail it."""

    def noisy(argv: Sequence[str]) -> int:
        print("hetsim: error: x: y\nmore", file=sys.stderr)
        return 2

    def writer(argv: Sequence[str]) -> int:
        (tmp_path / "left").write_text("x")
        print("hetsim: error: x: y", file=sys.stderr)
        return 2

    for entry in (noisy, writer, lambda argv: 0):
        with pytest.raises(AssertionError):
            check_refused(entry, [], "x: y", tmp_path, capsys)
