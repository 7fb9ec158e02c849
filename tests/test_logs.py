"""Reference-implementation logs: import into the trace schema, DP replay, and the VGG16 check."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from hetsim.calibrate import calibrate
from hetsim.core.errors import ConfigError
from hetsim.model.trace import Trace
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from hetsim.traces.reference_logs import (
    import_run,
    parse_success,
    read_run,
    reference_run_path,
    reference_runs,
    replay_shares,
    steady_state,
)

SYNC_01 = "2021_06_15_17_36_00_VGG16"
DP_01 = "2021_06_16_07_47_00_VGG16"
DP_02 = "2021_06_16_10_50_30_VGG16"
EDP_02 = "2021_06_18_11_54_00_VGG16"
P2_RESNET = "AWS_2021_06_02_P2_2021_06_02_15_01_30_ResNet50"
P3_RESNET = "AWS_2021_06_02_P3_2021_06_02_15_01_30_ResNet50"
STEADY_FROM_EPOCH = 50


def _timer(name: str, rank: int) -> dict:
    return json.loads((reference_run_path(name) / f"timer_summary_{rank}.json").read_text())


def test_shipped_runs_and_licence():
    names = reference_runs()
    assert {SYNC_01, DP_01, DP_02, EDP_02, P2_RESNET, P3_RESNET} <= set(names)
    licence = (reference_run_path(SYNC_01).parent / "LICENSE").read_text()
    assert "MIT License" in licence and "vineeths96" in licence


def test_parse_success_types():
    config = parse_success(
        "Training parameters\nruns : 5\nlr : 0.1\ndynamic_partition : True\narchitecture : VGG16\n"
        "Best Top 1 Accuracy: 0.9\n"
    )
    assert config == {"runs": 5, "lr": 0.1, "dynamic_partition": True, "architecture": "VGG16"}


def test_sync_run_imports_one_row_per_worker_per_epoch():
    trace = import_run(reference_run_path(SYNC_01))
    assert isinstance(trace, Trace) and trace.policy == "equal" and trace.n_workers == 2
    assert trace.n_steps == 150 and set(trace.local_batch.tolist()) == {128}
    compute = trace.per_step("compute_s")
    for rank in (0, 1):
        assert compute[:, rank].tolist() == _timer(SYNC_01, rank)["mean_batch_process_times"]
    reduce = min(_timer(SYNC_01, r)["batch.reduce"]["average_duration"] for r in (0, 1))
    assert np.all(trace.comm_s == reduce)
    assert trace.per_step("step")[:3, 0].tolist() == [0, 196, 392]  # (29399 + 1) events / 150 epochs
    wait = trace.per_step("wait_s")
    assert np.allclose(wait.min(axis=1), 0.0) and (wait >= 0).all()
    assert np.all(np.diff(trace.per_step("start_s")[:, 0]) > 0)


def test_dp_batches_are_replayed_from_the_logged_epoch_means():
    trace = import_run(reference_run_path(DP_01))
    assert trace.policy == "dynamic"
    t0, t1 = (np.array(_timer(DP_01, r)["mean_batch_process_times"]) for r in (0, 1))
    batches = trace.per_step("local_batch")
    assert batches[0].tolist() == [128, 128]
    # epoch 1: p_i = (0.5 / t_i) / sum_j (0.5 / t_j), batch floor(256 p_i) as the reference sampler
    p0 = (1 / t0[0]) / (1 / t0[0] + 1 / t1[0])
    assert batches[1].tolist() == [math.floor(256 * p0), math.floor(256 * (1 - p0))]
    shares = replay_shares(np.stack([t0, t1], axis=1))
    assert np.allclose(shares.sum(axis=1), 1.0)
    assert (batches[1:, 0] > batches[1:, 1]).all()  # the undelayed rank 0 gets more from epoch 1 on
    assert import_run(reference_run_path(EDP_02)).policy == "dynamic-enhanced"


def test_aws_nodes_import_per_step_and_combine_into_one_run():
    single = import_run(reference_run_path(P2_RESNET))
    assert single.n_workers == 1 and single.n_steps == 980 and set(single.local_batch.tolist()) == {256}
    assert np.all(single.comm_s == 0.0)
    both = import_run([reference_run_path(P2_RESNET), reference_run_path(P3_RESNET)])
    assert both.n_workers == 2 and both.n_steps == 980 and set(both.local_batch.tolist()) == {128}
    p2, p3 = _timer(P2_RESNET, 0), _timer(P3_RESNET, 0)
    assert both.per_step("compute_s")[:, 1].tolist() == p3["process_times"]
    assert both.per_step("comm_s")[:, 0] == pytest.approx(np.minimum(p2["reduce_times"], p3["reduce_times"]))
    assert both.per_step("epoch")[-1, 0] == 4


def test_bad_run_folders(tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        read_run(tmp_path / "missing")
    with pytest.raises(ConfigError, match="success.txt"):
        read_run(tmp_path)
    run = tmp_path / "run"
    shutil.copytree(reference_run_path(SYNC_01), run)
    (run / "timer_summary_1.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_run(run)
    (run / "timer_summary_1.json").write_text(json.dumps({"batch.process": {"average_duration": 1.0}}))
    with pytest.raises(ConfigError, match="batch.reduce"):
        read_run(run)


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_vgg16_dp_calibrated_at_10ms_predicts_the_20ms_run():
    """Calibrate on the DP run with a 0.01 s delay, add 0.01 s to the delayed worker's overhead,
    simulate dynamic, and compare with the logged steady state of the DP run with 0.02 s."""
    calibration = calibrate(import_run(reference_run_path(DP_01)))
    raw = calibration.scenario
    assert raw["workload"]["global_batch"] == 255  # the reference's floor(p_i * 256) drops a sample
    raw["workers"][1]["overhead_s"] += 0.01
    raw["policy"] = {"name": "dynamic"}
    simulated = steady_state(simulate(load_scenario(raw)), STEADY_FROM_EPOCH)
    logged = steady_state(import_run(reference_run_path(DP_02)), STEADY_FROM_EPOCH)
    for sim, log in zip(simulated["compute_s"], logged["compute_s"]):
        assert sim == pytest.approx(log, rel=0.05)
    assert abs(simulated["local_batch"][0] - logged["local_batch"][0]) <= 4
