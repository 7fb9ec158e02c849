"""House rules that keep the code readable in one sitting, checked on the source itself (the
package, its benchmarks, examples and tests): every module under 400 lines, every function under
60, and the layers pointing one way (engines import
neither pandas, matplotlib nor argparse; hetsim never imports torch or validation)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(
    p for d in ("hetsim", "validation", "benchmarks", "examples", "tests") for p in (ROOT / d).rglob("*.py")
)
MODULE_LINES = 400  # a module is under this many lines
FUNCTION_LINES = 60  # a function is under this many


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_are_short(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines < MODULE_LINES, f"{lines} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 >= FUNCTION_LINES
    ]
    assert not long


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_layers_point_one_way():
    for path in (ROOT / "hetsim").rglob("*.py"):
        assert not imported_modules(path) & {"torch", "validation"}, path
    for path in (ROOT / "hetsim" / "engines").rglob("*.py"):
        assert not imported_modules(path) & {"pandas", "matplotlib", "argparse"}, path


# Each hetsim package's layer: a module imports only from its own layer or below (imports under
# ``if TYPE_CHECKING:`` are for annotations and do not count). ``ls hetsim/`` shows these packages.
LAYERS = [
    {"core", "data"},  # errors, parameters, registries, files, provenance, the shared console; shipped data
    {"model", "policies"},  # distributions, costs, networks, workers, trace, efficiency; the policies
    {"scenario"},  # the Scenario and the factory from raw tables
    {"engines", "run", "analysis", "calibrate", "plan"},  # simulating, closed forms, fitting, planning
    {"sweep"},  # sweep files, grids on processes or Dask, results folders
    {"plots", "report", "traces"},  # figures, reports, traces in and out (Perfetto, torch.profiler, logs)
    {"cli", "__main__", "__init__"},
]
LAYER = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def runtime_hetsim_imports(path: Path) -> set[str]:
    """The hetsim packages (first component under hetsim) ``path`` imports outside TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hetsim."):
            names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("hetsim."))
    return names


def test_ls_hetsim_shows_the_layers():
    """hetsim's top level holds only its layers' packages (and the package's own two files), so a
    new module has to say which layer it belongs to."""
    modules = {p.name for p in (ROOT / "hetsim").glob("*.py")}
    packages = {p.name for p in (ROOT / "hetsim").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert modules == {"__init__.py", "__main__.py"}
    assert packages == set(LAYER) - {"__init__", "__main__"}


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_every_hetsim_module_imports_only_from_its_layer_or_below():
    for path in (ROOT / "hetsim").rglob("*.py"):
        parts = path.relative_to(ROOT / "hetsim").with_suffix("").parts
        own = LAYER[parts[0]]
        above = {m for m in runtime_hetsim_imports(path) if LAYER[m] > own and m != parts[0]}
        assert not above, f"{path.relative_to(ROOT)} imports {sorted(above)} from a higher layer"


CLI_AND_REPORTS = {"cli", "report", "__main__"}  # plots' style is shared


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_validation_imports_no_command_line_or_report_of_hetsim():
    """validation uses hetsim's model, policies, calibration and console, never its CLI or reports
    (what it shares with hetsim's command line lives in hetsim.core.console)."""
    for path in (ROOT / "validation").rglob("*.py"):
        wrong = runtime_hetsim_imports(path) & CLI_AND_REPORTS
        assert not wrong, f"{path.relative_to(ROOT)} imports hetsim's {sorted(wrong)}"
