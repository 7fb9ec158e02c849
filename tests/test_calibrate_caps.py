"""The memory caps an ``equal`` trace shows are kept as the workers' ``max_batch``
(:mod:`hetsim.calibrate.caps`). Without them, ``plan`` on the fitted scenario split ``equal``
256 each where the cluster ran 320/320/192/192, and read ``optimal`` 2.68x faster than that
where it is 2.02x faster than the ``equal`` that ran."""

from __future__ import annotations

import shutil
import tomllib

import pandas as pd
import pytest

from hetsim import load_scenario, simulate
from hetsim.analysis.analytic import predict
from hetsim.calibrate import calibrate
from hetsim.calibrate.caps import equal_caps
from hetsim.cli.main import main
from hetsim.policies import Equal


def _frame(splits: list[list[int]]) -> pd.DataFrame:
    rows = [(s, w, b) for s, split in enumerate(splits) for w, b in enumerate(split)]
    return pd.DataFrame(rows, columns=["step", "worker", "local_batch"])


@pytest.mark.parametrize(
    ("splits", "caps"),
    [
        ([[320, 320, 192, 192]] * 3, {2: 192, 3: 192}),
        ([[256, 256, 256, 255]] * 3, {}),  # the remainder's one sample is not a cap
        ([[300, 300, 200, 224], [250, 250, 250, 274]], {2: 250}),  # the others took more in another step
        ([[400, 100, 100], [200, 200, 200]], {}),
    ],
)
def test_a_worker_held_below_anothers_equal_share_was_at_its_cap(splits, caps):
    warnings: list[str] = []
    assert equal_caps(_frame(splits), warnings) == caps
    assert len(warnings) == len(caps) and all("kept as its max_batch" in w for w in warnings)


def test_equal_calibrated_keeps_the_caps_and_predicts_the_equal_that_ran():
    truth = load_scenario("workstation", ["workload.global_batch=1024", "workload.epochs=1"])
    trace = simulate(truth, Equal())
    cal = calibrate(trace)
    assert [w.get("max_batch") for w in cal.scenario["workers"]] == [None, None, 192, 192]
    fitted = load_scenario(cal.scenario)
    assert predict(fitted, Equal()).final_batches == predict(truth, Equal()).final_batches == (320, 320, 192, 192)
    # under a policy that splits by speed an uneven split says nothing of caps
    assert all("max_batch" not in w for w in calibrate(trace.to_frame().assign(policy="dynamic")).scenario["workers"])


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_a_run_folders_trace_keeps_the_runs_names_and_caps(tmp_path, capsys):
    # under adaptive no split shows the caps; the simulate --out folder records them
    run = tmp_path / "run"
    assert (
        main(["simulate", "workstation", "--policy", "adaptive", "--set", "workload.epochs=1", "--out", str(run)]) == 0
    )
    shutil.copy(run / "trace.parquet", tmp_path / "bare.parquet")
    for trace, names, caps in [
        (run / "trace.parquet", ["a100#0", "a100#1", "t4#0", "t4#1"], [512, 512, 192, 192]),
        (tmp_path / "bare.parquet", ["w0", "w1", "w2", "w3"], [None] * 4),  # no record beside it
    ]:
        out = tmp_path / f"{trace.stem}-{trace.parent.name}.toml"
        assert main(["calibrate", str(trace), "-o", str(out)]) == 0
        workers = tomllib.loads(out.read_text())["workers"]
        assert [w["name"] for w in workers] == names and [w.get("max_batch") for w in workers] == caps
    assert "names and max_batch are the run's" in capsys.readouterr().err
