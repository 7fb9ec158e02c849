"""``validation run --profile`` end to end: a short DDP run of two gloo ranks, rank 1 slowed by
validation's default injected delay (2 ms + 0.1 ms a sample), its torch.profiler traces imported
with ``hetsim import-trace`` and held against the run's own trace of the same steps: the local
batches exactly, the compute within 10% in the median over steps and ranks (1.6% in a run here;
benchmarks/import_trace_fidelity.py measures it over runs), the same slowest rank in every step,
and ``calibrate`` reading the result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hetsim.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
PROFILED = 4

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.serial]  # compute within 10% of the run's own


def test_profiled_run_imports_as_its_own_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "validation", "run", "--policies", "equal", "--epochs", "1", "--probe-repeats",
               "1", "--comm", "ddp", "--profile", str(PROFILED), "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted((out / "profiler").glob("*.json.gz"))
    assert [f.name for f in files] == ["equal-rank0.json.gz", "equal-rank1.json.gz"]

    imported = tmp_path / "imported.csv"
    capsys.readouterr()
    assert main(["import-trace", "--format", "torch-profiler", str(out / "profiler"), "-o", str(imported)]) == 0
    assert "2 ranks x 4 steps, policy equal" in capsys.readouterr().out
    mine = pd.read_csv(imported).set_index(["step", "worker"])
    own = pd.read_parquet(out / "trace.parquet")
    own = own[own["policy"] == "equal"].set_index(["step", "worker"])
    # ProfilerStep#N is the policy's step N (step 0 is the profiler's warm-up)
    assert sorted({s for s, _ in mine.index}) == list(range(1, PROFILED + 1))
    own = own.loc[mine.index]
    assert (mine["local_batch"] == own["local_batch"]).all()  # from the recorded input shapes
    errors = (mine["compute_s"] / own["compute_s"] - 1).abs()
    assert float(np.median(errors)) < 0.10, errors.to_dict()
    # the slowest rank of every step is the one the run itself measured slowest (where its two
    # slowest differ by over 10%: closer than that, the operators around the compute may decide)
    imported_c, own_c = mine["compute_s"].unstack("worker"), own["compute_s"].unstack("worker")
    top2 = np.sort(own_c.to_numpy(), axis=1)[:, -2:]
    clear = top2[:, 1] > 1.1 * top2[:, 0]
    assert (imported_c.idxmax(axis=1) == own_c.idxmax(axis=1))[clear].all(), (imported_c, own_c)
    assert main(["calibrate", str(imported), "-o", str(tmp_path / "fit.toml")]) == 0
