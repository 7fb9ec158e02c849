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
NAMES = ["01_reproduce_paper.ipynb", "02_policy_landscape.ipynb", "03_calibration.ipynb", "04_time_to_accuracy.ipynb"]
REAL_RUNS = ["03_calibration.ipynb", "04_time_to_accuracy.ipynb"]  # these start torch.distributed ranks
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
    "04_time_to_accuracy.ipynb": """
m, s = rankings["mixed-gpus"], rankings["stragglers"]
EFF, TTR, TPR = "statistical_efficiency", "time-to-target rank", "throughput rank"
for t in (m, s):  # async: near the top by throughput, not to the target; dynamic = dynamic-enhanced in time
    assert t.loc["async", TPR] <= 2 and t.loc["async", TTR] >= 5
    assert np.isclose(t.loc["dynamic", "throughput_sps"], t.loc["dynamic-enhanced", "throughput_sps"])
assert s.loc["async", TTR] == len(s) and m.loc["async", TTR] > len(m) / 2
assert 4.5 < m.loc["async", "staleness_mean"] < 5.5 and 6.5 < s.loc["async", "staleness_mean"] < 7.5
assert 0.3 < m.loc["async", EFF] < 0.4 and 0.2 < s.loc["async", EFF] < 0.3
assert m.loc["dynamic", TTR] == len(m) and m.loc["dynamic-enhanced", TTR] <= len(m) - 3
assert 0.5 < m.loc["dynamic", EFF] < 0.7
assert np.allclose(m.loc[["optimal", "adaptive"], EFF], 1)
assert (m.loc["optimal", TPR] < m.loc["adaptive", TPR]) == (m.loc["optimal", TTR] < m.loc["adaptive", TTR])
assert sorted(s.loc[["backup", "ksync"], TPR]) == [3, 4]
assert s["time_to_target_s"].nsmallest(3).index.tolist() == ["goodput", "ksync", "backup"]
assert (s.loc[["backup", "ksync"], EFF] > 1).all()
assert np.allclose(s.loc[["backup", "ksync"], "dropped_share"], [1 / 8, 1 / 2])
assert (m.loc[["backup", "ksync"], TPR] == len(m) - 1).all() and (m.loc[["backup", "ksync"], TTR] == len(m) - 2).all()
assert m.loc["goodput", [TPR, TTR]].tolist() == [1, 1] and s.loc["goodput", [TPR, TTR]].tolist() == [1, 1]
assert 0.7 < s.loc["goodput", EFF] < 0.9
near = s.loc[["equal", "proportional", "optimal", "dynamic", "dynamic-enhanced", "adaptive"]]
assert np.ptp(near["throughput_sps"]) < 0.03 * s.loc["equal", "throughput_sps"]
assert np.ptp(near["time_to_target_s"]) < 0.03 * s.loc["equal", "time_to_target_s"]
# section 3: an interior best fixed batch; goodput near it and ahead of the workload's 512: a first batch
# below 512 chosen before the first step, then one change up, near the best fixed batch
assert min(FIXED_BATCHES) < best_batch < max(FIXED_BATCHES) and best_batch != 512
assert goodput.time_to_target_s < 1.02 * best_fixed and goodput.time_to_target_s < fixed[512].time_to_target_s
assert len(changes) == 1 and batch_per_step[0] < 512 and 640 <= batch_per_step[-1] <= 800
assert fixed[1280].throughput_sps < 0.5 * fixed[1024].throughput_sps
# section 4: the same accuracy per epoch under every policy, and the errors follow the step errors
accuracy = epochs.pivot(index="epoch", columns="policy", values="test_accuracy")
assert np.abs(accuracy.to_numpy() - accuracy[["equal"]].to_numpy()).max() < 0.1  # the same gradient, but rounding
assert targets["measured (s)"].notna().all() and targets["predicted (s)"].notna().all()
assert np.median(targets["error"].abs()) < 0.5, targets  # as notebook 3: this machine's load shows up in them
assert np.median((targets["error"] - targets["mean step error"]).abs()) < 0.2, targets
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
@pytest.mark.parametrize("name", [n for n in NAMES if n not in REAL_RUNS])
def test_notebook_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _execute(name, tmp_path, monkeypatch)


# Serial: their checks hold measured times to predicted ones (median |error| under 0.5), and a
# prediction rests on a probe taken minutes before the runs. Beside the other lane, the load
# changes between the two: in 2 of 4 clean-clone runs on lane 1 one of them failed (notebook 4's
# predictions 1.85-2.47x its measured times, its probe taken under load and its runs not).
@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.serial
@pytest.mark.parametrize("name", REAL_RUNS)
def test_real_run_notebook_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    _execute(name, tmp_path, monkeypatch)
