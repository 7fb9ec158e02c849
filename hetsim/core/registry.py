"""The name registries, one per plug-in kind, all here: what a name in a scenario file, a
sweep file or on the command line refers to.

Each registry fills itself on first use by importing the module that registers the built-in
classes, then the modules named in the ``HETSIM_PLUGINS`` environment variable (module names
or ``.py`` files, separated by ``os.pathsep``), so plug-ins outside the package reach every
command and every worker process of a sweep. In a program, :meth:`Registry.register` (usable
as a class decorator) is the public hook::

    from hetsim.core.registry import POLICIES

    @POLICIES.register
    class MyPolicy(Policy):
        name = "mine"
        ...

A registry holds classes for hetsim's kinds (``Registry[type[Policy]]``: a name, then
parameters bound by the class) and objects where a plug-in takes no parameters
(``validation.workloads.WORKLOADS``, a ``Registry[Workload]``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from hetsim.core.errors import ConfigError

if TYPE_CHECKING:  # the plug-in base classes import this module to register themselves
    from hetsim.engines.base import Engine
    from hetsim.model.costs import CostModel
    from hetsim.model.distributions import Distribution
    from hetsim.model.network import NetworkModel
    from hetsim.policies.base import Policy

PLUGINS_ENV = "HETSIM_PLUGINS"
V = TypeVar("V")  # what a registry holds: a class (hetsim) or an object


class Registry(Mapping[str, V], Generic[V]):
    """Name -> plug-in for one kind (``kind`` names it in errors, e.g. ``policy``)."""

    def __init__(self, kind: str, builtins: str, base: str = "") -> None:
        self.kind = kind
        self._builtins = builtins  # the module whose import registers the built-in plug-ins
        self._base = base  # "module:Class" a class registered here must subclass ("": any plug-in)
        self._plugins: dict[str, V] = {}
        self._loaded = False

    def register(self, plugin: V) -> V:
        """Add ``plugin`` (a class or an object) under its ``name``; returns it (a class decorator).
        Registering the same plug-in twice is harmless (the same class statement run again replaces
        its earlier class); another under a taken name is an error."""
        name = getattr(plugin, "name", "")
        if not isinstance(name, str) or not name:
            what = "class needs a non-empty class" if isinstance(plugin, type) else "needs a non-empty"
            raise TypeError(f"a {self.kind} {what} attribute 'name'")
        base = self.base_class()
        if base is not None and not (isinstance(plugin, type) and issubclass(plugin, base)):
            where = self._base.replace(":", ".")
            raise TypeError(f"a {self.kind} is a class that subclasses {where}: {_origin(plugin)} is not")
        taken = self._plugins.get(name)
        if taken is not None and taken is not plugin and not _same_definition(taken, plugin):
            raise ValueError(f"{self.kind} {name!r} is registered already, by {_origin(taken)}")
        self._plugins[name] = plugin
        return plugin

    def base_class(self) -> type | None:
        """The class every plug-in of this kind subclasses (None: any plug-in)."""
        if not self._base:
            return None
        module, _, attr = self._base.partition(":")
        base: type = getattr(importlib.import_module(module), attr)
        return base

    def unregister(self, name: str) -> None:
        self._plugins.pop(name, None)

    def lookup(self, name: Any, field: str) -> V:
        """The plug-in registered as ``name``; an unknown name raises ConfigError on ``field``."""
        if not isinstance(name, str) or name not in self:
            raise ConfigError(field, f"unknown {self.kind} {name!r} (known: {', '.join(self)})")
        return self[name]

    def spelled(self, name: str) -> str | None:
        """How a user builds the plug-in registered as ``name`` in Python, for an error that asks
        for an object: a built-in one with the package it is imported from
        (``hetsim.policies.Equal()``), a plug-in's class alone (a file named in
        ``HETSIM_PLUGINS`` is loaded as a module no user imports); None where none is."""
        plugin = self.get(name)
        if plugin is None:
            return None
        cls = plugin if isinstance(plugin, type) else type(plugin)
        package = f"{self._builtins}."
        return f"{package if cls.__module__.startswith(package) else ''}{cls.__name__}()"

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            importlib.import_module(self._builtins)
            load_plugins()

    def __getitem__(self, name: str) -> V:
        self._load()
        return self._plugins[name]

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._plugins))

    def __len__(self) -> int:
        self._load()
        return len(self._plugins)


def _origin(plugin: object) -> str:
    """Where a registered plug-in comes from, for an error: a class's qualified name, or an
    object's class and module."""
    cls = plugin if isinstance(plugin, type) else type(plugin)
    return f"{cls.__module__}.{cls.__qualname__}" + ("" if plugin is cls else " object")


def _same_definition(a: object, b: object) -> bool:
    """Whether two classes are one class statement run again: the same qualified name in the same
    source file (a file named in ``HETSIM_PLUGINS`` and also imported by a program, as two
    modules; a module reloaded after an edit). The later then replaces the earlier, as a
    redefinition does in Python. Objects (a workload registry's) are never taken for each other."""
    if not (isinstance(a, type) and isinstance(b, type)):
        return False
    files = [getattr(sys.modules.get(c.__module__), "__file__", None) for c in (a, b)]
    return (
        a.__qualname__ == b.__qualname__
        and None not in files
        and Path(str(files[0])).resolve() == Path(str(files[1])).resolve()
    )


_imported: set[str] = set()


def load_plugins() -> None:
    """Import every module named in ``HETSIM_PLUGINS`` (once each)."""
    for item in filter(None, os.environ.get(PLUGINS_ENV, "").split(os.pathsep)):
        if item in _imported:
            continue
        _imported.add(item)
        try:
            if item.endswith(".py"):
                path = Path(item).resolve()
                if _imported_already(path):  # by the program (import myplug): its classes are the ones in use
                    continue
                spec = importlib.util.spec_from_file_location(f"hetsim_plugin_{path.stem}", path)
                if spec is None or spec.loader is None or not path.is_file():
                    raise ImportError("no such file")
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
            elif Path(item).is_dir():  # it would import as an empty namespace package, registering nothing
                raise ImportError("a folder: name a .py file, or a module of plug-ins")
            else:
                importlib.import_module(item)
        except Exception as exc:  # any error in a plug-in module is reported as bad input
            raise ConfigError(PLUGINS_ENV, f"cannot import {item!r}: {exc}".splitlines()[0]) from None


def _imported_already(path: Path) -> bool:
    """Whether a module of the file ``path`` is imported (run again under another name, its
    classes would replace the program's in the registry, while its objects stay of the old)."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file.endswith(".py") and Path(file).resolve() == path:  # a link's too
            return True
    return False


DISTRIBUTIONS: Registry[type[Distribution]] = Registry(
    "distribution", "hetsim.model.distributions", "hetsim.model.distributions:Distribution"
)
COSTS: Registry[type[CostModel]] = Registry("cost model", "hetsim.model.costs", "hetsim.model.costs:CostModel")
NETWORKS: Registry[type[NetworkModel]] = Registry(
    "network", "hetsim.model.network", "hetsim.model.network:NetworkModel"
)
ENGINES: Registry[type[Engine]] = Registry("engine", "hetsim.engines", "hetsim.engines.base:Engine")
POLICIES: Registry[type[Policy]] = Registry("policy", "hetsim.policies", "hetsim.policies.base:Policy")

__all__ = ["COSTS", "DISTRIBUTIONS", "ENGINES", "NETWORKS", "PLUGINS_ENV", "POLICIES", "Registry", "load_plugins"]
