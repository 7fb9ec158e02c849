"""validation with real process groups: 2 gloo ranks on this machine, a few seconds each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hetsim.model.trace import COLUMNS
from tests.test_documented_commands import SUBSTITUTE, VALIDATION_README, run_document
from validation import heartbeat
from validation.backend import free_port
from validation.cli import main
from validation.launch import child_pids, rank_environment

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]

# One rank: its uneven local batch of the digits, combined by the flat weighted all-reduce and by
# DDP with the trainer's loss scaling (a rank without samples runs one sample at weight zero),
# each combined gradient saved (both modes in one process group: one start-up of the ranks).
RANK_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import numpy as np, torch, torch.distributed as dist
    from validation.allreduce import combine, gradient_weights, pack, unpack
    from validation.ddp import ReadyClock, loss_scale, wrap
    from validation.workloads import load_workload
    workload = load_workload("digits-cnn")
    torch.set_num_threads(1)
    rank, out, modes = int(os.environ["RANK"]), sys.argv[2], sys.argv[3].split(",")
    cpu = torch.device("cpu")
    splits = [tuple(int(b) for b in s.split(",")) for s in sys.argv[1].split(";")]
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    try:
        data = workload.load(0, cpu)
        for mode, (k, split) in ((m, e) for m in modes for e in enumerate(splits)):
            model = workload.make_model(0, cpu)
            start = sum(split[:rank]); b = split[rank]
            weights = gradient_weights(split, True)
            if mode == "ddp":
                clock = ReadyClock(cpu)
                net = wrap(model, cpu, clock)
                clock.start(lambda: None)
                shard = slice(start, start + max(b, 1))
                loss = workload.loss(net(data.train_x[shard]), data.train_y[shard])
                (loss * loss_scale(weights, rank)).backward()
                assert clock.compute_s() > 0
            else:
                if b:
                    workload.loss(model(data.train_x[start:start + b]), data.train_y[start:start + b]).backward()
                flat = combine(pack(model.parameters(), weights[rank], cpu), sum(weights))
                unpack(flat, model.parameters())
            grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            np.save(f"{out}/{mode}-split{k}-rank{rank}.npy", grad.numpy())
    finally:
        dist.destroy_process_group()
    os._exit(0)  # as validation.train ends a rank: gloo's threads can abort the interpreter's teardown
    """
)


SPLITS = [(5, 13), (17, 1), (0, 18), (40, 88)]


def test_weighted_allreduce_equals_the_gradient_over_the_union(tmp_path):
    import torch

    from validation.workloads import load_workload

    workload = load_workload("digits-cnn")

    port = free_port()
    arg = ";".join(",".join(map(str, s)) for s in SPLITS)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, arg, str(tmp_path), "flat,ddp"],
            env=rank_environment(r, 2, port),
            cwd=ROOT,
        )
        for r in range(2)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    torch.set_num_threads(1)
    data = workload.load(0, torch.device("cpu"))
    for k, split in enumerate(SPLITS):
        model = workload.make_model(0, torch.device("cpu"))
        total = sum(split)
        workload.loss(model(data.train_x[:total]), data.train_y[:total]).backward()
        expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
        for mode in ("flat", "ddp"):
            for rank in range(2):
                got = np.load(tmp_path / f"{mode}-split{k}-rank{rank}.npy")
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=mode)


def _validation(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "validation", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_the_readme_runs_write_what_they_say_and_compare_reads_them(tmp_path, capsys):
    """validation/README.md's commands as tests/test_documented_commands.py runs them (that
    module leaves the document to this test: RUN_ELSEWHERE): a short run of two policies and its
    comparison, and the "Adding a workload" example by file and by plug-in name; then what the
    run folders hold, and ``compare``'s options on the first."""
    assert run_document(VALIDATION_README, tmp_path) == []
    out = tmp_path / "runs" / "validation-doc"
    trace = pd.read_parquet(out / "trace.parquet")
    assert tuple(trace.columns) == COLUMNS
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["backend"] == "gloo"
    # what the run is: the command as typed (not a rank's own), version, commit, seed in its config
    assert meta["command"] == SUBSTITUTE["python -m validation run"]
    assert meta["hetsim_version"] and "git_commit" in meta and meta["config"]["seed"] == 0
    policies = meta["policies"]
    assert policies == ["equal", "dynamic"] and list(dict.fromkeys(trace["policy"])) == ["probe", *policies]
    for name in policies:
        rows = trace[trace["policy"] == name]
        assert len(rows) == 2 * meta["steps_per_epoch"]  # one epoch on two ranks
        per_step = rows.groupby("step")["local_batch"].sum()
        assert (per_step == meta["global_batch"]).all()  # the split never drops a sample
        wall = rows["compute_s"] + rows["wait_s"] + rows["comm_s"]
        assert (wall > 0).all() and (rows["wait_s"] >= 0).all()
    assert len(pd.read_csv(out / "epochs.csv")) == len(policies)

    capsys.readouterr()
    assert main(["compare", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == policies
    for r in rows:
        assert {"policy", "measured_step_s", "predicted_step_s", "error"} <= set(r)
        assert r["measured_step_s"] > 0 and r["predicted_step_s"] > 0
    assert main(["compare", str(out), "--tolerance", "0"]) == 1
    assert main(["compare", str(out), "--calibrate-on", "equal"]) == 0
    assert "median |error|" in capsys.readouterr().out
    assert main(["compare", str(out), "--calibrate-on", "nope"]) == 2
    assert capsys.readouterr().err.startswith("validation: error: --calibrate-on")

    example = "examples/my_workload.py:WORKLOAD"  # the breast-cancer MLP, by file and by plug-in name
    for folder, workload in (("mine-file", example), ("mine-plugin", "breast-cancer-mlp")):
        meta = json.loads((tmp_path / "runs" / folder / "meta.json").read_text())
        assert (meta["status"], meta["workload"], meta["world_size"]) == ("complete", workload, 2)
        assert (meta["n_train"], meta["n_test"], meta["steps_per_epoch"], meta["parameters"]) == (455, 114, 7, 2242)
        (equal,) = json.loads((tmp_path / "runs" / folder / "summary.json").read_text())["policies"]
        assert (equal["policy"], equal["steps"], equal["final_batches"]) == ("equal", 7, [32, 32])
        assert equal["final_test_accuracy"] > 0.8


def test_a_dead_rank_fails_the_run_fast_and_keeps_the_trace(tmp_path):
    out = tmp_path / "run"
    # warm-up and probe steps, then equal: crash rank 1 in equal's second epoch. The process
    # group timeout is far longer than the run is allowed (the subprocess timeout), so the run
    # can only pass by noticing the dead peer, not by waiting out the timeout.
    run = _validation(
        "run",
        "--epochs",
        "3",
        "--policies",
        "equal",
        "--probe-repeats",
        "1",
        "--out",
        str(out),
        "--crash-at",
        "1=47",  # 17 warm-up (a probe round, 3 equal), 14 probe and 11 steps of equal's epoch 0 before: epoch 1, step 5
        "--timeout-s",
        "900",
        timeout=120,
    )
    assert run.returncode != 0
    assert "rank 1: injected crash" in run.stderr
    assert "validation: error: rank 1 failed first" in run.stderr
    assert "rank 0: failed during policy equal" in run.stderr
    trace = pd.read_csv(out / "trace.csv")
    assert set(trace["policy"]) == {"probe", "equal"}
    assert trace.loc[trace["policy"] == "equal", "epoch"].max() == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["failure"].startswith("rank 1 failed first (exit status 17)")


@pytest.mark.serial  # a wall-clock bound: named within heartbeat.STALE_S + 5 s
def test_a_stopped_rank_is_named_and_the_run_fails_within_seconds(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "validation", "run", "--epochs", "50", "--policies", "equal", "--probe-repeats",
               "1", "--out", str(out), "--timeout-s", "900"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (out / "trace.csv").exists():  # training has begun
        time.sleep(0.05)
    ranks = child_pids(proc.pid)
    assert len(ranks) == 2
    os.kill(ranks[1], signal.SIGSTOP)  # rank 1 hangs; the collective timeout is 900 s
    stopped_at = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert time.monotonic() - stopped_at < heartbeat.STALE_S + 5
    assert "rank 1 failed first (stopped responding" in err and "terminate called" not in err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "failed" and "rank 1" in meta["failure"]


def test_torchrun_entry(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [
            str(torchrun),
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "validation.train",
            "--epochs",
            "1",
            "--policies",
            "equal",
            "--probe-repeats",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads((out / "meta.json").read_text())["status"] == "complete"


SLOW_POLICY = """
import time
from hetsim.policies import Policy
from hetsim.core.registry import POLICIES


@POLICIES.register
class SlowToDecide(Policy):
    name = "slow-to-decide"

    def partition(self, info):
        time.sleep(0.05)
        return super().partition(info)
"""


# Not serial: its bounds are medians with an 8x margin (32 digits compute in about 5 ms here, the
# policy waits 50 ms), which another test's ranks on the same cores do not reach.
@pytest.mark.parametrize("comm", ["flat", "ddp"])
def test_the_split_broadcast_is_not_compute(tmp_path, comm):
    """Rank 0's policy takes 50 ms to decide every split: every rank waits for it in the
    broadcast, which the trace books as communication, never as compute."""
    plugin = tmp_path / "slow_policy.py"
    plugin.write_text(SLOW_POLICY, encoding="utf-8")
    out = tmp_path / "run"
    run = subprocess.run(
        [sys.executable, "-m", "validation", "run", "--epochs", "1", "--probe-repeats", "1", "--global-batch", "64",
         "--policies", "equal,slow-to-decide", "--comm", comm, "--delay", "1=0", "--per-sample-delay", "1=0",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "HETSIM_PLUGINS": str(plugin)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    trace = pd.read_parquet(out / "trace.parquet")
    fast, slow = (trace[trace["policy"] == name] for name in ("equal", "slow-to-decide"))
    assert slow["compute_s"].median() < 0.04  # 32 digits each: no 50 ms of waiting in it
    assert slow["comm_s"].min() >= 0.04 > fast["comm_s"].median()
    assert (slow["compute_s"] + slow["wait_s"] + slow["comm_s"]).min() >= 0.04  # each rank's wall time


def test_the_folder_lock_is_released_by_a_killed_holder(tmp_path):
    from hetsim.core.errors import ConfigError
    from hetsim.core.files import exclusive

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from hetsim.core.files import exclusive\n"
         "with exclusive(sys.argv[1], '--out'):\n    print('held', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    with pytest.raises(ConfigError, match="is in use by another run"):
        with exclusive(tmp_path, "--out"):
            pass
    holder.kill()
    holder.wait()
    with exclusive(tmp_path, "--out") as folder:  # the kernel let go of the dead holder's lock
        assert folder == tmp_path


@pytest.mark.serial  # measured against predicted time (within 50%): load that changes mid-run moves it
def test_time_to_target_is_measured_and_predicted(tmp_path, capsys):
    from validation.run_folder import load_run
    from validation.time_to_target import evaluated_steps, run_targets

    out = tmp_path / "run"
    run = _validation("run", "--epochs", "6", "--probe-repeats", "2", "--policies", "equal,adaptive", "--eval-every",
                      "3", "--noise-scale", "--target-accuracy", "0.5", "--out", str(out))  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    epochs, evals = pd.read_csv(out / "epochs.csv"), pd.read_csv(out / "evals.csv")
    trace = pd.read_parquet(out / "trace.parquet")
    per_epoch = json.loads((out / "meta.json").read_text())["steps_per_epoch"]  # 11: evaluated after 3, 6, 9, 11
    reached: dict[str, int] = {}  # policy -> its steps to the first evaluation that reached the target
    for entry in summary["policies"]:
        assert entry["noise_scale"] is not None and entry["noise_scale"] > 0
        rows = evals[evals["policy"] == entry["policy"]]
        within = [s for s in (3, 6, 9) if s < per_epoch] + [per_epoch]
        assert rows["step"].tolist() == [e * per_epoch + s for e in range(6) for s in within]
        flagged = evaluated_steps(np.repeat(np.arange(6), per_epoch), 3)  # where compare's prediction reads
        assert (np.flatnonzero(flagged) + 1).tolist() == rows["step"].tolist()
        ends = rows[rows["step"] % per_epoch == 0]  # the epochs' own evaluations, in both tables
        ours = epochs[epochs["policy"] == entry["policy"]]
        assert ends["test_accuracy"].tolist() == ours["test_accuracy"].tolist()
        assert ends["elapsed_s"].tolist() == ours["elapsed_s"].tolist()
        assert rows["elapsed_s"].is_monotonic_increasing  # measured step time only: the evaluations are outside
        steps = trace[(trace["policy"] == entry["policy"]) & (trace["worker"] == 0)]["step"]
        assert steps.tolist() == list(range(6 * per_epoch))  # blocks between evaluations lose no step
        first = rows[rows["test_accuracy"] >= 0.5].iloc[0]
        assert entry["time_to_target_s"] == pytest.approx(first["elapsed_s"])
        reached[entry["policy"]] = int(first["step"])
    assert main(["compare", str(out), "--time-to-target", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    equal = next(r for r in rows if r["policy"] == "equal")
    assert equal["measured_time_to_target_s"] == pytest.approx(summary["policies"][0]["time_to_target_s"])
    assert equal["predicted_time_to_target_s"] is not None
    # the model, its target fitted to equal's own steps, reaches it at the evaluation the run did:
    # the prediction is that many steps at the predicted step time (the simulation's noise moves
    # it a little). Its error is then the step time's and the first steps' against the run's
    # mean: -11% to +23% in these short digits runs on a quiet machine, once 38%
    steps = reached["equal"]
    assert run_targets(load_run(out))[2] == steps  # the target's steps: equal's, to its evaluation, exactly
    assert equal["predicted_time_to_target_s"] == pytest.approx(steps * equal["predicted_step_s"], rel=0.05)
    assert abs(equal["time_to_target_error"]) < 0.5
    assert main(["compare", str(out), "--time-to-target", "--calibrate-on", "nope"]) == 2
    # a run without --target-accuracy: tests/test_bad_input_validation_compare.py


def test_goodput_given_an_efficiency_table_chooses_by_it(tmp_path, capsys):
    # a noise scale far above every batch: each sample counts in full, so the largest batches (the
    # delay each step pays spread over the most samples) win; the run's own stand-in (no
    # --noise-scale here: the global batch) chose 128-200. compare's twin is told the same table.
    # both ranks pay 30 ms a step (with the default's 2 ms on rank 1, 192 and 359 were a few percent
    # of throughput apart, and a clean clone on a busy machine chose 192; a delay on rank 1 alone is
    # avoided by leaving it out): by the probe's fits 359 then does about 50% more than 192
    table = tmp_path / "efficiency.toml"
    table.write_text("[workload.efficiency]\nnoise_scale = 1e7\nbase_batch = 128\n")
    out = tmp_path / "run"
    run = _validation("run", "--epochs", "1", "--probe-repeats", "2", "--policies", "goodput", "--efficiency",
                      str(table), "--max-batch", "359", "--delay", "0=0.03", "--delay", "1=0.03",
                      "--out", str(out))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert min(pd.read_csv(out / "epochs.csv")["global_batch"]) >= 256
    assert json.loads((out / "meta.json").read_text())["config"]["efficiency"]["noise_scale"] == 1e7
    assert main(["compare", str(out), "--json"]) == 0  # without the table: no noise scale estimate, status 2
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert sum(rows["goodput"]["predicted_final_split"]) >= 256


def test_goodput_runs_epochs_of_its_own_batch_and_compare_predicts_it(tmp_path, capsys):
    out = tmp_path / "run"
    run = _validation("run", "--epochs", "4", "--probe-repeats", "2", "--policies", "equal,goodput", "--noise-scale",
                      "--target-accuracy", "0.3", "--max-batch", "359", "--out", str(out))  # fmt: skip
    assert run.returncode == 0, run.stderr
    epochs = pd.read_csv(out / "epochs.csv")
    trace = pd.read_parquet(out / "trace.parquet")
    n_train = json.loads((out / "meta.json").read_text())["n_train"]
    goodput = epochs[epochs["policy"] == "goodput"]
    assert set(goodput["global_batch"]) <= set(range(128, 360))
    for row in goodput.itertuples():  # an epoch is one pass at the batch it began with
        steps = trace[(trace["policy"] == "goodput") & (trace["epoch"] == row.epoch)].groupby("step")["local_batch"]
        assert len(steps) == n_train // row.global_batch
        assert (steps.sum() == row.global_batch).all()
    assert set(epochs.loc[epochs["policy"] == "equal", "global_batch"]) == {128}
    probe = trace[trace["policy"] == "probe"].groupby("step")["local_batch"]
    assert set(probe.sum()) == {128, 359}  # goodput is told costs measured up to the batches it may choose
    assert main(["compare", str(out), "--time-to-target", "--json"]) == 0
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["goodput"]["predicted_step_s"] > 0
    measured = trace[trace["policy"] == "goodput"]["step"].nunique()
    assert rows["goodput"]["measured_total_s"] > 0 and measured < 4 * (n_train // 128) + 1
