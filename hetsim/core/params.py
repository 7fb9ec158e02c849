"""Declared parameters: how a plug-in says what it takes, and the one place values are checked.

A plug-in class (a distribution, a network model, an engine, a policy) lists its parameters
as :class:`Param` objects, with the names they have in scenario files, their kind, bounds and
defaults. :class:`PlugIn` binds and checks constructor arguments against that list, so a
plug-in built directly (``Uniform(0.5, 0.1)``) and one built from a file raise the same
:class:`~hetsim.core.errors.ConfigError`; the config factory only adds the field's path in front
(``workers.0.noise.high: must be > 0.5, got 0.1``). The same :meth:`Param.check` validates the
scenario's own fields and the validation runner's options.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from hetsim.core.errors import ConfigError

MAX_COUNT = 2**40  # samples, epochs: far beyond any run, and sums of them stay within int64
FLOAT_MAX = 1.7976931348623157e308  # sys.float_info.max: an integer beyond it is no float
MAX_LR = 1e6  # a learning rate: the optimizer holds it in the parameters' dtype; past any that trains, a unit mistake
MAX_SEED = 2**63 - 1  # TOML's largest integer: a seed is written into scenario, sweep and run files
MAX_STEP_S = 1e9  # a step over 30 years is a unit mistake


def first_repeat(items: Sequence[Any]) -> int | None:
    """The index of the first item equal to an earlier one (a value, a folder given twice), or None."""
    for i, item in enumerate(items):
        if item in items[:i]:
            return i
    return None


class _Required:
    """The default of a parameter that has none."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()
KINDS = ("number", "integer", "string", "path", "choice", "numbers", "points", "matrix")


def typename(value: Any) -> str:
    """How an error message names a value of the wrong type."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} ({value!r})"


class FileName(str):
    """A file named in a scenario: it compares and prints as written, and :attr:`path` is where
    it is read (a relative name from ``folder``, the scenario file's folder, when known)."""

    folder: Path | None

    def __new__(cls, name: str, folder: Path | None = None) -> FileName:
        obj = super().__new__(cls, name)
        obj.folder = folder
        return obj

    @property
    def path(self) -> Path:
        p = Path(str(self))
        return p if self.folder is None or p.is_absolute() else self.folder / p

    @cached_property
    def resolved(self) -> Path:
        """The file read, absolute (resolved once: plug-ins compare and hash by it)."""
        return self.path.resolve()


def _number_text(value: float | None) -> str:
    """A number in a message: an integer in full (one too long to print, by its size), a float
    in short (``%g``)."""
    if isinstance(value, int):
        return (
            str(value)
            if value.bit_length() <= 128
            else f"an integer of about {int(value.bit_length() * 0.30103)} digits"
        )
    return f"{value:g}"


def _duration(value: Any) -> bool:
    """A NumPy timedelta64 (``numbers.Integral`` in its own unit, not seconds)."""
    return getattr(getattr(value, "dtype", None), "kind", None) == "m"


def _finite(value: Any) -> bool:
    """A number a float holds, not NaN or infinite (an integer past a float's range is not:
    math.isfinite raises on it, which left a traceback)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or _duration(value):
        return False
    return abs(int(value)) <= FLOAT_MAX if isinstance(value, numbers.Integral) else math.isfinite(value)


def file_path(name: str) -> Path:
    """Where a ``path`` parameter's file is read."""
    return name.path if isinstance(name, FileName) else Path(name)


def resolved_path(name: str) -> Path:
    """The file a ``path`` parameter reads, absolute: one name in two folders is two files."""
    return name.resolved if isinstance(name, FileName) else Path(name).resolve()


def written_path(name: str) -> str:
    """A ``path`` parameter as ``to_dict`` writes it: the file read, absolute. The name as given
    is relative to the scenario file's folder, and a record of the scenario (plan.json,
    summary.json) lies elsewhere."""
    return str(resolved_path(name))


def join(path: str, key: str | int) -> str:
    """``path.key``: a field's dotted path (``key`` alone at the top, ``path`` alone for the
    table itself, ``key == ""``)."""
    if key == "":
        return path
    return f"{path}.{key}" if path else str(key)


@dataclass(frozen=True)
class Param:
    """One parameter. ``kind`` is ``number`` (a finite float), ``integer``, ``string``, ``path``
    (a string naming a file: the config factory reads a relative one from the scenario file's
    folder), ``choice`` (one of ``choices``), ``numbers`` (a non-empty list of non-negative
    numbers, kept as a tuple), ``points`` (a list of ``[x, y]`` pairs of non-negative
    numbers) or ``matrix`` (a square list of rows of finite numbers, kept as tuples).
    ``low``/``high`` bound a number or integer, inclusive unless ``low_open``/``high_open``; a
    bound may name another parameter declared before this one (``Param("high", low="low",
    low_open=True)``). ``default`` is :data:`REQUIRED` for a
    required parameter; a default of None makes the parameter optional (None stays None).
    ``attr`` is the attribute that holds the value when the file's name is taken by a method
    (an exponential's ``mean`` is held as ``mean_s``, beside its method ``mean()``). ``blank``
    False refuses an empty or blank ``string`` (a ``path`` is never empty)."""

    name: str
    kind: str = "number"
    default: object = REQUIRED
    low: float | str | None = None
    low_open: bool = False
    high: float | str | None = None
    high_open: bool = False
    choices: tuple[str, ...] = ()
    doc: str = ""
    attr: str = ""
    blank: bool = True  # a string may be empty or blank (False: a name, or a group's, that must say something)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Param {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def attribute(self) -> str:
        return self.attr or self.name

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def check(self, value: Any, others: Mapping[str, Any] | None = None) -> Any:
        """``value`` converted to its kind, or :class:`ConfigError` on this parameter's name;
        ``others`` holds the parameters checked before it (for bounds that name one)."""
        if value is None and self.default is None:
            return None
        if self.kind in ("string", "path"):
            if not isinstance(value, str):
                raise ConfigError(self.name, f"must be a string, got {typename(value)}")
            if not value.strip() and (self.kind == "path" or not self.blank):  # a file, a name or group of nothing
                raise ConfigError(self.name, f"must not be empty, got {value!r}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                options = (
                    " or ".join(map(repr, self.choices))
                    if len(self.choices) == 2
                    else (f"one of {', '.join(map(repr, self.choices))}")
                )
                raise ConfigError(self.name, f"must be {options}, got {value!r}")
            return value
        if self.kind == "numbers":
            return self._numbers(value)
        if self.kind == "points":
            return self._points(value)
        if self.kind == "matrix":
            return self._matrix(value)
        return self._bounded(self._scalar(value), others or {})

    def _scalar(self, value: Any) -> float | int:
        # numbers.Integral / Real take NumPy's integers and floats too (a program's np.int64), but
        # not its timedelta64, an Integral in nanoseconds or days
        if _duration(value):
            raise ConfigError(self.name, f"must be a plain number, not a NumPy duration, got {typename(value)}")
        if self.kind == "integer":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ConfigError(self.name, f"must be an integer, got {typename(value)}")
            return int(value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(self.name, f"must be a number, got {typename(value)}")
        if not _finite(value):
            shown = int(value) if isinstance(value, numbers.Integral) else float(value)  # an int past a float's range
            raise ConfigError(self.name, f"must be finite, got {_number_text(shown)}")
        return float(value)

    def _bounded(self, value: float | int, others: Mapping[str, Any]) -> float | int:
        low = others.get(self.low) if isinstance(self.low, str) else self.low
        high = others.get(self.high) if isinstance(self.high, str) else self.high
        too_low = low is not None and (value <= low if self.low_open else value < low)
        too_high = high is not None and (value >= high if self.high_open else value > high)
        if not (too_low or too_high):
            return value
        got = _number_text(value)
        if low is not None and high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            interval = f"{left}{_number_text(low)}, {_number_text(high)}{right}"
            raise ConfigError(self.name, f"must be in {interval}, got {got}")
        if too_low:
            raise ConfigError(self.name, f"must be {'>' if self.low_open else '>='} {_number_text(low)}, got {got}")
        raise ConfigError(self.name, f"must be {'<' if self.high_open else '<='} {_number_text(high)}, got {got}")

    def _points(self, value: Any) -> tuple[tuple[float, float], ...]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, (list, tuple)) and len(v) == 2 for v in value):
            raise ConfigError(self.name, f"must be a list of [x, y] pairs, got {typename(value)}")
        for i, pair in enumerate(value):
            for v in pair:
                if not _finite(v) or v < 0:
                    raise ConfigError(self.name, f"point {i} must be two non-negative numbers, got {_listed(pair)}")
        return tuple((float(x), float(y)) for x, y in value)

    def _matrix(self, value: Any) -> tuple[tuple[float, ...], ...]:
        n = len(value) if isinstance(value, (list, tuple)) else 0
        if not n or not all(isinstance(row, (list, tuple)) and len(row) == n for row in value):
            raise ConfigError(self.name, f"must be a square list of rows of numbers, got {typename(value)}")
        for i, row in enumerate(value):
            if not all(_finite(v) for v in row):
                raise ConfigError(self.name, f"row {i} must be finite numbers, got {_listed(row)}")
        return tuple(tuple(float(v) for v in row) for row in value)

    def _numbers(self, value: Any) -> tuple[float, ...]:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(self.name, f"must be a list of numbers, got {typename(value)}")
        if not value:
            raise ConfigError(self.name, "needs at least one value")
        for i, v in enumerate(value):
            if not _finite(v) or v < 0:
                raise ConfigError(self.name, f"value {i} must be a non-negative number, got {_shown(v)}")
        return tuple(float(v) for v in value)


def _shown(value: Any) -> str:
    """A value in a message: a number as :func:`_number_text` gives it, anything else by repr."""
    return _number_text(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


def _listed(values: Sequence[Any]) -> str:
    return "[" + ", ".join(map(_shown, values)) + "]"


def check_params(params: Sequence[Param], args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Bind positional ``args`` (in declared order) and keyword ``kwargs`` to ``params``, check
    every value in declared order, fill defaults; unknown or missing names raise ConfigError."""
    names = [p.name for p in params]
    if len(args) > len(params):
        most = f"at most {len(params)} parameter(s) ({', '.join(names)})" if params else "no parameters"
        raise ConfigError("", f"takes {most}, got {len(args)} positional")
    given = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise ConfigError(str(key), f"unknown parameter (known: {', '.join(names) or 'none'})")
        if key in given:
            raise ConfigError(str(key), "given twice")
        given[key] = value
    out: dict[str, Any] = {}
    for p in params:
        if p.name not in given:
            if p.required:
                raise ConfigError(p.name, "missing (required)")
            out[p.name] = p.default
        else:
            out[p.name] = p.check(given[p.name], out)
    return out


def _check_declared(cls: type, params: Sequence[Param]) -> None:
    """The mistakes of a ``params`` declaration that would pass unseen (TypeError, as the class is
    made): a name twice, a bound naming no parameter declared before it (it bounded nothing), a
    number's default outside its own fixed bounds, and a parameter whose attribute hides a method."""
    seen: set[str] = set()
    for p in params:
        where = f"{cls.__name__}.params: {p.name!r}"
        if p.name in seen:
            raise TypeError(f"{where} is declared twice")
        for bound in (p.low, p.high):
            if isinstance(bound, str) and bound not in seen:
                raise TypeError(f"{where} is bounded by {bound!r}, which no parameter before it is")
        if callable(getattr(cls, p.attribute, None)):
            raise TypeError(f"{where} would hide the method {p.attribute}(): hold it elsewhere with attr=")
        numeric = p.kind in ("number", "integer") and not any(isinstance(b, str) for b in (p.low, p.high))
        if numeric and p.default is not REQUIRED and p.default is not None:
            try:
                p.check(p.default)
            except ConfigError as exc:
                raise TypeError(f"{where} has a default outside its own bounds: {exc.problem}") from None
        seen.add(p.name)


class PlugIn:
    """Base of every plug-in class: ``name`` (what files and the registry call it) and
    ``params`` (what it takes). The constructor checks the arguments against ``params`` and sets
    one attribute per parameter, then calls :meth:`validate` for checks across parameters.
    Plug-ins with the same class and parameter values compare (and hash) equal."""

    name: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A plug-in class's ``params`` is checked as the class is made (a single Param where a
        tuple belongs would otherwise fail on its first use, far from the mistake)."""
        super().__init_subclass__(**kwargs)
        params = cls.__dict__.get("params", ())
        if isinstance(params, Param):
            raise TypeError(f"{cls.__name__}.params is one Param, not a tuple of them: write params = (Param(...),)")
        if not isinstance(params, (tuple, list)) or not all(isinstance(p, Param) for p in params):
            raise TypeError(f"{cls.__name__}.params must be a tuple of Param, got {typename(params)}")
        _check_declared(cls, params)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            values = check_params(self.params, args, kwargs)
        except ConfigError as exc:  # no parameter to name: the class says whose call it was
            if exc.field:
                raise
            raise ConfigError("", f"{type(self).__name__}() {exc.problem}") from None
        for p in self.params:
            object.__setattr__(self, p.attribute, values[p.name])
        self.validate()

    def validate(self) -> None:
        """Checks across parameters (one that names another as a bound needs none); raise
        ConfigError on a parameter's name."""

    def param_values(self) -> dict[str, Any]:
        """The parameters by their names in files."""
        return {p.name: getattr(self, p.attribute) for p in self.params}

    def file_values(self) -> dict[str, Any]:
        """:meth:`param_values` as ``to_dict`` writes them: a ``path`` parameter as the file read,
        absolute (:func:`written_path`)."""
        return {
            p.name: written_path(v) if _is_file(p, v) else v for p, v in zip(self.params, self.param_values().values())
        }

    def _key(self) -> tuple[Any, ...]:
        values = self.param_values().values()
        return (type(self), *(resolved_path(v) if _is_file(p, v) else v for p, v in zip(self.params, values)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlugIn) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.param_values().items())})"


class FrozenPlugIn(PlugIn):
    """A plug-in that is a value (a distribution, a network model): no attribute changes after
    construction, so scenarios holding it can be hashed and shared."""

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {key!r}")


def _is_file(param: Param, value: Any) -> bool:
    return param.kind == "path" and isinstance(value, str)
