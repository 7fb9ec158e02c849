"""docs/architecture.md matches the code: its tables of built-in plug-ins (names and declared
parameters, in order) and of the policies' traits are what the registries hold."""

from __future__ import annotations

from pathlib import Path

from hetsim.core.registry import COSTS, DISTRIBUTIONS, ENGINES, NETWORKS, POLICIES

DOC = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
TRAITS = ("synchronous", "excludes_failed", "needs_costs", "uses_costs", "weighted_gradients", "resplits",
          "autocorrelated_steps", "closed_form", "needs_efficiency", "varies_batch")  # fmt: skip


def table_rows(header_start: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header line starts with ``header_start``."""
    lines = DOC.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[first + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows


def test_the_plugin_table_lists_every_builtin_with_its_declared_parameters():
    registries = {
        "cost model": COSTS, "distribution": DISTRIBUTIONS, "network": NETWORKS, "engine": ENGINES, "policy": POLICIES,
    }  # fmt: skip
    documented = {(kind, name): params for kind, name, params in table_rows("| kind | name | parameters |")}
    actual = {
        (kind, name): ", ".join(f"`{p.name}`" for p in cls.params).strip("`")
        for kind, registry in registries.items()
        for name, cls in registry.items()
    }
    assert documented == actual


def test_the_trait_table_is_what_the_policies_declare():
    rows = table_rows("| policy | synchronous |")
    assert [r[0] for r in rows] == list(POLICIES)
    for name, *values in rows:
        cls = POLICIES[name]
        assert [v == "yes" for v in values] == [bool(getattr(cls, t)) for t in TRAITS], name
