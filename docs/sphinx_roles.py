"""Sphinx cross-reference roles in docstrings, rendered by mkdocstrings as links.

hetsim's docstrings name other objects the Sphinx way (``:func:`~hetsim.calibrate.calibrate```),
which reads well in the source and in ``help()``; mkdocstrings renders Markdown and would print
the role as it stands. This griffe extension (``mkdocs.yml`` names it) rewrites each role into an
*optional* mkdocs-autorefs reference before the docstring is rendered: a link where the object
has an entry on the site (docs/reference.md), the name in code where it has none, so that a
reference to a private helper never fails ``mkdocs build --strict``.

A role's target is resolved the way Sphinx reads it: in the scope of the object whose docstring
it is (its members, its module's names and imports, its parents'), ``~`` shows only the last
component, and ``title <target>`` shows the title.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):`(?P<text>[^`]+)`")
TITLED = re.compile(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>")


def _full_path(obj: griffe.Object | griffe.Alias, name: str) -> str:
    """``name`` (dotted or not) as a full path, resolved from ``obj``'s scope where it can be."""
    head, _, rest = name.partition(".")
    try:
        path = obj.resolve(head)
    except (griffe.NameResolutionError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return name  # already a full path (hetsim.x.y), or nothing griffe knows: left as written
    return f"{path}.{rest}" if rest else path


def autoref(obj: griffe.Object | griffe.Alias, text: str) -> str:
    """The optional autorefs reference for one role's ``text`` in ``obj``'s docstring."""
    titled = TITLED.fullmatch(text)
    if titled:
        title, target = titled["title"], titled["target"].lstrip("~.")
    else:
        target = text.lstrip("~.")
        title = target.rsplit(".", 1)[-1] if text.startswith("~") else target
    return f'<autoref identifier="{_full_path(obj, target)}" optional>`{title}`</autoref>'


class SphinxRoles(griffe.Extension):
    """Rewrites every Sphinx role of every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = ROLE.sub(lambda m: autoref(obj, m["text"]), obj.docstring.value)
