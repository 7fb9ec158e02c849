"""Writing files so that a reader never sees half of one: a temporary file beside the target,
flushed to disk, then renamed into place (atomic on POSIX). A killed run leaves either the old
file or the new one, never a torn one. JSON and tables (CSV or Parquet, by suffix) have their
writers here; trace files go through :mod:`hetsim.model.trace`, which uses them."""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsim.core.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

FRAME_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}  # file suffix -> format
TMP_SUFFIX = ".tmp"  # a temporary file is ``.<target name>.<random>.tmp``: a killed write leaves one
LOCK_NAME = ".lock"  # a folder's lock file (see :func:`exclusive`)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give a new file; mkstemp's are 0600


# where a write fails for want of room or of a writable medium (not a bug in the writer): named as the output's
STORAGE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


def _storage_failure(exc: OSError, written: str | Path) -> bool:
    """Whether ``exc`` is the storage failing a write into ``written`` (a file, or a folder and
    what is in it): one of :data:`STORAGE_ERRORS`, naming no file or one there. Anything else is
    another error, or another file's, and keeps its own message."""
    return exc.errno in STORAGE_ERRORS and (exc.filename is None or str(exc.filename).startswith(str(written)))


def not_a_file(path: Path) -> str:
    """Why ``path``, which is not a regular file, cannot be read as one: a folder, something that
    is there but is no file (a device, a pipe), or nothing."""
    if path.is_dir():
        return "a folder, not a file"
    return "not a regular file (a device, pipe or socket)" if path.exists() else "no such file"


class WriteFailed(ConfigError):
    """A file that could not be written: ``field`` its path, ``why`` the system's reason (what
    :func:`check_writable` and :func:`atomic_folder` say again under their option's name)."""

    def __init__(self, path: str, what: str, why: str) -> None:
        self.what, self.why = what, why
        super().__init__(path, f"{what}: {why}")

    def __reduce__(self) -> tuple[type[WriteFailed], tuple[str, str, str]]:  # type: ignore[override]
        return WriteFailed, (self.field, self.what, self.why)


def check_writable(target: Path, option: str | None = None) -> None:
    """Make sure a file can be written at ``target`` before any work is done for it (the same
    ConfigError :func:`atomic_write` would raise at the end, on ``option`` where given, else on
    the path; its folder is made if missing)."""
    try:
        os.unlink(_temporary_beside(Path(target)))
    except WriteFailed as exc:
        if option is None:
            raise
        raise ConfigError(option, f"cannot write {target}: {exc.why}") from None


def _temporary_beside(target: Path) -> str:
    """A new empty temporary file beside ``target`` (its folder made if missing)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=target.parent)
    except OSError as exc:
        raise WriteFailed(str(target), "cannot write here", exc.strerror or str(exc)) from None
    os.close(fd)
    return tmp


def atomic_write(target: Path, write: Callable[[str], object]) -> None:
    """Call ``write(tmp_path)`` on a temporary file beside ``target``, then rename it into place.
    A path that cannot be written (a file where a folder should be, no permission) raises
    :class:`ConfigError` naming it."""
    target = Path(target)
    tmp = _temporary_beside(target)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except OSError as exc:  # a full disk, say: name the file (a writer's error names none, or the temporary)
        Path(tmp).unlink(missing_ok=True)
        if not _storage_failure(exc, tmp):
            raise
        raise WriteFailed(str(target), "cannot be written", exc.strerror or str(exc)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_out_folder(target: Path, option: str = "--out") -> None:
    """An output folder can be made or written: not a file, its parent made if missing and
    writable, a folder made in it and removed (the ConfigError :func:`atomic_folder` would
    raise, before any work is done for it)."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise ConfigError(option, f"{target} exists and is not a folder")
    if target.is_dir() and not os.access(target, os.W_OK | os.X_OK):
        raise ConfigError(option, f"cannot write in {target}: Permission denied")
    above = nearest_existing(target.parent)
    if not above.is_dir():
        raise ConfigError(option, f"{above} is a file, not a folder")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(option, f"cannot write in {target.parent}: {exc.strerror or exc}") from None
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise ConfigError(option, f"cannot write in {target.parent}: Permission denied")
    try:  # what atomic_folder will do, tried: permissions say nothing of /proc or a read-only mount
        os.rmdir(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".probe", dir=target.parent))
    except OSError as exc:
        raise ConfigError(option, f"cannot make a folder in {target.parent}: {exc.strerror or exc}") from None


def check_empty_folder(target: Path, option: str, hint: str = "") -> None:
    """ConfigError on ``option`` when ``target`` exists and is not an empty folder (``hint``, if
    given, follows the problem after a colon)."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(option, f"{target} exists and is not an empty folder" + (f": {hint}" if hint else ""))


def check_own_folder(target: Path, option: str, own: Collection[str], what: str) -> None:
    """ConfigError on ``option`` when ``target`` holds anything but the ``own`` names a command
    writes there, its lock and a killed write's temporaries (a previous result of the same
    command is replaced, or resumed; anything else, another command's run folder above all, is
    refused before any work)."""
    target = Path(target)
    if not target.is_dir():
        return
    ours = {*own, LOCK_NAME}  # and a killed write's temporary file: this module's own
    foreign = sorted(p.name for p in target.iterdir() if p.name not in ours and not _temporary(p.name))
    if foreign:
        raise ConfigError(option, f"{target} holds {foreign[0]}, not a {what}'s file: give a new folder")


def _temporary(name: str) -> bool:
    """Whether ``name`` is one of this module's temporary files (``.<target>.<random>.tmp``)."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def check_new_file(path: Path, option: str) -> None:
    """A file can be written at ``path`` (an output option's): not a folder; in a folder that
    exists, a file can be made there (:func:`check_writable`); else the nearest existing ancestor
    is a writable folder. Missing folders are made only when the file is written
    (:func:`atomic_write`), so a command refused before then leaves nothing behind."""
    if path.is_dir():
        raise ConfigError(option, f"{path} is a folder")
    if path.parent.is_dir():
        check_writable(path, option)
        return
    ancestor = nearest_existing(path.parent)
    if not ancestor.is_dir():
        raise ConfigError(option, f"cannot write {path}: {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(option, f"cannot write {path}: {ancestor} is not writable")


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (its root, or ``.`` for a relative path, at the
    latest: one always does)."""
    path = Path(path)
    return next((p for p in (path, *path.parents) if p.exists()), Path(path.anchor or "."))


@contextmanager
def atomic_folder(target: Path, option: str) -> Iterator[Path]:
    """A temporary folder beside ``target`` to write into; when the block ends without an error
    its files (subfolders' too, as ``plots/speedup.png``) replace their namesakes in ``target``
    (whose other files are kept), so a failure leaves ``target`` as it was. ``option`` names the
    argument ``target`` came from in errors."""
    target = Path(target)
    check_out_folder(target, option)
    try:
        for stale in target.parent.glob(f".{target.name}.*{TMP_SUFFIX}"):  # left by a killed earlier write
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=target.parent))
    except OSError as exc:
        raise ConfigError(option, f"cannot write in {target.parent}: {exc.strerror or exc}") from None
    try:
        try:
            yield tmp
        except OSError as exc:  # writing into it failed (a full disk): name the folder the results were for
            if not _storage_failure(exc, tmp):
                raise
            raise ConfigError(option, f"cannot write {target}: {exc.strerror or exc}") from None
        except ConfigError as exc:  # a file written into it (atomic_write, say) named its temporary path
            if not exc.field.startswith(str(tmp)):
                raise
            why = exc.why if isinstance(exc, WriteFailed) else exc.problem
            raise ConfigError(option, f"cannot write {target}: {why}") from None
        target.mkdir(exist_ok=True)
        files = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if not p.is_dir())
        for name in files:  # check every move before the first, so none or all happen
            if (target / name).is_dir():
                raise ConfigError(option, f"cannot write {target / name}: a folder is in the way")
            where = nearest_existing((target / name).parent)
            if not os.access(where, os.W_OK | os.X_OK):
                raise ConfigError(option, f"cannot write in {where}: Permission denied")
        for name in files:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp / name, target / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_temporaries(folder: Path) -> int:
    """Delete the temporary files and folders that killed writes left below ``folder``; returns
    how many."""
    stale = [p for p in Path(folder).rglob(f".*{TMP_SUFFIX}")]
    for p in stale:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return len(stale)


def finite(data: Any) -> Any:
    """``data`` with every float that is not finite (nan, inf) as None, through dicts, lists and
    tuples: strict JSON has no NaN or Infinity, and a parser other than Python's refuses them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def json_text(data: Any) -> str:
    """``data`` as indented, strict JSON (:func:`finite`; anything unknown as its string)."""
    return json.dumps(finite(data), indent=2, default=str, allow_nan=False)


def write_json(target: Path, data: Any) -> None:
    """``data`` as :func:`json_text`, atomically."""
    text = json_text(data) + "\n"
    atomic_write(target, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def frame_format(path: str | Path, field: str | None = None, default: str | None = None) -> str:
    """``"csv"`` or ``"parquet"`` from a table file's suffix (:data:`FRAME_FORMATS`); an unknown
    suffix gives ``default``, or without one raises :class:`ConfigError` on ``field`` (the path
    itself when None)."""
    suffix = Path(path).suffix
    kind = FRAME_FORMATS.get(suffix.lower(), default)
    if kind is None:
        where = "" if field is None else f"{path}: "
        raise ConfigError(field or str(path), f"{where}unknown file type {suffix!r} (use {', '.join(FRAME_FORMATS)})")
    return kind


def write_frame(target: str | Path, frame: pd.DataFrame) -> None:
    """``frame`` (without its index) as CSV or Parquet by the suffix of ``target``, atomically."""
    target = Path(target)
    if frame_format(target) == "csv":
        atomic_write(target, lambda tmp: frame.to_csv(tmp, index=False))
    else:
        atomic_write(target, lambda tmp: frame.to_parquet(tmp, index=False))


def drop_bare_lock(folder: Path, remove_folder: bool) -> None:
    """Where ``folder`` holds nothing but its :func:`exclusive` lock (the work it was held for
    wrote nothing), remove the lock, and the folder too when ``remove_folder`` (it was made for
    the work)."""
    if [p.name for p in Path(folder).iterdir()] == [LOCK_NAME]:
        (Path(folder) / LOCK_NAME).unlink(missing_ok=True)
        if remove_folder:
            Path(folder).rmdir()


@contextmanager
def exclusive(folder: Path, option: str) -> Iterator[Path]:
    """Hold ``folder`` (made if missing) for this process until the block ends: an advisory
    ``flock`` on its ``.lock`` file, which the kernel releases when the process ends however it
    ends, so a killed holder never leaves it locked. Another process asking for the same folder
    gets a ConfigError on ``option`` at once, instead of both writing into it."""
    folder = Path(folder)
    made_folder = not folder.exists()
    made_lock = not (folder / LOCK_NAME).exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / LOCK_NAME, "a+")
    except OSError as exc:
        raise ConfigError(option, f"cannot write in {folder}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            made_lock = False  # another run's
            raise ConfigError(option, f"{folder} is in use by another run") from None
        yield folder
    except ConfigError:  # refused before anything was written: leave the folder as it was found
        if made_lock:
            (folder / LOCK_NAME).unlink(missing_ok=True)
        if made_folder and not any(folder.iterdir()):
            folder.rmdir()
        raise
    except BaseException:  # interrupted or failed: a folder that got nothing but its lock goes too
        if made_lock:
            drop_bare_lock(folder, made_folder)
        raise
    finally:
        handle.close()
