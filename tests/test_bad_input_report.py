"""``hetsim report``: every bad or hostile results folder and option, and the one line it gets
(exit status 2, the folder left as it was: :func:`tests.test_bad_input.check_refused`); and the
damaged parts a report heals (one note each) rather than refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from hetsim.cli.main import main
from tests.refusals import check_refused, copy_results_folder, deep, edit, overwrite


def remove_parts(run: Path) -> None:
    for part in (run / "parts").iterdir():
        part.unlink()
    (run / "parts").rmdir()


def sweep_toml_folder(run: Path) -> None:
    (run / "sweep.toml").unlink()
    (run / "sweep.toml").mkdir()


def part_column(column: str, value: object) -> Callable[[Path], None]:
    """cell 0's part with ``column`` set to ``value`` (a well-formed Parquet file, wrong inside)."""

    def damage(run: Path) -> None:
        path = run / "parts" / "cell-00000.parquet"
        frame = pd.read_parquet(path)
        frame[column] = value
        frame.to_parquet(path, index=False)

    return damage


NOT_A_RESULTS_FOLDER = "run_dir: {target} is not a sweep results folder (no sweep.toml)"

CASES = [
    # (damage to a copy of a finished folder, what `report` is given ({run}: the copy), extra options, line)
    pytest.param(lambda run: None, "{tmp}/nothing", [], NOT_A_RESULTS_FOLDER, id="no-such-folder"),
    pytest.param(lambda run: None, "{tmp}", [], NOT_A_RESULTS_FOLDER, id="not-a-results-folder"),
    pytest.param(lambda run: None, "{run}/sweep.toml", [], NOT_A_RESULTS_FOLDER, id="a-file"),
    pytest.param(sweep_toml_folder, "{run}", [], NOT_A_RESULTS_FOLDER, id="sweep-toml-a-folder"),
    pytest.param(edit("sweep.toml", "seed = 11", "seed = 12"), "{run}", [],
                 "{run}/sweep.toml: edited since the sweep began (its finished cells were run from the sweep as it "
                 "was): restore it, or start a new sweep from the edited file", id="seed-edited"),
    pytest.param(edit("sweep.toml", "replications = 1", "replications = 0"), "{run}", [],
                 "replications: must be in [1, 100000], got 0", id="replications-zero"),
    pytest.param(edit("sweep.toml", '"equal"', '"fastest"'), "{run}", [],
                 "policies.0: unknown policy 'fastest' (known: {policies})", id="policy-edited"),
    pytest.param(overwrite("sweep.toml", b"not toml {"), "{run}", [],
                 "{run}/sweep.toml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, column 5)",
                 id="sweep-toml-garbage"),
    pytest.param(edit("sweep.toml", "name =", "\ufeffname ="), "{run}", [],
                 "{run}/sweep.toml: starts with a byte-order mark (BOM): save it as UTF-8 without one",
                 id="sweep-toml-bom"),
    pytest.param(overwrite("sweep.toml", deep(".toml").encode()), "{run}", [],
                 "{run}/sweep.toml: not valid TOML: nested too deeply", id="sweep-toml-deep"),
    pytest.param(remove_parts, "{run}", [], "{run}: no finished cells yet", id="no-parts"),
    pytest.param(overwrite("traces.parquet", b"junk"), "{run}", [],
                 "{run}/traces.parquet: not a readable Parquet table: Could not open Parquet input source "
                 "'{run}/traces.parquet': Parquet file size is 4 bytes, smaller than the minimum file footer (8 bytes)",
                 id="traces-garbage"),
    pytest.param(lambda run: None, "{run}", ["--metric", "time_to_target"],
                 "--metric: time_to_target needs [workload.efficiency] with target_steps in the sweep's scenario",
                 id="metric-without-target"),
    pytest.param(lambda run: None, "{run}", ["--metric", "speed"],
                 "hetsim report: argument --metric: invalid choice: 'speed' (choose from 'throughput', "
                 "'time_to_target')",
                 id="unknown-metric"),
]  # fmt: skip


@pytest.mark.parametrize(("damage", "target", "extra", "line"), CASES)
def test_report_refuses_a_folder_it_cannot_trust(damage, target, extra, line, finished, tmp_path, capsys):
    run = copy_results_folder(finished, tmp_path / "run")
    seeds = pd.read_parquet(run / "parts" / "cell-00000.parquet")["seed"].tolist()
    damage(run)
    target = target.replace("{run}", str(run))
    line = line.replace("{target}", target).replace("{run}", str(run)).replace("{seeds}", str(seeds))
    check_refused(main, ["report", target, *extra], line, tmp_path, capsys)


def test_report_without_a_folder(tmp_path, capsys):
    check_refused(main, ["report"], "hetsim report: the following arguments are required: run_dir", tmp_path, capsys)


HEALED = [
    # (damage, the note's problem): the part is removed with one note; the report goes on without it
    pytest.param(overwrite("parts/cell-00000.parquet", b"junk"),
                 "cannot be read (Could not open Parquet input source '{run}/parts/cell-00000.parquet': Parquet file "
                 "size is 4 bytes, smaller than the minimum file footer (8 bytes))", id="garbage"),
    pytest.param(lambda run: (run / "parts" / "cell-00000.parquet").write_bytes(b""),
                 "cannot be read (Could not open Parquet input source '{run}/parts/cell-00000.parquet': Parquet file "
                 "size is 0 bytes)", id="empty"),
    pytest.param(lambda run: pd.read_parquet(run / "parts" / "cell-00000.parquet").drop(columns=["mean_step_s"])
                 .to_parquet(run / "parts" / "cell-00000.parquet", index=False),
                 "lacks the column 'mean_step_s'", id="missing-column"),
    pytest.param(part_column("mean_step_s", "slow"), "holds a non-numeric value in 'mean_step_s'",
                 id="text-in-a-metric"),
    pytest.param(part_column("mean_step_s", float("nan")), "holds a value that is not finite in 'mean_step_s'",
                 id="nan-in-a-metric"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("damage", "problem"), HEALED)
def test_report_heals_a_damaged_part_with_one_note(damage, problem, finished, tmp_path, capsys):
    run = copy_results_folder(finished, tmp_path / "run")
    damage(run)
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    note = (
        f"parts/cell-00000.parquet {problem.replace('{run}', str(run))}: its cell is left out until the sweep "
        f"is resumed (--resume {run})"
    )
    assert capsys.readouterr().err == f"hetsim: note: {note}\n"
    assert sorted(p.name for p in (run / "parts").iterdir()) == ["cell-00001.parquet"]
