"""``python -m validation gpu-check``: refused in one line without CUDA, and its trace check, a pure
function of a run folder, exact on synthetic traces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from hetsim.model.trace import write_trace_table
from validation import gpu_check
from validation.cli import main as cli_main
from validation.trace_check import (
    check_folder,
    first_use_spikes,
    memory_growth,
    negative_times,
    read_trace,
    unprofiled,
    use_ratios,
)

ROOT = Path(__file__).resolve().parents[1]


def trace(rows: list[tuple[str, int, int, int, float]], comm_s: float = 0.001) -> pd.DataFrame:
    """(policy, step, worker, local_batch, compute_s) rows; each step 50 ms long from the last."""
    frame = pd.DataFrame(rows, columns=["policy", "step", "worker", "local_batch", "compute_s"])
    frame["epoch"] = 0
    frame["start_s"] = 0.05 * frame["step"]
    frame["wait_s"] = 0.05 - comm_s - frame["compute_s"]
    frame["comm_s"] = comm_s
    frame["included"] = frame["local_batch"] > 0
    return frame


def steady(policy: str = "equal", first: float = 0.005, n: int = 6, batch: int = 64) -> list:
    return [(policy, k, 0, batch, first if k == 0 else 0.005) for k in range(n)]


def test_without_cuda_it_says_so_in_one_line_and_exits_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli_main(["gpu-check", "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("validation: error: gpu-check: no CUDA device on this machine")
    assert not (tmp_path / "g").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the checks")
def test_the_command_refuses_in_a_fresh_interpreter():
    done = subprocess.run([sys.executable, "-m", "validation", "gpu-check"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no CUDA device on this machine" in done.stderr


def test_a_steady_trace_passes():
    assert negative_times(trace(steady())) == [] and first_use_spikes(trace(steady())) == []


def test_negative_times_and_time_going_back_are_named():
    frame = trace(steady())
    frame.loc[2, "wait_s"] = -0.0001
    frame.loc[4, "start_s"] = 0.0
    problems = negative_times(frame)
    assert problems[0] == "1 row(s) with negative wait_s, first: equal step 2 rank 0 (-0.000100 s)"
    assert problems[1] == "equal: start_s goes back between steps"


@pytest.mark.parametrize(("first", "flagged"), [(0.0059, False), (0.0061, True), (0.014, True)])
def test_a_first_use_above_1_2x_its_median_is_flagged(first, flagged):
    problems = first_use_spikes(trace(steady(first=first)))
    assert bool(problems) == flagged
    if flagged:
        assert problems[0].startswith(f"equal, rank 0: first use of local batch 64 (step 0) took {first / 0.005:.2f}x")


@pytest.mark.parametrize(("first", "flagged"), [(0.0007, False), (0.00099, False), (0.0012, True)])
def test_a_sub_millisecond_steps_first_use_must_also_be_half_a_millisecond_above_its_median(first, flagged):
    """A GPU rank's 0.5 ms step read 1.4x by 0.2 ms of jitter is no one-off cost; 0.7 ms above is."""
    rows = [("equal", k, 0, 64, first if k == 0 else 0.0005) for k in range(6)]
    assert bool(first_use_spikes(trace(rows))) == flagged


def test_a_command_that_cannot_start_fails_its_check_alone(tmp_path):
    status, stderr, _ = gpu_check.run_command([str(tmp_path / "no-such-torchrun"), "--help"])
    assert status == 127 and stderr.startswith(f"cannot run {tmp_path / 'no-such-torchrun'}: No such file")


def test_every_policys_first_step_is_judged_on_its_own():
    rows = [*steady("equal"), *steady("adaptive", first=0.009), *steady("optimal", first=0.0055)]
    problems = first_use_spikes(trace(rows))
    assert len(problems) == 1 and problems[0].startswith(
        "adaptive, rank 0: first use of local batch 64 (step 0) took 1.80x"
    )


def test_sizes_with_too_few_rows_and_idle_ranks_are_not_judged():
    rows = [("equal", 0, 0, 8, 0.05), ("equal", 1, 0, 8, 0.005), ("equal", 0, 1, 0, 0.0), ("equal", 1, 1, 0, 0.0)]
    assert first_use_spikes(trace(rows)) == []


def test_each_use_is_over_its_sizes_median_and_a_size_that_took_no_time_has_none():
    timed = [("equal", k, 0, 64, t) for k, t in enumerate((0.008, 0.004, 0.005, 0.006))]  # median 0.0055
    untimed = [("equal", k, 1, 64, 0.0) for k in range(4)]  # a rank whose clock read 0 every time
    ((policy, worker, batch, steps, ratios, median),) = use_ratios(trace(timed + untimed))
    assert (policy, worker, batch, steps.tolist(), median) == ("equal", 0, 64, [0, 1, 2, 3], 0.0055)
    assert ratios.tolist() == [0.008 / 0.0055, 0.004 / 0.0055, 0.005 / 0.0055, 0.006 / 0.0055]


def test_memory_that_grows_is_flagged_and_flat_memory_is_not():
    """Each policy's last epoch's peak against its first's: a one-off rise within the first epoch
    is not growth, a later one is; CPU rank 0s (no peaks) and one-epoch policies are not judged."""
    epochs = pd.DataFrame(
        {
            "policy": ["equal"] * 3 + ["dynamic"] * 3 + ["cpu"] * 2 + ["once"],
            "epoch": [0, 1, 2, 2, 0, 1, 0, 1, 0],
            "device_peak_mb": [1200.0, 1210.0, 1250.0, 1800.0, 1000.0, 1400.0, None, None, 900.0],
        }
    )
    assert memory_growth(epochs) == ["dynamic: device memory grew from a peak of 1000 MB in its first epoch to "
                                     "1800 MB in its last"]  # fmt: skip
    assert memory_growth(epochs.drop(columns="device_peak_mb")) == []  # a folder written before the column


def test_a_run_writer_records_no_device_peak_without_cuda():
    from validation.record import device_peak_mb

    assert device_peak_mb() is None  # this process never used CUDA (the tests' machines have none)


def test_check_folder_reads_a_run_folders_trace(tmp_path):
    frame = trace(steady(first=0.008))
    write_trace_table(frame[["policy", "epoch", "step", "worker", "local_batch", "start_s", "compute_s", "wait_s",
                             "comm_s", "included"]], tmp_path / "trace.csv")  # fmt: skip
    problems = check_folder(tmp_path)
    assert len(problems) == 1 and "took 1.60x its median" in problems[0]


def test_the_delay_check_compares_the_two_paths(tmp_path):
    for name, compute in (("flat", 0.010), ("flat-delay", 0.030), ("ddp", 0.010), ("ddp-delay", 0.012)):
        folder = tmp_path / f"nccl-{name}"
        folder.mkdir()
        write_trace_table(trace([("equal", k, 0, 64, compute) for k in range(5)], comm_s=0.0), folder / "trace.csv")
    outcome = gpu_check.delay_check(tmp_path)
    assert not outcome.passed and outcome.detail == "flat +20.0 ms, ddp +2.0 ms (injected 20 ms)"


@pytest.mark.slow
def test_the_profiler_check_reads_a_real_runs_traces_back_and_fails_without_them(tmp_path):
    """profiler_check on a real DDP run with ``--profile 5`` (on the CPU here: the check reads
    the run folder, whatever the device): PASS with one row per profiled step; a run without
    traces: FAIL naming import-trace's error."""
    run = tmp_path / "nccl-ddp"
    argv = ["run", "--workload", "digits-cnn", "--world-size", "1", "--global-batch", "64", "--epochs", "1",
            "--policies", "equal", "--probe-repeats", "1", "--comm", "ddp", "--profile", "5",
            "--out", str(run)]  # fmt: skip
    assert subprocess.run([sys.executable, "-m", "validation", *argv], capture_output=True, cwd=ROOT).returncode == 0
    outcome = gpu_check.profiler_check(run)
    assert outcome.passed and outcome.detail == "5 steps imported from nccl-ddp's traces"
    rows = pd.read_csv(tmp_path / "nccl-ddp-imported.csv")
    assert len(rows) == 5 and (rows["compute_s"] > 0).all()
    trace = read_trace(run)  # the trace checks leave out the profiled steps, warm-up included: the profiler's cost
    kept = unprofiled(trace, run)
    assert kept["step"].min() == 6 and len(kept) == (trace["step"] >= 6).sum() and len(trace) > len(kept)
    bare = tmp_path / "bare"
    (bare / "profiler").mkdir(parents=True)
    failed = gpu_check.profiler_check(bare)
    assert not failed.passed and failed.detail.startswith("exit status 2: hetsim: error:")


def test_the_own_job_steps_after_a_failed_one_are_named_not_run(tmp_path, monkeypatch):
    """A failed profile leaves no scenario: the plan and the planned run are reported as not run
    (not as failures of their own on a missing file); a failed plan stops the run that needs it."""
    calls: list[str] = []

    def failing(command, argv):
        calls.append(command)
        return 1, "x: boom", 1.0

    monkeypatch.setattr(gpu_check, "run_validation", failing)
    outcomes = gpu_check.own_job_checks(tmp_path, n_gpus=2)
    assert calls == ["profile"]
    assert [(o.name, o.passed, o.detail) for o in outcomes] == [
        ("own-job-profile", False, "exit status 1: x: boom"),
        ("own-job-plan", False, "not run: own-job-profile failed"),
        ("own-job-example-nccl", False, "not run: own-job-profile failed"),
    ]
    ran: list[str] = []
    monkeypatch.setattr(gpu_check, "run_command", lambda argv, timeout_s=0: (ran.append(argv[-1]), (0, "", 1.0))[1])
    one = gpu_check.own_job_checks(tmp_path, n_gpus=1)  # one GPU: the example's --policy equal needs no profile
    assert [(o.name, o.passed) for o in one] == [("own-job-profile", False), ("own-job-plan", False),
                                                 ("own-job-example-nccl", True)]  # fmt: skip
    assert ran == [str(tmp_path / "run")]
    calls.clear()
    monkeypatch.setattr(gpu_check, "run_validation", lambda command, argv: (calls.append(command), (0, "", 1.0))[1])
    monkeypatch.setattr(gpu_check, "run_command", lambda argv, timeout_s=0: (calls.append(argv[2]), (2, "no", 1.0))[1])
    outcomes = gpu_check.own_job_checks(tmp_path, n_gpus=2)
    assert calls == ["profile", "hetsim"]  # the plan ran; torchrun did not
    assert [(o.name, o.passed) for o in outcomes] == [("own-job-profile", True), ("own-job-plan", False),
                                                      ("own-job-example-nccl", False)]  # fmt: skip
    assert outcomes[-1].detail == "not run: own-job-plan failed"
