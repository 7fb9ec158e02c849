"""A run folder as ``validation compare`` reads it (``validation run``'s, or a user's own
script's: :mod:`validation.uneven`): its trace and its meta.json, every field compare uses
checked, with one line naming the file and the field for anything wrong, before any fit. No
torch here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param, typename
from hetsim.model.trace import COLUMNS, read_trace_table
from hetsim.scenario.config import MAX_COUNT, read_table
from validation.config import COMBINE_MODES
from validation.inject import parse_delay_spec
from validation.probe import PROBE


@dataclass(frozen=True)
class RunData:
    """A run folder's trace and meta.json."""

    path: Path
    trace: pd.DataFrame
    meta: dict[str, Any]

    @property
    def policies(self) -> list[str]:
        seen = list(dict.fromkeys(self.trace["policy"].astype(str)))
        return [p for p in seen if p != PROBE]


def load_run(run_dir: Path) -> RunData:
    """The trace (Parquet, else CSV) and meta.json (checked: :func:`check_meta`) of a run folder."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(str(run_dir), "no such run folder")
    _refuse_other_folders(run_dir)
    meta_path = run_dir / "meta.json"
    if not meta_path.is_file():
        raise ConfigError(str(run_dir), "not a validation run folder (no meta.json)")
    meta = check_meta(read_table(meta_path), meta_path)
    path = next((p for p in (run_dir / "trace.parquet", run_dir / "trace.csv") if p.is_file()), None)
    if path is None:
        raise ConfigError(str(run_dir), "no trace.parquet or trace.csv (the run died before its first epoch)")
    return RunData(run_dir, read_trace_table(path, COLUMNS), meta)


def _refuse_other_folders(run_dir: Path) -> None:
    """A hetsim sweep's results folder or a validation matrix's folder, given where a run folder
    belongs, is named for what it is (rather than by the first meta.json field it lacks)."""
    if (run_dir / "sweep.toml").is_file():
        raise ConfigError(
            str(run_dir),
            "this is a hetsim sweep results folder, not a validation run folder "
            f"(use: python -m hetsim report {run_dir})",
        )
    if (run_dir / "results.json").is_file() and (run_dir / "runs").is_dir() and not (run_dir / "meta.json").exists():
        raise ConfigError(
            str(run_dir),
            f"this is a validation matrix folder, not a run folder (compare one of its runs: {run_dir / 'runs'}/NAME)",
        )


META_PARAMS = (
    Param("global_batch", "integer", low=1, high=MAX_COUNT, doc="samples per step, over all ranks"),
    Param("steps_per_epoch", "integer", low=1, high=MAX_COUNT, doc="steps of an epoch"),
    Param("epochs", "integer", low=1, high=MAX_COUNT, doc="epochs of each policy"),
    Param("world_size", "integer", low=1, high=MAX_COUNT, doc="ranks"),
    Param("gradient_mb", default=0.0, low=0.0, doc="size of the gradient exchanged every step, MB"),
)
CONFIG_PARAMS = (  # the run's options that compare reads (meta.json's ``config``)
    Param("seed", "integer", default=0, low=0),
    Param("max_batch", "integer", default=None, low=1, high=MAX_COUNT, doc="samples per step"),
    Param("target_accuracy", default=None, low=0.0, low_open=True, high=1.0, doc="an accuracy"),
    Param("combine", "choice", default="weighted", choices=COMBINE_MODES),
)
INJECTION_PARAMS = {"per_sample_delay": Param("", low=0.0), "slowdown": Param("", low=1.0)}  # seconds, factor


def check_meta(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """meta.json with the fields compare reads checked and converted (``config`` and
    ``injection`` tables, their missing optional fields filled in); every error names the file
    and the field (``run/meta.json:global_batch: missing``)."""
    where = f"{path}:"
    config = meta.get("config", {})
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}config", f"must be a table, got {typename(config)}")
    policies = meta.get("policies")
    if not isinstance(policies, list):
        problem = "missing" if "policies" not in meta else f"must be a list of policy names, got {typename(policies)}"
        raise ConfigError(f"{where}policies", problem)
    names = [_check(Param(f"policies.{i}", "string"), name, where) for i, name in enumerate(policies)]
    return {
        **meta,
        **_checked(meta, META_PARAMS, where),
        "policies": names,
        "config": {**config, **_checked(config, CONFIG_PARAMS, f"{where}config.")},
        "injection": _checked_injection(meta.get("injection", {}), f"{where}injection"),
        **({"plan": _checked_plan(meta["plan"], meta, f"{where}plan")} if "plan" in meta else {}),
    }


def _checked_plan(plan: Any, meta: Mapping[str, Any], field: str) -> dict[str, Any]:
    """meta.json's ``plan`` (a script's run of a plan.json): its policy, whether the run kept its
    split, and the split, one whole number per rank summing to the run's global batch."""
    if not isinstance(plan, Mapping):
        raise ConfigError(field, f"must be a table, got {typename(plan)}")
    policy = _check(Param("policy", "string"), plan.get("policy"), f"{field}.")
    fixed = plan.get("fixed")
    if not isinstance(fixed, bool):
        raise ConfigError(f"{field}.fixed", f"must be true or false, got {typename(fixed)}")
    split = plan.get("split")
    count = Param("", "integer", low=0, high=MAX_COUNT)
    if not isinstance(split, list) or len(split) != meta.get("world_size"):
        raise ConfigError(f"{field}.split", f"must be a list of {meta.get('world_size')} local batches, one per rank")
    split = [_check(count, b, f"{field}.split.{i}") for i, b in enumerate(split)]
    batch = meta.get("global_batch")
    if fixed and sum(split) != batch:
        raise ConfigError(f"{field}.split", f"sums to {sum(split)}, not the run's global batch {batch}")
    return {**plan, "policy": policy, "fixed": fixed, "split": split}


def _checked(table: Mapping[str, Any], params: Sequence[Param], prefix: str) -> dict[str, Any]:
    """``params`` read from ``table`` (defaults filled in), every error's field after ``prefix``."""
    out: dict[str, Any] = {}
    for p in params:
        if p.name not in table and p.required:
            raise ConfigError(f"{prefix}{p.name}", "missing")
        out[p.name] = _check(p, table.get(p.name, p.default), prefix, out)
    return out


def _check(param: Param, value: Any, prefix: str, others: Mapping[str, Any] | None = None) -> Any:
    """:meth:`Param.check`, the error's field after ``prefix``."""
    try:
        return param.check(value, others)
    except ConfigError as exc:
        raise ConfigError(f"{prefix}{exc.field}", exc.problem) from None


def _checked_injection(injection: Any, field: str) -> dict[str, dict[str, Any]]:
    """meta.json's ``injection``: per rank, the delay spec, per-sample delay and slowdown factor."""
    if not isinstance(injection, Mapping):
        raise ConfigError(field, f"must be a table, got {typename(injection)}")
    out: dict[str, dict[str, Any]] = {}
    for name in ("delay", "per_sample_delay", "slowdown"):
        ranks = injection.get(name, {})
        if not isinstance(ranks, Mapping):
            raise ConfigError(f"{field}.{name}", f"must be a table of rank = value, got {typename(ranks)}")
        for rank, value in ranks.items():
            if name == "delay":
                parse_delay_spec(value, f"{field}.{name}.{rank}")
            else:
                _check(INJECTION_PARAMS[name], value, f"{field}.{name}.{rank}")
        out[name] = {str(rank): value for rank, value in ranks.items()}
    return out
