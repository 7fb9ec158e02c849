"""The API reference (docs/reference.md, rendered by mkdocstrings) documents every public name:
each name a public module lists in ``__all__`` is the object of a ``::: path`` entry there (or
a member of one) and has a docstring, so a new public name without documentation fails here
rather than vanishing silently from the site (mkdocstrings skips what has no docstring)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ("hetsim", "hetsim.policies", "hetsim.calibrate", "validation.uneven")
NOT_OBJECTS = {"__version__"}  # a string: the reference names it in prose
ENTRY = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.MULTILINE)  # a path, then its indented options


def resolve(path: str) -> object:
    """The object a mkdocstrings path names (a module, or a name inside one, possibly nested)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(path)


def documented() -> set[int]:
    """ids of the objects the reference renders: each entry's object, and a module entry's
    public members (unless its options say ``members: false``)."""
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    objects: set[int] = set()
    for path, options in ENTRY.findall(text):
        obj = resolve(path)
        objects.add(id(obj))
        if inspect.ismodule(obj) and "members: false" not in options:
            objects.update(id(getattr(obj, n)) for n in getattr(obj, "__all__", ()))
    return objects


def public_names() -> list[tuple[str, str]]:
    return [(m, n) for m in PUBLIC for n in importlib.import_module(m).__all__ if n not in NOT_OBJECTS]


def is_value(obj: object) -> bool:
    """A constant (a string, a tuple of names): mkdocstrings renders no entry for it, so the
    reference names it in its text instead."""
    return isinstance(obj, (str, int, float, tuple, frozenset))


@pytest.mark.slow  # imports torch (validation.uneven)
def test_every_public_name_is_in_the_reference_with_a_docstring():
    rendered, text = documented(), (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    missing = [
        f"{m}.{n}"
        for m, n in public_names()
        if not (f"`{n}`" in text if is_value(obj := getattr(importlib.import_module(m), n)) else id(obj) in rendered)
    ]
    assert not missing, f"public names missing from docs/reference.md: {missing}"
    bare = [
        f"{m}.{n}"
        for m, n in public_names()
        if (inspect.isclass(obj := getattr(importlib.import_module(m), n)) or inspect.isfunction(obj))
        and not (obj.__doc__ or "").strip()
    ]
    assert not bare, f"public names without a docstring: {bare}"


def has_docstring(obj: object) -> bool:
    """A docstring of its own: a dataclass without one gets its signature as ``__doc__``, which
    the reference would render as the whole description."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return bool(doc) and not (dataclasses.is_dataclass(obj) and doc.startswith(f"{getattr(obj, '__name__', '')}("))


@pytest.mark.slow  # imports torch (validation.uneven)
def test_every_class_and_function_the_reference_renders_has_a_docstring_of_its_own():
    """Scenario, Summary, Calibration, WorkerFit (their signature as __doc__), and the
    plug-in bases NetworkModel and Engine rendered without a word."""
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    objects = [(path, resolve(path)) for path, _ in ENTRY.findall(text)]
    bare = [
        path for path, obj in objects if (inspect.isclass(obj) or inspect.isfunction(obj)) and not has_docstring(obj)
    ]
    assert not bare, f"rendered without a docstring of their own: {bare}"
    assert not has_docstring(dataclasses.make_dataclass("Plain", [("x", int)]))  # the check can fail


def test_the_check_sees_a_missing_name(monkeypatch):
    """The check above can fail: a public name the reference does not render is caught."""
    import hetsim.calibrate

    monkeypatch.setattr(hetsim.calibrate, "__all__", [*hetsim.calibrate.__all__, "extra"], raising=True)
    monkeypatch.setattr(hetsim.calibrate, "extra", lambda: None, raising=False)
    rendered = documented()
    assert id(hetsim.calibrate.extra) not in rendered
    assert id(hetsim.calibrate.calibrate) in rendered
