"""Values of a run's options, from a run file's (typed) value or a command line's text, checked:
:func:`number` and :func:`integer` (a ConfigError naming the option otherwise)."""

from __future__ import annotations

from typing import Any

from hetsim.core.params import Param


def number(value: Any, option: str, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    """A finite number in ``[minimum, maximum]``, from a file's value or a command line's text."""
    return float(Param(option, low=minimum, high=maximum).check(parsed(value, float)))


def integer(value: Any, option: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number in ``[minimum, maximum]``, from a file's value or a command line's text."""
    return int(Param(option, "integer", low=minimum, high=maximum).check(parsed(value, int)))


def parsed(value: Any, kind: type) -> Any:
    """Command-line text as a ``kind`` (left as it is when it does not parse: the check names it)."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return value
    return value
