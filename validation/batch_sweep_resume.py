"""A batch-sweep's finished runs kept as they finish, so that a sweep that stops (a crash, Ctrl-C,
a dead process under ``--jobs``) resumes where it stopped: the same command reruns only the
runs not kept yet.

Each (batch, seed) run's result is written atomically to ``OUT/.runs/batch<B>-seed<S>.json`` with
the settings that decide its steps (workload, base batch, optimizer, learning rate and its rule,
target, step cap, evaluation spacing, and how accuracy is counted); a kept run is reused only
where those match the sweep's.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hetsim.core.files import write_json

KEPT = ".runs"  # under the results folder
SETTINGS = ("workload", "base_batch", "optimizer", "lr", "lr_scaling", "target", "max_steps", "eval_gap")
# How the held-out accuracy was counted, kept beside the settings: runs kept before it was counted
# exactly (a float32 mean read 342 of 360 as below 0.95) are not reused.
ACCURACY = "counted"


def kept_path(out: Path, batch: int, seed: int) -> Path:
    return Path(out) / KEPT / f"batch{batch}-seed{seed}.json"


def settings(config: Any) -> dict[str, Any]:
    """What a kept run must share with the sweep to be reused, as its JSON file reads back."""
    return json.loads(json.dumps({**{key: getattr(config, key) for key in SETTINGS}, "accuracy": ACCURACY}))


def keep(config: Any, result: Any) -> None:
    """Write one finished run (a :class:`~validation.batch_sweep_train.PointResult`), atomically."""
    path = kept_path(config.out, result.batch, result.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"settings": settings(config), "result": asdict(result)})


def check_same_settings(config: Any) -> None:
    """ConfigError on ``--out`` when its kept runs were run with other settings: the sweep would
    run them again and write over them (a sweep at another learning rate replaced without a word)."""
    from hetsim.core.errors import ConfigError

    now = settings(config)
    for path in sorted((Path(config.out) / KEPT).glob("*.json")):
        try:
            was = json.loads(path.read_text(encoding="utf-8")).get("settings")
        except (OSError, ValueError, AttributeError):
            continue  # a damaged kept run is run again, as kept() says
        if isinstance(was, dict) and was.get("accuracy") != ACCURACY:
            raise ConfigError("--out", f"{config.out} holds runs kept by an earlier hetsim, whose held-out accuracy "
                              "could read a reached target as missed: give a new folder")  # fmt: skip
        if isinstance(was, dict) and was != now:
            key = next((k for k in SETTINGS if was.get(k) != now.get(k)), "settings")
            other = f"another {key} ({was.get(key)!r}, here {now.get(key)!r})"
            raise ConfigError("--out", f"{config.out} holds a sweep with {other}: give a new folder, or the same "
                              "settings to resume it")  # fmt: skip


def kept_runs(config: Any) -> int:
    """How many runs the sweep's folder keeps (from this start, or an earlier one)."""
    return sum(1 for _ in (Path(config.out) / KEPT).glob("*.json"))


def kept(config: Any, batch: int, seed: int) -> Any | None:
    """The kept result of (batch, seed) when it was run with the sweep's settings, else None."""
    from validation.batch_sweep_train import PointResult

    path = kept_path(config.out, batch, seed)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("settings") != settings(config):
        return None
    try:
        result = PointResult(**data["result"])
    except (TypeError, KeyError):
        return None
    # strict JSON keeps a nan (a diverged run's noise sums, its loss) as null: back to the run's nan
    result.curve, result.noise = _with_nan(result.curve), _with_nan(result.noise)
    return result


def _with_nan(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: math.nan if v is None else v for k, v in row.items()} for row in rows]
