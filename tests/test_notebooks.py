"""The analysis notebooks: committed without outputs, and each runs top to bottom.

The execution tests run every notebook with nbclient under ``HETSIM_NOTEBOOK_SMALL=1`` (the
notebooks' quick mode) in a fresh kernel, with the working directory and ``TMPDIR`` in pytest's
temporary folder, so a notebook that writes outside its temporary folder cannot touch the
repository; a cell that raises fails the test, and a last cell added by the test checks the
numbers the notebook computed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_reproduce_paper.ipynb", "02_policy_landscape.ipynb", "03_calibration.ipynb"]
CELL_TIMEOUT_S = 240


def test_every_notebook_is_listed() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, f"{name}: code cells {dirty} have outputs or execution counts; clear them before committing"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


# Checks appended to each notebook as a last cell: the numbers it shows must be the right ones.
CHECKS = {
    "01_reproduce_paper.ipynb": """
for delay in DELAYS:
    for policy in ALGORITHMS:
        log = summarize(first_epochs(logged[delay, policy][1], EPOCHS)).mean_step_s
        sim = summarize(simulated[delay][policy]).mean_step_s
        assert abs(sim / log - 1) < 0.10, (delay, policy, sim, log)
""",
    "02_policy_landscape.ipynb": """
def cell(policy, slow, noise):
    return summary[(summary.policy == policy) & (summary.slow_factor == slow) & (summary.noise == noise)]
assert (cell("optimal", 1.0, "none").speedup_vs_equal.between(0.999, 1.001)).all()  # nothing to win
assert (cell("optimal", 4.0, "none").speedup_vs_equal > 1.5).all()
best, dp = cell("optimal", 4.0, "none").speedup_vs_equal.values, cell("dynamic", 4.0, "none").speedup_vs_equal.values
assert (best >= dp - 1e-9).all()
""",
    "03_calibration.ipynb": """
assert fits["per sample (us)"].iloc[-1] > fits["per sample (us)"].iloc[0]  # the injected per-sample delay is found
assert np.median([abs(c.step_error) for c in comparisons]) < 0.5
""",
}


def _execute(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("HETSIM_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # This environment's kernelspec first (ahead of any user-wide python3 kernel), so the kernel
    # is this interpreter with hetsim installed.
    monkeypatch.setenv("JUPYTER_PATH", str(Path(sys.prefix) / "share" / "jupyter"))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CHECKS[name]))
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, when one fails
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors
    images = sum(
        "image/png" in o.get("data", {}) for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
    )
    assert images > 0, f"{name} drew no figure"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES[:2])
def test_notebook_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _execute(name, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_calibration_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    _execute("03_calibration.ipynb", tmp_path, monkeypatch)
