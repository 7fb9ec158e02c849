"""Writing files so that a reader never sees half of one: a temporary file beside the target,
flushed to disk, then renamed into place (atomic on POSIX). A killed run leaves either the old
file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hetsim.errors import ConfigError


def atomic_write(target: Path, write: Callable[[str], object]) -> None:
    """Call ``write(tmp_path)`` on a temporary file beside ``target``, then rename it into place.
    A path that cannot be written (a file where a folder should be, no permission) raises
    :class:`ConfigError` naming it."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise ConfigError(str(target), f"cannot write here: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(target: Path, data: Any) -> None:
    """``data`` as indented JSON (anything unknown as its string), atomically."""
    text = json.dumps(data, indent=2, default=str) + "\n"
    atomic_write(target, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
