"""What ``--workload`` names, and how it becomes a checked workload: torch-free until a
workload is resolved.

``--workload`` takes one of three forms:

* ``NAME``: an entry of :data:`WORKLOADS`, hetsim's :class:`~hetsim.core.registry.Registry` (the
  built-ins, registered by :mod:`validation.workloads.builtin` on first use, and whatever the
  modules or ``.py`` files named in ``HETSIM_PLUGINS`` register);
* ``path/to/file.py:ATTR``: the file is imported on its own (as ``HETSIM_PLUGINS`` imports one;
  its folder is not put on ``sys.path``, and no ``__pycache__`` is written beside it), a
  relative path from the working directory;
* ``package.module:ATTR``: the module is imported from ``sys.path``.

``ATTR`` is a :class:`~validation.workloads.base.Workload` object or a zero-argument factory
returning one (a Workload subclass is one). Every workload is then checked by
:func:`validation.workloads.checks.check_model` (no BatchNorm). Each problem is a ConfigError on
the option, one line. Within a process a spec resolves to the same object (the launcher and
each rank resolve it once: a file is imported once, a factory called once).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from hetsim.core.errors import ConfigError
from hetsim.core.registry import Registry, load_plugins

if TYPE_CHECKING:
    from validation.workloads.base import Workload

WORKLOADS: Registry[Workload] = Registry("workload", "validation.workloads.builtin")
BUILTIN_WORKLOADS = ("digits-cnn", "resnet18", "transformer")  # what --help lists (the registry imports torch)
FORMS = "FILE.py:ATTR or MODULE:ATTR"

_made: dict[str, Workload] = {}  # spec of a file or module attribute -> its workload
_checked: dict[int, Workload] = {}  # id -> workload, for those whose model passed the check (kept alive)


def resolve_workload(spec: str, field: str = "--workload") -> Workload:
    """The workload ``spec`` names, its model checked; an error is a ConfigError on ``field``."""
    workload = _find(spec, field)
    if id(workload) not in _checked:
        from validation.workloads.checks import check_model

        check_model(workload, field)
        _checked[id(workload)] = workload
    return workload


def load_workload(spec: str) -> Workload:
    """The workload object ``spec`` names (as ``--workload`` takes it), checked."""
    return resolve_workload(spec)


def _names_a_file(target: str) -> bool:
    """Whether the part of a spec before ``:ATTR`` is a file's path (else a module's name)."""
    return target.endswith(".py") or "/" in target or "\\" in target


def canonical_spec(spec: str) -> str:
    """``spec`` with a file's path made absolute and resolved (the same file however it is
    reached, and two files of one relative spelling told apart): what a results folder records,
    and what a process keys the workloads it made by."""
    target, colon, attr = spec.rpartition(":")
    return f"{Path(target).expanduser().resolve()}:{attr}" if colon and _names_a_file(target) else spec


def short_spec(spec: str) -> str:
    """``spec`` as a line or a title shows it: a file's name without its folders."""
    target, colon, attr = spec.rpartition(":")
    return f"{Path(target).name}:{attr}" if colon and _names_a_file(target) else spec


def _find(spec: str, field: str) -> Workload:
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(field, f"expected a workload name, {FORMS}, got {spec!r}")
    target, colon, attr = spec.rpartition(":")
    if not colon:
        return _registered(spec, field)
    if not target or not attr.isidentifier():
        raise ConfigError(field, f"expected {FORMS} (ATTR a Python name), got {spec!r}")
    key = canonical_spec(spec)
    if key not in _made:
        module = _import_file(target, field) if _names_a_file(target) else _import_module(target, field)
        _made[key] = _workload_of(module, attr, spec, field)
    return _made[key]


def _registered(name: str, field: str) -> Workload:
    if name.endswith(".py"):
        raise ConfigError(field, f"{name!r} names a file but not what in it is the workload: use {name}:ATTR")
    load_plugins()  # those HETSIM_PLUGINS names now (the registry loads them only on its first use)
    if name not in WORKLOADS:
        raise ConfigError(field, f"unknown workload {name!r} (known: {', '.join(WORKLOADS)}; or {FORMS})")
    return WORKLOADS[name]


def _import_file(text: str, field: str) -> ModuleType:
    """The module of the ``.py`` file ``text``, imported once (a file ``HETSIM_PLUGINS`` named,
    imported already, is that module)."""
    path = Path(text).expanduser().resolve()
    if not path.exists():
        raise ConfigError(field, f"{text}: no such file")
    if not path.is_file() or path.suffix != ".py":
        raise ConfigError(field, f"{text}: not a Python file (.py)")
    load_plugins()
    for name in (f"hetsim_plugin_{path.stem}", _module_name(path)):
        known = sys.modules.get(name)
        if known is not None and getattr(known, "__file__", None) == str(path):
            return known
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(field, f"{text}: not a Python file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:  # compiled here, not by the loader: no __pycache__ is written beside the file
        exec(compile(path.read_bytes(), str(path), "exec"), vars(module))
    except (Exception, SystemExit) as exc:  # any error in the file is the file's: one line
        sys.modules.pop(name, None)
        raise ConfigError(field, f"cannot import {text}: {first_line(exc)}") from None
    return module


def _module_name(path: Path) -> str:
    """A module name of its own for the file at ``path`` (two files of one name do not collide)."""
    return f"validation_workload_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"


def _import_module(name: str, field: str) -> ModuleType:
    if not all(part.isidentifier() for part in name.split(".")):
        raise ConfigError(field, f"{name!r} is neither a module name nor a .py file")
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:
        raise ConfigError(field, f"cannot import {name}: {first_line(exc)}") from None


def _workload_of(module: ModuleType, attr: str, spec: str, field: str) -> Workload:
    """``module.attr`` as a workload: the object itself, or what the factory returns."""
    from validation.workloads.base import Workload

    if not hasattr(module, attr):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, Workload) and not k.startswith("_"))
        hint = f" (its workloads: {', '.join(found)})" if found else ""
        raise ConfigError(field, f"{spec.rpartition(':')[0]} has no attribute {attr!r}{hint}")
    value = getattr(module, attr)
    if isinstance(value, Workload):
        return value
    if not callable(value):
        problem = "not a Workload (nor a zero-argument factory returning one)"
        raise ConfigError(field, f"{spec} is {a_kind(value)}, {problem}")
    try:
        made = value()
    except (Exception, SystemExit) as exc:  # the factory's own error, one that needs arguments, or sys.exit
        raise ConfigError(field, f"{spec}() failed: {first_line(exc)}") from None
    if not isinstance(made, Workload):
        raise ConfigError(field, f"{spec}() returned {a_kind(made)}, not a Workload")
    return made


def first_line(exc: BaseException) -> str:
    """``TypeName: the message's first line`` (the type alone for an empty message): an error in one line."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def a_kind(value: object) -> str:
    """``a list``, ``an int``: what ``value`` is, for an error."""
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"
