"""The command lines start without the heavy libraries: importing ``hetsim``, building a
parser, ``--help`` and a mistyped command load none of numpy, pandas, scipy, matplotlib, simpy
or torch (they come with the commands that use them). Each check runs in a fresh interpreter,
whose ``sys.modules`` says what was imported: a property, not a wall-clock time (that is
benchmarks/bench_startup.py's).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "pandas", "scipy", "matplotlib", "simpy", "torch")


def heavy_after(code: str) -> list[str]:
    """The HEAVY packages in ``sys.modules`` after ``code`` ran in a fresh interpreter (in the
    repository root; a SystemExit from argparse's --help is caught, its output dropped)."""
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
        {textwrap.indent(textwrap.dedent(code), " " * 16)}
            except SystemExit:
                pass
        print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


@pytest.mark.slow
def test_the_check_sees_a_heavy_import():
    assert {"numpy", "simpy"} <= set(heavy_after("import hetsim.run.simulate"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "import hetsim",
        "import hetsim; hetsim.__version__",
        "import hetsim.cli.main",
        "from hetsim.cli.main import build_parser; build_parser()",
        "from hetsim.cli.main import main; main(['--help'])",
        "from hetsim.cli.main import main; main(['--version'])",
        "from hetsim.cli.main import main; main(['simulate', '--help'])",
        "from hetsim.cli.main import main; main(['sweep', '--help'])",
        "from hetsim.cli.main import main; main(['plan', '--help'])",
        "from hetsim.cli.main import main; main(['scenarios'])",
        "from hetsim.cli.main import main; main(['show', 'paper'])",
        "from hetsim.cli.main import main; main(['frobnicate'])",
        "from hetsim.cli.main import main; main(['simulate', '--bogus'])",
        "import validation.cli",
        "from validation.cli import build_parser; build_parser()",
        "from validation.cli import main; main(['--help'])",
        "from validation.cli import main; main(['run', '--help'])",
    ],
)
def test_starting_imports_nothing_heavy(code):
    assert heavy_after(code) == []


PLUGIN_MODULES = ("hetsim.policies", "hetsim.model.distributions", "hetsim.model.costs", "hetsim.model.network",
                  "hetsim.engines")  # fmt: skip


@pytest.mark.slow
def test_import_hetsim_imports_no_plugin_module():
    """``import hetsim`` (and a look at the registries' object) loads none of the modules whose
    import registers plug-ins: the registries fill themselves on first use."""
    code = "import hetsim, json, sys; hetsim.POLICIES; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "hetsim.core.registry" in loaded
    assert not {m for m in loaded if m.startswith(PLUGIN_MODULES)}


def test_calibrate_help_lists_the_models_when_shown(capsys):
    """``--model``'s metavar is left until the help is formatted (OneLineParser.defer_metavar)."""
    from hetsim.calibrate import CHOICES
    from hetsim.cli.main import main

    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    assert f"--model {'|'.join(CHOICES)}" in capsys.readouterr().out


def test_lazy_names_are_the_modules_objects():
    """``hetsim``'s public names, loaded on first use, are the defining modules' objects; the
    function ``simulate`` is not hidden by a module (the simulator's modules live in packages whose
    names no public name shares)."""
    import hetsim.core.registry
    import hetsim.scenario.config
    from hetsim import POLICIES, load_scenario, simulate

    assert simulate is sys.modules["hetsim.run.simulate"].simulate
    assert hetsim.simulate is simulate and callable(hetsim.simulate)
    assert load_scenario is hetsim.scenario.config.load_scenario and POLICIES is hetsim.core.registry.POLICIES
    assert set(hetsim.__all__) <= set(dir(hetsim))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        hetsim.nothing  # noqa: B018


@pytest.mark.slow
def test_a_simulation_imports_no_plotting_no_pandas_and_no_scipy_stats_or_optimize():
    """``simulate`` without ``--out`` draws no figure, writes no table and needs no confidence
    interval or fit: matplotlib, pandas, scipy.stats and scipy.optimize (together about 3 s of
    start-up here) stay out."""
    code = "from hetsim.cli.main import main; main(['simulate', 'paper', '--policy', 'equal,dynamic'])"
    script = (
        "import contextlib, io, json, sys\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    {code}\n"
        "heavy = ('matplotlib', 'pandas', 'scipy.stats', 'scipy.optimize')\n"
        "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
