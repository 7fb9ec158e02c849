"""Plug-in registration, as the docs describe it: one file named in HETSIM_PLUGINS and imported by a
program is one plug-in, and a class that breaks the contract is told where it is made (split
from tests/test_extending.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hetsim.core.params import Param
from hetsim.core.registry import PLUGINS_ENV, POLICIES
from hetsim.policies import Policy, make_policy

PLUGIN_FILE = """
from hetsim.core.registry import POLICIES
from hetsim.policies import Equal


@POLICIES.register
class Twice(Equal):
    name = "twice-loaded"
"""


def test_a_plugin_file_named_in_hetsim_plugins_and_imported_by_a_program_is_one_plugin(tmp_path, monkeypatch):
    """The docs' two ways at once (the file in HETSIM_PLUGINS for the command line, ``import``
    in a program): one class statement run as two modules registers once, not a clash."""
    from hetsim.core.registry import load_plugins

    (tmp_path / "twice_plugin.py").write_text(PLUGIN_FILE)
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path / "twice_plugin.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        load_plugins()
        first = POLICIES["twice-loaded"]
        import twice_plugin  # the program's own import of the same file

        assert POLICIES["twice-loaded"] is twice_plugin.Twice is not first  # the later replaces it, as a reload does
        with pytest.raises(ValueError, match="'equal' is registered already"):
            POLICIES.register(type("Other", (Policy,), {"name": "equal"}))
    finally:
        POLICIES.unregister("twice-loaded")
        sys.modules.pop("twice_plugin", None)


def test_a_plugin_file_the_program_imported_first_is_not_run_again_from_hetsim_plugins(tmp_path, monkeypatch):
    """Imported by the program, then named in HETSIM_PLUGINS: run again under another name, its
    class replaced the program's in the registry while the program's objects stayed of the old
    (a scenario's to_dict round trip then compared unequal)."""
    from hetsim.core.registry import load_plugins

    (tmp_path / "real_plugin.py").write_text(PLUGIN_FILE)
    (tmp_path / "first_plugin.py").symlink_to(tmp_path / "real_plugin.py")  # a link's name is not the file's
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import first_plugin

        monkeypatch.setenv(PLUGINS_ENV, str(tmp_path / "real_plugin.py"))
        load_plugins()
        assert POLICIES["twice-loaded"] is first_plugin.Twice
        assert isinstance(make_policy("twice-loaded"), first_plugin.Twice)
    finally:
        POLICIES.unregister("twice-loaded")
        sys.modules.pop("first_plugin", None)


@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_a_plugin_that_breaks_the_class_contract_is_told_where_it_is_made(tmp_path):
    """A single Param where a tuple belongs fails as the class is made, naming the fix; a class
    that is not the kind's base is refused by the registry (it would fail on its first method);
    from HETSIM_PLUGINS either is one line and status 2."""
    with pytest.raises(
        TypeError, match=r"^Bad.params is one Param, not a tuple of them: write params = \(Param\(...\),\)$"
    ):

        class Bad(Policy):
            name = "bad-params"
            params = Param("x", default=1.0)  # type: ignore[assignment]

    with pytest.raises(
        TypeError, match=r"^a policy is a class that subclasses hetsim.policies.base.Policy: .*NotAPolicy is not$"
    ):

        @POLICIES.register
        class NotAPolicy:
            name = "not-a-policy"

    assert "not-a-policy" not in POLICIES
    with pytest.raises(TypeError, match=r"Equal object is not$"):  # an object where the registry holds classes
        POLICIES.register(make_policy("equal"))
    plugin = tmp_path / "bad_params.py"
    plugin.write_text("from hetsim.core.params import Param\nfrom hetsim.policies import Equal\n\n"
                      "class Bad(Equal):\n    name = 'bad'\n    params = Param('x', default=1.0)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "hetsim", "simulate", "paper"], capture_output=True, text=True,
                          env={**os.environ, PLUGINS_ENV: str(plugin)}, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"hetsim: error: {PLUGINS_ENV}: cannot import '{plugin}': "
        "Bad.params is one Param, not a tuple of them: write params = (Param(...),)"
    ]


@pytest.mark.parametrize(("params", "problem"), [
    ((Param("x"), Param("x")), "'x' is declared twice"),
    ((Param("x", low="xx"),), "'x' is bounded by 'xx', which no parameter before it is"),  # a typo bounded nothing
    ((Param("x", low="y"), Param("y")), "'x' is bounded by 'y', which no parameter before it is"),  # nor a later one
    ((Param("x", default=-1.0, low=0.0),), "'x' has a default outside its own bounds: must be >= 0, got -1"),
    ((Param("time_s", default=1.0),), "'time_s' would hide the method time_s(): hold it elsewhere with attr="),
])  # fmt: skip
def test_a_params_declaration_that_would_pass_unseen_is_refused_as_the_class_is_made(params, problem):
    from hetsim.model.costs import CostModel

    with pytest.raises(TypeError) as refused:
        type("Typo", (CostModel,), {"name": "typo", "params": params})
    assert str(refused.value) == f"Typo.params: {problem}"


def test_a_folder_in_hetsim_plugins_is_refused_not_imported_as_an_empty_package(tmp_path, monkeypatch):
    from hetsim.core.errors import ConfigError
    from hetsim.core.registry import load_plugins

    (tmp_path / "my_plugins").mkdir()
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path / "my_plugins"))
    with pytest.raises(ConfigError) as refused:
        load_plugins()
    assert str(refused.value) == (
        f"{PLUGINS_ENV}: cannot import '{tmp_path / 'my_plugins'}': a folder: name a .py file, or a module of plug-ins"
    )
