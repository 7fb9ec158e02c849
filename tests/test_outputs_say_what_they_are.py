"""Outputs say what they are (issue 29): a run folder is not replaced without --force; every
output's metadata names the scenario, seed, command, version and commit; a file or folder of
the wrong kind is named for what it is, in one line with exit status 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hetsim import __version__
from hetsim.cli.main import main
from hetsim.core import provenance
from hetsim.core.provenance import git_commit
from hetsim.scenario.config import load_scenario

SMALL = ["simulate", "paper", "--policy", "equal", "--set", "workload.epochs=1"]


def test_simulate_out_refuses_a_folder_holding_files_unless_forced(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()  # an empty folder is fine
    assert main([*SMALL, "--out", str(out)]) == 0
    before = (out / "summary.json").read_bytes()
    capsys.readouterr()
    assert main([*SMALL, "--seed", "7", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"hetsim: error: --out: {out} already holds files (add --force to replace them, or choose a new folder)\n"
    )
    assert (out / "summary.json").read_bytes() == before  # the earlier run's results are kept
    assert main([*SMALL, "--seed", "7", "--out", str(out), "--force"]) == 0
    assert json.loads((out / "summary.json").read_text())["seed"] == 7


def test_summary_json_records_scenario_seed_command_version_and_commit(tmp_path):
    out = tmp_path / "out"
    assert main([*SMALL, "--seed", "3", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == 3 and summary["hetsim_version"] == __version__
    assert summary["git_commit"] == git_commit()  # None outside a git checkout
    assert summary["scenario"]["name"] == "paper"
    rebuilt = load_scenario(summary["scenario"]["config"])  # the config rebuilds the scenario run
    assert rebuilt.to_dict() == load_scenario("paper", ["workload.epochs=1"]).to_dict()
    assert [s["policy"] for s in summary["policies"]] == ["equal"]
    assert "command" in summary and summary["date"]
    assert summary["engines"] == {"equal": "vector"}  # which engine --engine auto chose (the traces are the same)
    assert main([*SMALL, "--engine", "simpy", "--out", str(tmp_path / "simpy")]) == 0
    assert json.loads((tmp_path / "simpy" / "summary.json").read_text())["engines"] == {"equal": "simpy"}


def test_calibrate_writes_where_its_scenario_came_from(tmp_path, capsys):
    sim, fitted = tmp_path / "sim", tmp_path / "fitted.toml"
    assert main(["simulate", "paper", "--policy", "dynamic", "--set", "workload.epochs=3", "--out", str(sim)]) == 0
    assert main(["calibrate", str(sim / "trace.csv"), "-o", str(fitted)]) == 0
    text = fitted.read_text()
    header = dict(line[2:].split(": ", 1) for line in text.splitlines() if line.startswith("# "))
    assert header["hetsim_version"] == __version__ and "calibrate" in header["command"]
    description = tomllib.loads(text)["description"]
    assert str(sim / "trace.csv") in description and f"hetsim {__version__}" in description
    load_scenario(str(fitted))  # still a scenario file


def test_plan_json_records_the_command_and_commit(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", "paper", "--policy", "equal,optimal", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["git_commit"] == git_commit() and "plan" in data["command"] and data["seed"] == 0
    assert data["scenario"]["name"] == "paper" and data["hetsim_version"] == __version__


@pytest.mark.slow
def test_a_sweeps_meta_json_records_its_scenario_and_seed(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        'name = "tiny"\nbase = "paper"\npolicies = ["equal"]\nreplications = 1\nseed = 5\n'
        '[grid]\n"workload.epochs" = [1]\n'
    )
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    meta = json.loads(next((tmp_path / "runs").glob("*_tiny/meta.json")).read_text())
    assert meta["seed"] == 5 and meta["scenario"]["name"] == "paper"
    assert load_scenario(meta["scenario"]["config"]).to_dict() == load_scenario("paper").to_dict()
    assert meta["git_commit"] == git_commit() and meta["hetsim_version"] == __version__ and "sweep" in meta["command"]


@pytest.mark.slow
def test_each_resume_is_recorded_and_another_hetsims_is_said(tmp_path, capsys):
    """A resume wrote nothing: cells of two versions of the code, or two engines, stood in one
    folder under the first's commit."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('name = "tiny"\nbase = "paper"\npolicies = ["equal"]\n[grid]\n"workload.epochs" = [1, 2]\n')
    assert main(["sweep", str(sweep), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    run = next((tmp_path / "runs").glob("*_tiny"))
    assert main(["sweep", "--resume", str(run), "--engine", "simpy", "--jobs", "1"]) == 0
    assert "note" not in capsys.readouterr().err  # the same hetsim: nothing to say
    meta = json.loads((run / "meta.json").read_text())
    (first,) = meta["resumes"]
    assert first["engine"] == "simpy" and first["git_commit"] == git_commit() and "--resume" in first["command"]
    (run / "meta.json").write_text(json.dumps({**meta, "git_commit": "0" * 40}))  # as if begun at another commit
    (run / "parts" / "cell-00001.parquet").unlink()
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 0
    note = f"hetsim: note: {run} was started by another hetsim (git_commit {'0' * 40} -> {git_commit()}): its cells"
    assert note in capsys.readouterr().err
    meta = json.loads((run / "meta.json").read_text())
    assert [r["engine"] for r in meta["resumes"]] == ["simpy", "auto"]
    # a resume refused when the folder is checked records nothing (a folder without its fingerprint,
    # its seed edited: heal refuses the parts)
    del meta["sweep_sha256"]
    (run / "meta.json").write_text(json.dumps(meta))
    (run / "sweep.toml").write_text((run / "sweep.toml").read_text().replace("seed = 0", "seed = 1"))
    assert main(["sweep", "--resume", str(run), "--jobs", "1"]) == 2
    assert json.loads((run / "meta.json").read_text()) == meta


@pytest.mark.slow
def test_an_exported_trace_says_what_made_it(tmp_path):
    """export-trace's otherData recorded the version alone."""
    assert main([*SMALL, "--out", str(tmp_path / "sim")]) == 0
    assert main(["export-trace", str(tmp_path / "sim"), "-o", str(tmp_path / "t.json")]) == 0
    made = json.loads((tmp_path / "t.json").read_text())["otherData"]
    assert made["source"] == str(tmp_path / "sim") and made["git_commit"] == git_commit()
    assert made["hetsim_version"] == __version__ and made["date"] and "export-trace" in made["command"]


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_an_imported_parquet_trace_says_what_made_it_and_calibrate_carries_it_on(tmp_path, capsys):
    """import-logs and import-trace wrote a bare table: a trace that travels alone said nothing
    of where it came from, nor did the scenario fitted to it."""
    import pandas as pd

    logs = Path(__file__).resolve().parents[1] / "hetsim/data/reference-logs/2021_06_18_08_22_00_VGG16"
    trace, fitted = tmp_path / "t.parquet", tmp_path / "fitted.toml"
    assert main(["import-logs", str(logs), "-o", str(trace)]) == 0
    made = pd.read_parquet(trace).attrs["provenance"]
    assert made["format"] == "reference-logs" and made["sources"] == [str(logs)]
    assert made["hetsim_version"] == __version__ and made["git_commit"] == git_commit() and made["date"]
    assert "import-logs" in made["command"]
    assert main(["calibrate", str(trace), "-o", str(fitted)]) == 0
    header = dict(line[2:].split(": ", 1) for line in fitted.read_text().splitlines() if line.startswith("# "))
    assert header["trace made by"].startswith(made["command"]) and made["date"] in header["trace made by"]
    load_scenario(str(fitted))  # still a scenario file
    capsys.readouterr()
    assert main(["calibrate", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace_provenance"] == made


def test_a_line_break_in_the_command_stays_in_the_header_comment():
    """calibrate --name $'x\\nseed = 7' wrote its command across two lines: the second was read
    as TOML (a setting, or a file that no longer loads)."""
    record = {"command": "hetsim calibrate t.csv --name 'x\nseed = 7\x01'", "hetsim_version": __version__,
              "git_commit": None, "date": "2026-12-05"}  # fmt: skip
    header = provenance.comment_header(record)
    assert header.count("\n") == 4 and "# command: hetsim calibrate t.csv --name 'x\\nseed = 7\\x01'" in header
    assert tomllib.loads(header + "name = 'y'\n") == {"name": "y"}


def test_a_scenario_file_given_to_sweep_is_named(tmp_path, capsys):
    path = tmp_path / "paper.toml"
    assert main(["show", "paper"]) == 0
    path.write_text(capsys.readouterr().out)
    assert main(["sweep", str(path), "--runs", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == (
        f"hetsim: error: {path}: this is a scenario file, not a sweep file (use: python -m hetsim simulate {path}; "
        f'a sweep names it as its base: base = "{path}")\n'
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", [["simulate"], ["analyze"], ["plan"], ["costs", "--batch", "8"], ["show"]])
def test_a_sweep_file_given_where_a_scenario_belongs_is_named(command, tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\nbase = "paper"\n[grid]\n"workload.epochs" = [1, 2]\n')
    assert main([command[0], str(path), *command[1:]]) == 2
    assert capsys.readouterr().err == (
        f"hetsim: error: {path}: this is a sweep file, not a scenario file (use: python -m hetsim sweep {path})\n"
    )


def test_validation_compare_names_a_sweep_folder_and_a_matrix_folder(tmp_path, capsys):
    from validation.cli import main as validation_main

    sweep = tmp_path / "0001_default"
    sweep.mkdir()
    (sweep / "sweep.toml").write_text('name = "default"\n')
    (sweep / "meta.json").write_text('{"cells": 1}')
    assert validation_main(["compare", str(sweep)]) == 2
    assert capsys.readouterr().err == (
        f"validation: error: {sweep}: this is a hetsim sweep results folder, not a validation run folder "
        f"(use: python -m hetsim report {sweep})\n"
    )
    matrix = tmp_path / "matrix"
    (matrix / "runs").mkdir(parents=True)
    (matrix / "results.json").write_text("{}")
    assert validation_main(["compare", str(matrix)]) == 2
    assert capsys.readouterr().err == (
        f"validation: error: {matrix}: this is a validation matrix folder, not a run folder "
        f"(compare one of its runs: {matrix / 'runs'}/NAME)\n"
    )


def test_json_outputs_are_strict_json_a_value_that_is_not_finite_is_null(tmp_path):
    """A user's evaluate() returning nan (a regression model has no accuracy) put a bare NaN in
    summary.json, which strict parsers (JavaScript's, jq) refuse; nan and inf are written as null,
    through dicts, lists and tuples, and numbers stay as they are."""
    from hetsim.core.files import finite, json_text, write_json

    data = {"accuracy": float("nan"), "rates": (1.5, float("inf"), -float("inf")), "n": 3, "ok": True, "x": [0.25]}
    assert finite(data) == {"accuracy": None, "rates": [1.5, None, None], "n": 3, "ok": True, "x": [0.25]}
    write_json(tmp_path / "s.json", data)
    text = (tmp_path / "s.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}")) == finite(data)
    assert json_text(float("nan")) == "null"


def _commit_of(repo: Path) -> str:
    """What ``git_commit`` records for the copy of hetsim in ``repo`` (imported from there)."""
    code = "from hetsim.core.provenance import git_commit; print(git_commit())"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


@pytest.mark.slow
def test_the_commit_is_hetsims_own_and_dirty_for_any_change_to_its_source(tmp_path):
    """The commit was whatever repository enclosed the package (a project's ignored .venv gave
    the project's HEAD), and "+dirty" looked at hetsim/core alone (an edited engine read clean)."""
    git = lambda *args: subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "hetsim" / "core").mkdir(parents=True)
    (tmp_path / "hetsim" / "__init__.py").write_text(f"__version__ = {__version__!r}\n")
    (tmp_path / "hetsim" / "core" / "__init__.py").write_text("")
    shutil.copy(provenance.__file__, tmp_path / "hetsim" / "core" / "provenance.py")
    (tmp_path / ".gitignore").write_text("hetsim/\n__pycache__/\n")
    (tmp_path / "README").write_text("a project that keeps hetsim in an ignored folder\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "theirs")
    assert _commit_of(tmp_path) == "None"  # not hetsim's commit
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "hetsim tracked")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert _commit_of(tmp_path) == head.strip()
    (tmp_path / "README").write_text("changed outside hetsim's source\n")
    assert _commit_of(tmp_path) == head.strip()
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "run.py").write_text("# validation's source counts too\n")
    assert _commit_of(tmp_path) == head.strip() + "+dirty"
    (tmp_path / "validation" / "run.py").unlink()
    (tmp_path / "hetsim" / "engines.py").write_text("# a new module\n")
    assert _commit_of(tmp_path) == head.strip() + "+dirty"


def test_results_made_with_plugins_name_them_and_a_reader_without_them_is_told(tmp_path, monkeypatch):
    """A scenario naming a plug-in loads only with it: the record names HETSIM_PLUGINS, and a
    folder read without them says which it was made with (it said only that it did not load)."""
    from hetsim.traces.sources import _rebuilt

    monkeypatch.delenv("HETSIM_PLUGINS", raising=False)
    assert "hetsim_plugins" not in provenance.provenance(["x"])
    monkeypatch.setenv("HETSIM_PLUGINS", "/somewhere/my_delays.py")
    assert provenance.provenance(["x"])["hetsim_plugins"] == "/somewhere/my_delays.py"
    monkeypatch.delenv("HETSIM_PLUGINS")  # a reader without them
    config = load_scenario("paper").to_dict()
    config["workers"][0]["delay"] = {"dist": "not-here"}
    record = {"scenario": {"config": config}, "hetsim_plugins": "/somewhere/my_delays.py"}
    scenario, notes = _rebuilt(record, tmp_path / "summary.json")
    assert scenario is None and "; it was made with HETSIM_PLUGINS=/somewhere/my_delays.py)" in notes[0]
