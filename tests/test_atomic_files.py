"""``hetsim.core.files``: an output folder is written all or nothing, and one that cannot be
written is refused before any work. Unwritable folders are emulated by ``os.access`` answering
no for them (as root, which tests may run as, every folder is writable)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hetsim.core import files
from hetsim.core.errors import ConfigError
from hetsim.core.files import atomic_folder, check_out_folder


def unwritable(monkeypatch: pytest.MonkeyPatch, *folders: Path) -> None:
    real = os.access
    denied = {f.resolve() for f in folders}
    monkeypatch.setattr(files.os, "access", lambda p, mode: Path(p).resolve() not in denied and real(p, mode))


def test_a_folder_where_no_folder_can_be_made_is_refused_before_the_work(tmp_path: Path, monkeypatch) -> None:
    """A parent that its permissions call writable but where nothing can be made (/proc, a
    read-only mount) passed the check: simulate ran in full, then failed. Emulated by mkdtemp
    failing as on a read-only filesystem; the probe folder leaves nothing behind."""
    import errno
    import tempfile

    def read_only(**kwargs: object) -> str:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(ConfigError, match=rf"^--out: cannot make a folder in {tmp_path}: Read-only file system$"):
        check_out_folder(tmp_path / "out", "--out")
    monkeypatch.undo()
    check_out_folder(tmp_path / "out", "--out")
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_output_folder_is_refused_before_the_work(tmp_path: Path, monkeypatch) -> None:
    """simulate --out into an existing read-only folder simulated first and then failed, naming a
    temporary file; now the check before the work names the folder."""
    out = tmp_path / "ro"
    out.mkdir()
    unwritable(monkeypatch, out)
    with pytest.raises(ConfigError, match=rf"^--out: cannot write in {out}: Permission denied$"):
        check_out_folder(out, "--out")


@pytest.mark.parametrize("denied", ["", "plots"], ids=["top", "subfolder"])
def test_a_folder_that_cannot_take_every_file_is_left_as_it_was(tmp_path: Path, monkeypatch, denied: str) -> None:
    """report into a results folder whose plots/ could be written but not its top: the plots were
    replaced before the tables failed (sorted order), and the line named a temporary path. Now an
    unwritable folder is refused before the work, and every destination is checked before the
    first file moves (a subfolder that cannot be written): nothing changes."""
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    (run / "plots" / "a.png").write_text("old plot")
    (run / "summary.csv").write_text("old table")
    unwritable(monkeypatch, run / denied)
    with pytest.raises(ConfigError, match=rf"^run_dir: cannot write in {run / denied}: Permission denied$"):
        with atomic_folder(run, "run_dir") as tmp:
            (tmp / "plots").mkdir()
            (tmp / "plots" / "a.png").write_text("new plot")
            (tmp / "summary.csv").write_text("new table")
    assert (run / "plots" / "a.png").read_text() == "old plot"
    assert (run / "summary.csv").read_text() == "old table"
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary folder left beside it


def test_a_runs_folder_that_cannot_take_a_new_sweep_names_the_option(tmp_path: Path, monkeypatch) -> None:
    """sweep --runs under a folder where the sweep's own folder cannot be made: the line named
    the new folder's path alone, not the option it came from."""
    from hetsim.sweep.results import RunFolder

    real = Path.mkdir

    def mkdir(self: Path, *args, **kwargs) -> None:
        if self.parent == tmp_path / "runs":
            raise PermissionError(13, "Permission denied")
        real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(ConfigError, match=rf"^--runs: cannot make {tmp_path}/runs/0001_x: Permission denied$"):
        RunFolder.create(tmp_path / "runs", "x")


def test_a_sweep_of_a_long_name_gets_a_folder_of_its_first_characters(tmp_path: Path) -> None:
    """A sweep named by 300 characters: its folder could not be made ("File name too long", on
    --runs, which was not at fault); its folder takes the name's first 64 characters."""
    from hetsim.sweep.results import NAME_CHARS, RunFolder

    folder = RunFolder.create(tmp_path / "runs", "a b/" + "x" * 296)
    assert folder.path.name == "0001_a-b-" + "x" * (NAME_CHARS - 4) and folder.path.is_dir()
    assert RunFolder.create(tmp_path / "runs", "-" * 300).path.name == "0002_sweep"  # nothing left: the default


def test_a_refusal_that_names_a_file_in_the_temporary_folder_names_the_option(tmp_path: Path) -> None:
    """A check inside atomic_folder's block that names the file it was given (a temporary path,
    gone by then): the line names the option and the folder instead."""
    from hetsim.core.files import atomic_folder

    with pytest.raises(ConfigError) as info:
        with atomic_folder(tmp_path / "out", "--out") as tmp:
            raise ConfigError(str(tmp / "table.txt"), "unknown file type '.txt'")
    assert (info.value.field, info.value.problem) == (
        "--out",
        f"cannot write {tmp_path / 'out'}: unknown file type '.txt'",
    )


def test_a_write_that_fails_for_want_of_space_names_what_it_was_writing(tmp_path):
    """A full disk raises OSError(ENOSPC) from inside a writer, often with no file name (pyarrow,
    matplotlib): the line names the file or folder the results were for, and nothing is left."""
    import errno

    from hetsim.core.files import atomic_write

    def full(_: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'out.json'}: cannot be written: No space left on device$"):
        atomic_write(tmp_path / "out.json", full)
    with pytest.raises(ConfigError, match=rf"^--out: cannot write {tmp_path / 'run'}: No space left on device$"):
        with atomic_folder(tmp_path / "run", "--out") as tmp:
            full(str(tmp))
    with pytest.raises(ConfigError, match=rf"^--out: cannot write {tmp_path / 'run'}: No space left on device$"):
        with atomic_folder(tmp_path / "run", "--out") as tmp:  # a file of it written atomically (simulate's)
            atomic_write(tmp / "summary.json", full)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError):  # another file's error is its own
        atomic_write(tmp_path / "out.json", lambda _: open(tmp_path / "absent"))

    def refused(_: str) -> None:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    with pytest.raises(ConnectionRefusedError):  # not the storage's: not relabelled as a write that failed
        atomic_write(tmp_path / "out.json", refused)
