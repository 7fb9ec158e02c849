"""The fidelity benchmark (``python -m validation matrix``): its fixed configurations meet the
issue's requirements and are valid runs, its statistics and cross-run replay are exact, and a
tiny matrix of real runs writes its results folder and resumes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from validation.compare import reinjected
from validation.config import build_config
from validation.matrix import CROSS, RUNS, CrossRun, MatrixRun, is_complete, run_matrix, select
from validation.matrix_report import error_stats, results, write
from validation.options import add_run_options

ROOT = Path(__file__).resolve().parents[1]


def config_of(run: MatrixRun):
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    return build_config(parser.parse_args(list(run.argv)))


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_every_configuration_is_a_valid_run():
    for run in RUNS:
        config = config_of(run)
        assert config.epochs >= 1 and config.probe_repeats >= 1, run.name


def test_the_cpu_matrix_covers_what_the_benchmark_promises():
    runs, cross = select(quick=False, gpus=0)
    configs = {r.name: config_of(r) for r in runs}
    assert len(runs) >= 8 and all(r.gpus == 0 for r in runs)
    real = [
        n for n, c in configs.items() if (c.threads or c.cpus or c.contention) and not (c.delay or c.per_sample_delay)
    ]
    assert len(real) >= 2
    assert any(c.workload == "resnet18" for c in configs.values())
    assert any(c.workload == "transformer" for c in configs.values())
    assert any(c.comm == "ddp" for c in configs.values())
    assert any(c.world_size >= 3 for c in configs.values())
    assert cross and all(c.source in configs and c.target in configs for c in cross)


def test_quick_and_gpu_selections():
    quick, quick_cross = select(quick=True, gpus=0)
    assert {r.name for r in quick} == {r.name for r in RUNS if r.quick and not r.gpus}
    assert all(c.source in {r.name for r in quick} and c.target in {r.name for r in quick} for c in quick_cross)
    one_gpu, _ = select(quick=False, gpus=1)
    assert {r.name for r in one_gpu} - {r.name for r in select(False, 0)[0]} == {r.name for r in RUNS if r.gpus == 1}
    assert any(config_of(r).devices != ("cpu",) * config_of(r).world_size for r in RUNS if r.gpus)
    assert {c.target for c in CROSS} <= {r.name for r in RUNS}


def test_error_statistics_are_of_absolute_errors():
    stats = error_stats([0.01, -0.02, 0.03, -0.04, 0.05])
    assert stats["n"] == 5
    assert stats["mean"] == pytest.approx(0.03)
    assert stats["median"] == pytest.approx(0.03)
    assert stats["p90"] == pytest.approx(0.046)  # linear interpolation between 0.04 and 0.05
    assert np.isnan(error_stats([])["median"]) and error_stats([])["n"] == 0


def test_reinjection_moves_the_calibrated_costs_by_the_change_of_delays():
    workers = [
        {"name": "w0", "overhead_s": 0.004, "per_sample_s": 0.0002, "noise": {"dist": "lognormal", "sigma": 0.1}},
        {"name": "w1", "overhead_s": 0.010, "per_sample_s": 0.0005},
    ]
    source = {"injection": {"delay": {"1": "0.004"}, "per_sample_delay": {"1": 0.0003}, "slowdown": {}}}
    target = {"injection": {"delay": {"1": "uniform:0.006,0.010"}, "per_sample_delay": {"1": 0.0006},
                            "slowdown": {"0": 2.0}}}  # fmt: skip
    w0, w1 = reinjected(workers, source, target)
    assert w0["overhead_s"] == pytest.approx(0.008) and w0["per_sample_s"] == pytest.approx(0.0004)  # x2
    assert w0["noise"] == workers[0]["noise"]
    assert w1["overhead_s"] == pytest.approx(0.010 - 0.004 + 0.008)
    assert w1["per_sample_s"] == pytest.approx(0.0005 - 0.0003 + 0.0006)


TINY = ("--epochs", "1", "--probe-repeats", "2", "--policies", "equal,dynamic", "--global-batch", "128")


@pytest.mark.slow
@pytest.mark.multiprocess  # not serial: predicted within 0.5-2x of measured step times holds beside other tests' load
def test_a_tiny_matrix_writes_its_results_and_resumes(tmp_path):
    runs = [
        MatrixRun("tiny", (*TINY, "--delay", "1=0.004"), "one"),
        MatrixRun("tiny-2x", (*TINY, "--delay", "1=0.008"), "two"),
    ]
    cross = [CrossRun("tiny", "tiny-2x", "the delay doubled")]
    lines: list[str] = []
    found, failed, load = run_matrix(tmp_path, runs, cross, lines.append)
    assert failed == [] and all(is_complete(tmp_path / "runs" / r.name) for r in runs)
    assert [(p.config, p.kind, p.comparison.policy) for p in found] == [
        ("tiny", "same-run", "equal"), ("tiny", "same-run", "dynamic"),
        ("tiny-2x", "same-run", "equal"), ("tiny-2x", "same-run", "dynamic"),
        ("tiny-2x", "cross-run", "equal"), ("tiny-2x", "cross-run", "dynamic"),
    ]  # fmt: skip
    for p in found:  # a 4 / 8 ms delay on rank 1 of steps of a few ms: the prediction is in the right range
        assert 0.5 < p.comparison.predicted.mean_step_s / p.comparison.measured.mean_step_s < 2.0
    data = results(runs, found, failed, load, busy=0)
    write(tmp_path, data, found, load)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["statistics"]["all"]["n"] == 6 and saved["statistics"]["cross-run"]["n"] == 2
    assert saved["git_commit"] is not None and saved["runs"][0]["argv"] == list(runs[0].argv)
    assert (tmp_path / "matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "load.csv").read_text().startswith("t_s,loadavg_1m,cpu_busy,running")
    assert len((tmp_path / "predictions.csv").read_text().splitlines()) == 7

    log = tmp_path / "runs" / "tiny.log"
    before = log.stat().st_mtime_ns
    again, failed, _ = run_matrix(tmp_path, runs, cross, lines.append)  # resumes: nothing is run again
    assert failed == [] and log.stat().st_mtime_ns == before
    assert "tiny: complete already, kept" in lines
    assert [p.comparison.measured.mean_step_s for p in again] == [p.comparison.measured.mean_step_s for p in found]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--busy", "-1"], "validation: error: --busy: must be in [0, 64], got -1"),
        (["--busy", "x"], "validation: error: validation matrix: argument --busy: invalid int value: 'x'"),
        (["--frobnicate"], "validation: error: unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_matrix_input_is_one_line_and_exit_2(tmp_path, args, message):
    done = subprocess.run(
        [sys.executable, "-m", "validation", "matrix", "--out", str(tmp_path / "m"), *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == message
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_gpu_matrix_without_cuda_is_refused(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        [sys.executable, "-m", "validation", "matrix", "--gpu", "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "validation: error: --gpu: no CUDA device on this machine"
