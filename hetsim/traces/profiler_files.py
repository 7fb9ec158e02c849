"""Which files ``import-trace --format torch-profiler`` reads: :func:`rank_files`.

The PATHs are trace files (one per rank) or folders of them. In a folder, traces are the
``*.json`` and ``*.json.gz`` files; ``validation run --profile`` names them
``<segment>-rank<R>.json.gz`` (RUN/profiler/), one segment per policy, so a folder may hold
several jobs' worth: ``--policy`` picks one, and without it a folder of several is refused
with their names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hetsim.core.errors import ConfigError

SEGMENT_FILE = re.compile(r"(?P<segment>.+)-rank(?P<rank>\d+)\.json(\.gz)?$")


def _traces_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))


def rank_files(paths: Sequence[Path], policy: str | None) -> tuple[list[Path], str | None]:
    """The trace files to import, and the segment (policy) their names give, if any."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = _traces_in(path)
            if not found:
                raise ConfigError(str(path), "holds no .json or .json.gz trace")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(str(path), "no such file or folder")
    segments: dict[str, list[Path]] = {}
    for f in files:
        match = SEGMENT_FILE.match(f.name)
        segments.setdefault(match.group("segment") if match else "", []).append(f)
    if policy is not None:
        if policy not in segments:
            held = ", ".join(s for s in segments if s) or "no <policy>-rank<R> names"
            raise ConfigError("--policy", f"{policy!r} has no traces here (they hold {held})")
        return segments[policy], policy
    if len(segments) > 1:
        raise ConfigError("--policy", f"the traces are of {len(segments)} segments ({', '.join(sorted(segments))}): "
                                      "pick one with --policy")  # fmt: skip
    name = next(iter(segments))
    return files, name or None
