"""Raw tables -> checked values and plug-ins: the field checks and the plug-in factory that the
scenario factory (:mod:`hetsim.scenario.config`), the worker tables (:mod:`hetsim.scenario.worker_tables`) and the
sweep files share. Every problem raises :class:`~hetsim.core.errors.ConfigError` naming the field's
full path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from hetsim.core.errors import ConfigError
from hetsim.core.params import REQUIRED, FileName, Param, PlugIn, join, typename
from hetsim.core.registry import DISTRIBUTIONS, Registry
from hetsim.model.distributions import Distribution

T = TypeVar("T")


class Table:
    """A raw table being validated: values checked by :class:`~hetsim.core.params.Param`, every
    error naming the field's full path."""

    def __init__(self, data: Any, path: str, allowed: Sequence[str]) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(path, f"must be a table, got {typename(data)}")
        unknown = [k for k in data if k not in allowed]
        if unknown:
            raise ConfigError(join(path, unknown[0]), f"unknown key (allowed: {', '.join(allowed)})")
        self.data, self.path = data, path

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = REQUIRED) -> Any:
        """The value as written (or ``default``); a missing required key is an error."""
        if key in self.data:
            return self.data[key]
        if default is REQUIRED:
            raise ConfigError(join(self.path, key), "missing (required)")
        return default

    def get(self, param: Param, others: Mapping[str, Any] | None = None) -> Any:
        """The value of ``param`` (its default when absent), checked."""
        value = self.raw(param.name, param.default)
        try:
            return param.check(value, others)
        except ConfigError as exc:
            raise ConfigError(join(self.path, exc.field), exc.problem) from None

    def read(self, params: Sequence[Param]) -> dict[str, Any]:
        """Every one of ``params``, checked in order (a bound may name an earlier one)."""
        out: dict[str, Any] = {}
        for p in params:
            out[p.name] = self.get(p, out)
        return out


# ----------------------------------------------------------------------------- plug-in factories


def make_plugin(
    registry: Registry[type[T]],
    data: Any,
    path: str,
    key: str,
    base_dir: Path | None = None,
    default: str | None = None,
) -> T:
    """The plug-in a table describes: ``data[key]`` names the class in ``registry`` (``default``
    when absent), the other keys are its declared parameters. The class checks them; this only
    adds ``path`` to its errors and reads ``path`` parameters from ``base_dir``. An object of the
    registry's kind in place of the table (a scenario dict made in Python) is taken as it is: its
    class checked its parameters when it was made."""
    base = registry.base_class()
    if base is not None and isinstance(data, base):
        return cast(T, data)
    if not isinstance(data, Mapping):
        what = f"a {registry.kind} or its table" if isinstance(data, PlugIn) else "a table"  # another kind's object
        raise ConfigError(path, f"must be {what}, got {typename(data)}")
    if key not in data and default is None:
        raise ConfigError(join(path, key), "missing (required)")
    if base is not None and isinstance(data.get(key), base):  # {"dist": LogNormal(0.1), "sigma": 0.2}
        raise ConfigError(join(path, key), f"{data[key]!r} is an object: give it alone, or a table of a name and "
                          "parameters")  # fmt: skip
    cls = registry.lookup(data.get(key, default), join(path, key))
    params: tuple[Param, ...] = getattr(cls, "params", ())
    values = {k: v for k, v in data.items() if k != key}
    for p in params:
        if p.kind == "path" and isinstance(values.get(p.name), str):
            values[p.name] = FileName(values[p.name], base_dir)
    try:
        return cls(**values)
    except ConfigError as exc:
        raise ConfigError(join(path, exc.field), exc.problem) from None
    except OSError as exc:  # a plug-in's validate() opening one of its files: named at that field
        read = [p.name for p in params if isinstance(v := values.get(p.name), FileName) and _names(exc, v)]
        if not read:
            raise
        why = "no such file" if isinstance(exc, FileNotFoundError) else (exc.strerror or "cannot read it")
        raise ConfigError(join(path, read[0]), f"{why}: {exc.filename}") from None


def _names(exc: OSError, file: FileName) -> bool:
    """Whether ``exc`` is about ``file`` (a plug-in's other errors are its own, and kept)."""
    return isinstance(exc.filename, str) and Path(exc.filename).resolve() == file.resolved


def make_distribution(data: Any, path: str, base_dir: Path | None = None) -> Distribution:
    return make_plugin(DISTRIBUTIONS, data, path, "dist", base_dir)
