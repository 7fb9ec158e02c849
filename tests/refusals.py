"""The bad-input contract's checker and case builders, shared by every ``tests/test_bad_input_*.py``
corpus and any test of a refusal: :func:`check_refused` (exit status 2, exactly one line on stderr,
nothing written or changed, no warning, no process left behind), :func:`case`, and the files and
folders the cases damage."""

from __future__ import annotations

import multiprocessing
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
import tomli_w

from hetsim.cli.main import main
from hetsim.core.registry import DISTRIBUTIONS, NETWORKS, POLICIES
from hetsim.scenario.config import builtin_names
from tests.helpers import scenario_dict

HUGE = 10**20
DEEP = 100_000  # levels of nesting in a hostile file
ONE = scenario_dict([{"per_sample_s": 0.001}], global_batch=8)  # the smallest scenario
BACKUP_ALONE = (
    "policy.backups: must be smaller than the number of workers (1), got 1 (backup needs two workers or more)"
)
WORKER_KEYS = (  # what a [[workers]] table allows, as errors list them
    "name, count, max_batch, node, unfitted, overhead_s, per_sample_s, cost, noise, delay, shared_noise, slowdown, "
    "failure"
)


def fill(text: str, tmp_path: Path) -> str:
    """``text`` with its placeholders filled in: ``{tmp}`` (the test's folder) and the registries'
    name lists, read when the test runs (a plug-in registered by another test shows up there)."""
    for key, names in (("{policies}", POLICIES), ("{distributions}", DISTRIBUTIONS), ("{networks}", NETWORKS),
                       ("{builtins}", builtin_names())):  # fmt: skip
        if key in text:
            text = text.replace(key, ", ".join(names))
    return text.replace("{tmp}", str(tmp_path))


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Each ``name: content`` as a file under ``root`` (text as UTF-8; ``{tmp}`` filled in)."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(fill(content, root), encoding="utf-8")


def toml(data: Mapping[str, object]) -> str:
    return tomli_w.dumps(dict(data))


def deep(suffix: str) -> str:
    """A file nested DEEP levels: TOML (an array in an array ...) or JSON."""
    nested = "[" * DEEP + "]" * DEEP
    return f"a = {nested}\n" if suffix == ".toml" else nested


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def child_pids() -> set[int]:
    """This process's child processes, running or not yet reaped (Linux: from /proc)."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return {p.pid for p in multiprocessing.active_children()}
    pids: set[int] = set()
    for task in tasks.iterdir():
        try:
            pids.update(int(pid) for pid in (task / "children").read_text().split())
        except OSError:  # a thread that ended meanwhile, or a kernel without the file
            continue
    return pids


def check_refused(
    entry: Callable[[Sequence[str]], int],
    argv: Sequence[str],
    line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    prog: str = "hetsim",
) -> None:
    """``entry(argv)`` (run in ``tmp_path``, where every case keeps its files) refuses the input
    as promised: exit status 2; stderr exactly ``<prog>: error: <line>`` and a newline (so no
    traceback, no note, no second line); nothing on stdout; no Python warning (NumPy's included);
    nothing under ``tmp_path`` written, changed or removed; no process left behind. ``{tmp}`` and
    the other placeholders of :func:`fill` are filled in, in ``argv`` and ``line``."""
    argv = [fill(a, tmp_path) for a in argv]
    capsys.readouterr()
    before, children = snapshot(tmp_path), child_pids()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = entry(argv)
    captured = capsys.readouterr()
    assert (status, captured.err) == (2, f"{prog}: error: {fill(line, tmp_path)}\n")
    assert captured.out == ""
    assert [str(w.message) for w in caught] == []
    after = snapshot(tmp_path)
    assert sorted(set(after) - set(before)) == [], "written"
    assert sorted(set(before) - set(after)) == [], "removed"
    assert [name for name in before if before[name] != after[name]] == [], "changed"
    assert child_pids() <= children, "a process was left behind"


def xfail(reason: str) -> pytest.MarkDecorator:
    """A case the code does not refuse as promised yet: the test pins the promise."""
    return pytest.mark.xfail(strict=True, reason=reason)


def case(
    id: str,
    argv: Sequence[str],
    line: str,
    files: Mapping[str, str | bytes] | None = None,
    marks: pytest.MarkDecorator | Sequence[pytest.MarkDecorator] = (),
) -> object:
    """One (argv, line, files) parameter set, named ``id``."""
    return pytest.param(list(argv), line, dict(files or {}), id=id, marks=marks)


# ----------------------------------------------------------------------------- a finished sweep


def small_scenario() -> dict[str, object]:
    """A two-worker scenario of two steps, quick to sweep."""
    return scenario_dict([{"per_sample_s": 0.001, "count": 2}], global_batch=16, steps_per_epoch=2, epochs=1)


def small_sweep(**fields: object) -> dict[str, object]:
    """A sweep of two cells (``equal`` at 2 and 3 workers) around :func:`small_scenario`."""
    return {"name": "small", "seed": 11, "base": small_scenario(), "policies": ["equal"],
            "grid": {"workers.0.count": [2, 3]}, **fields}  # fmt: skip


def make_results_folder(root: Path) -> Path:
    """A finished results folder of :func:`small_sweep` under ``root`` (its path)."""
    (root / "sweep.toml").write_text(toml(small_sweep()), encoding="utf-8")
    assert main(["sweep", str(root / "sweep.toml"), "--runs", str(root / "runs"), "--jobs", "1"]) == 0
    (run,) = (root / "runs").iterdir()
    return run


def copy_results_folder(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def edit(name: str, old: str, new: str) -> Callable[[Path], None]:
    """A damage: ``old`` replaced by ``new`` in the results folder's file ``name``."""

    def damage(run: Path) -> None:
        text = (run / name).read_text(encoding="utf-8")
        assert old in text
        (run / name).write_text(text.replace(old, new), encoding="utf-8")

    return damage


def overwrite(name: str, content: str | bytes) -> Callable[[Path], None]:
    """A damage: the results folder's file ``name`` replaced by ``content``."""
    data = content.encode() if isinstance(content, str) else content
    return lambda run: (run / name).write_bytes(data)


# ----------------------------------------------------------------------------- checks of their own
