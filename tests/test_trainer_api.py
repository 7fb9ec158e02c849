"""validation.uneven, the trainer as a library: the combined gradient of uneven shards (an empty
one included) under DDP and the flat all-reduce, the controller's splits against hetsim's policy
fed the same times, plan.json refusals, and the one-off costs kept out of a step's compute time
(issue 25 items 1 and 5)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hetsim.core.errors import ConfigError
from hetsim.policies import Equal, StepInfo, StepRecord, make_policy
from tests.test_documented_commands import OWN_JOB_DOC, run_document
from validation.backend import free_port
from validation.launch import rank_environment
from validation.uneven import PlanError, load_plan, planned_policy

ROOT = Path(__file__).resolve().parents[1]

# One rank: a small MLP on seeded random data; for each comm mode and split, a fresh model stepped
# once by UnevenStep (SGD with lr 0, so the parameters stay and .grad keeps the combined gradient);
# both modes in one process group (one start-up of the ranks).
GRADIENT_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import numpy as np, torch, torch.distributed as dist
    from hetsim.policies import StepInfo
    from validation.uneven import Controller, UnevenStep, rank_samples
    torch.set_num_threads(1)
    out, comms = sys.argv[2], sys.argv[3].split(",")
    splits = [tuple(int(b) for b in s.split(",")) for s in sys.argv[1].split(";")]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        g = torch.Generator().manual_seed(7)
        x, y = torch.randn(64, 12, generator=g), torch.randint(0, 3, (64,), generator=g)
        loss_of = lambda net, idx: torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
        perm = np.arange(64)
        for comm, (k, split) in ((c, e) for c in comms for e in enumerate(splits)):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
            stepper = UnevenStep(model, torch.optim.SGD(model.parameters(), lr=0.0), torch.device("cpu"), comm=comm)
            ctrl = Controller("fixed", None, sum(split))
            if k == 0 and comm == "ddp":  # primed: DDP's buckets rebuilt before the first timed step
                stepper.prime(loss_of, torch.arange(4))
                one = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(12, 3))
                one(x[:4]).sum().backward()  # one pass: the order is recorded, the rebuild waits for a forward
                rebuilt = [stepper.ddp._has_rebuilt_buckets, one._has_rebuilt_buckets]
                np.save(f"{out}/rebuilt-rank{rank}.npy", np.array(rebuilt))
            ctrl.step_with(stepper, StepInfo(0, 0, 0, 1), lambda s: rank_samples(perm, 0, s, rank), loss_of, split)
            grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            np.save(f"{out}/{comm}-split{k}-rank{rank}.npy", grad.numpy())
    finally:
        dist.destroy_process_group()
    os._exit(0)
    """
)

SPLITS = [(5, 13, 0), (0, 18, 7), (17, 1, 30), (0, 0, 9)]


def _ranks(script: str, args: list[str], world: int, timeout: float = 90) -> None:
    port = free_port()
    procs = [
        subprocess.Popen([sys.executable, "-c", script, *args], env=rank_environment(r, world, port), cwd=ROOT)
        for r in range(world)
    ]
    try:
        assert [p.wait(timeout=timeout) for p in procs] == [0] * world
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_the_combined_gradient_is_the_gradient_of_the_union(tmp_path):
    import torch

    arg = ";".join(",".join(map(str, s)) for s in SPLITS)
    _ranks(GRADIENT_SCRIPT, [arg, str(tmp_path), "flat,ddp"], world=3)
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(64, 12, generator=g), torch.randint(0, 3, (64,), generator=g)
    for k, split in enumerate(SPLITS):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        total = sum(split)
        torch.nn.functional.cross_entropy(model(x[:total]), y[:total]).backward()
        expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
        for comm in ("flat", "ddp"):
            for rank in range(3):
                got = np.load(tmp_path / f"{comm}-split{k}-rank{rank}.npy")
                np.testing.assert_allclose(
                    got, expected, rtol=0, atol=1e-5, err_msg=f"{comm}, split {split}, rank {rank}"
                )
    for rank in range(3):  # issue 25 item 5: two primed passes rebuild DDP's buckets (one, as before, does not)
        assert list(np.load(tmp_path / f"rebuilt-rank{rank}.npy")) == [True, False]


# Two ranks under each policy in turn through the Controller (one process group), rank 1 slower
# by an injected delay; rank 0 saves every step's split and every rank's compute time as the
# controller measured them, in a folder per policy.
CONTROLLER_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    import torch, torch.distributed as dist
    from hetsim.policies import make_policy
    from validation import uneven
    torch.set_num_threads(1)
    names = sys.argv[2].split(",")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        g = torch.Generator().manual_seed(3)
        x, y = torch.randn(256, 12, generator=g), torch.randint(0, 3, (256,), generator=g)
        loss_of = lambda net, idx: torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
        for name in names:
            out = f"{sys.argv[1]}/{name}"
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
            delay = (lambda b, s: time.sleep(0.002 + 4e-5 * b)) if rank == 1 else None
            stepper = uneven.UnevenStep(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.device("cpu"),
                                        comm="ddp", delay=delay)
            writer = uneven.open_run(out, {"policies": [name]})
            ctrl = uneven.Controller(name, make_policy(name), 64, writer)
            seen = []
            for epoch in range(3):
                results = uneven.train_epoch(ctrl, stepper, loss_of, seed=0, epoch=epoch, n_samples=256)
                seen += [[list(r.split), list(r.all_compute_s)] for r in results]
            writer.flush()
            if rank == 0:
                (__import__("pathlib").Path(out) / "seen.json").write_text(json.dumps(seen))
    finally:
        dist.destroy_process_group()
    os._exit(0)
    """
)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_the_controller_splits_as_hetsims_policy_fed_the_same_times(tmp_path):
    names = ("dynamic", "adaptive")
    _ranks(CONTROLLER_SCRIPT, [str(tmp_path), ",".join(names)], world=2)
    for name in names:
        seen = json.loads((tmp_path / name / "seen.json").read_text())
        policy = make_policy(name)
        policy.reset(2, 64)
        for step, (split, times) in enumerate(seen):
            info = StepInfo(step, step // 4, step % 4, 4)
            assert list(policy.partition(info)) == split, f"{name}, step {step}"
            policy.observe(StepRecord(info, tuple(split), tuple(times), tuple(b > 0 for b in split)))
        assert len({tuple(s) for s, _ in seen}) > 1, name  # the policy did re-split: the times reached it
        trace = pd.read_parquet(tmp_path / name / "trace.parquet")
        assert list(trace["local_batch"]) == [b for split, _ in seen for b in split]
        np.testing.assert_array_equal(trace["compute_s"], [t for _, times in seen for t in times])


def _plan(tmp_path: Path, split: list[int], workers: list[str] | None = None, **rec: object) -> Path:
    recommended = {"policy": "optimal", "split": split, "global_batch": sum(split), **rec}
    if workers is not None:
        recommended["workers"] = workers
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"recommended": recommended}), encoding="utf-8")
    return path


def test_a_plan_for_another_cluster_is_refused_in_one_line(tmp_path):
    path = _plan(tmp_path, [40, 40, 24, 24], ["a100#0", "a100#1", "t4#0", "t4#1"])
    with pytest.raises(PlanError) as err:
        load_plan(path, 2)
    message = str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, ConfigError)
    assert "\n" not in message
    assert message == (
        f"{path}:recommended.split: the plan is for 4 workers (a100#0, a100#1, t4#0, t4#1), "
        "this run has 2 ranks: plan for this cluster"
    )


@pytest.mark.parametrize(
    ("content", "start"),
    [
        ("{", ": cannot read a plan: JSONDecodeError"),
        ('{"policies": []}', ":recommended: missing"),
        ('{"recommended": {"policy": "nope", "split": [1, 1], "global_batch": 2}}', ":recommended.policy: "),
        (
            '{"recommended": {"policy": "async", "split": [1, 1], "global_batch": 2}}',
            ":recommended.policy: 'async' has no barrier, and this trainer waits for every rank each step: plan with "
            "--wait-for-all",
        ),
        (
            '{"recommended": {"policy": "backup", "split": [1, 1], "global_batch": 2}}',
            ":recommended.policy: 'backup' leaves the slowest gradients out",
        ),
        ('{"recommended": {"policy": "equal", "split": [1, 1], "global_batch": 3}}', ":recommended.split: "),
        ('{"recommended": {"policy": "equal", "split": [1, -1], "global_batch": 0}}', ":recommended.split: "),
    ],
)
def test_a_bad_plan_is_refused_naming_the_field(tmp_path, content, start):
    path = tmp_path / "plan.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PlanError) as err:
        load_plan(path, 2)
    assert str(err.value).startswith(f"{path}{start}"), str(err.value)
    assert "\n" not in str(err.value)


def test_a_plan_for_this_cluster_applies_its_split_with_its_policys_traits(tmp_path):
    choice = load_plan(_plan(tmp_path, [96, 32], ["fast", "slow"]), 2)
    assert (choice.policy, choice.split, choice.global_batch, choice.workers) == (
        "optimal",
        (96, 32),
        128,
        ("fast", "slow"),
    )
    policy = choice.make()
    policy.reset(2, 128)  # no costs needed: the plan's split is the one optimal chose from the profile
    assert policy.name == "optimal" and policy.weighted_gradients
    assert all(policy.partition(StepInfo(k, 0, k, 10)) == (96, 32) for k in range(3))
    assert planned_policy(Equal, (64, 64)).weighted_gradients is False
    resplitting = load_plan(_plan(tmp_path, [70, 58], policy="dynamic"), 2).make()
    assert resplitting.name == "dynamic" and resplitting.resplits  # learns its split from the run's times


# Issue 25 item 1: a workload whose loss sleeps ONE_OFF_S the first time this process sees a batch
# size (as cuDNN plans a new shape, or oneDNN a new primitive, only larger). dynamic proposes sizes
# that no warm-up ran; before, each such first use carried the sleep inside its compute_s.
ONE_OFF_S = 0.3
ONE_OFF_WORKLOAD = f"""
import time, torch
from torch import nn
from validation.workloads.base import Workload
SEEN = set()
def loss(output, labels):
    if torch.is_grad_enabled() and output.shape[0] not in SEEN:
        SEEN.add(output.shape[0])
        time.sleep({ONE_OFF_S})
    return nn.functional.cross_entropy(output, labels)
g = torch.Generator().manual_seed(0)
x, y = torch.randn(640, 12, generator=g), torch.randint(0, 3, (640,), generator=g)
W = Workload.from_parts("one-off", lambda: nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 3)),
                        (x[:512], y[:512]), (x[512:], y[512:]), loss)
"""


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.serial  # no step's measured compute near the one-off cost: another test's ranks would add to it
@pytest.mark.parametrize("comm", ["ddp"])  # the warming is the stepper's, before either path (flat: same code)
def test_a_new_local_batch_sizes_one_off_cost_is_outside_the_step(tmp_path, comm):
    workload = tmp_path / "one_off.py"
    workload.write_text(ONE_OFF_WORKLOAD, encoding="utf-8")
    out = tmp_path / "run"
    run = subprocess.run(
        [sys.executable, "-m", "validation", "run", "--workload", f"{workload}:W", "--comm", comm, "--epochs", "2",
         "--probe-repeats", "1", "--policies", "dynamic", "--global-batch", "64", "--delay", "1=0.004",
         "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    trace = pd.read_parquet(out / "trace.parquet")
    dynamic = trace[trace["policy"] == "dynamic"]
    assert dynamic["local_batch"].nunique() > 2  # it did try sizes the warm-up never ran
    slow = trace[trace["compute_s"] > 0.8 * ONE_OFF_S]
    assert slow.empty, slow[["policy", "step", "worker", "local_batch", "compute_s"]].to_string()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_your_own_job_profile_plan_train_compare(tmp_path):
    """The whole own-job path as docs/guide/own-job.md gives it (run here for that document:
    :data:`tests.test_documented_commands.RUN_ELSEWHERE`), on CPU ranks of different speed (rank 1
    emulating a device twice as slow), with the model defined in examples/train_your_model.py: ``validation profile``
    of that model, ``hetsim plan`` of the profile's scenario, the example under torchrun with the
    plan (a complete run folder, the plan's policy and, for a fixed split, its split), and
    ``validation compare`` of the run; a plan for 4 workers is refused by every rank before
    anything is written, one line, status 2."""
    if not Path(sys.executable).with_name("torchrun").exists():
        pytest.skip("torchrun not installed")
    assert run_document(OWN_JOB_DOC, tmp_path) == []
    prof, plan, out = (tmp_path / "runs" / name for name in ("own-prof", "own-prof/plan.json", "own-run"))
    global_batch = tomllib.loads((prof / "scenario.toml").read_text())["workload"]["global_batch"]
    recommended = json.loads(plan.read_text())["recommended"]
    assert sum(recommended["split"]) == recommended["global_batch"] == global_batch
    assert len(recommended["split"]) == 2
    assert json.loads((out / "meta.json").read_text())["status"] == "complete"
    tt, run = (json.loads((prof / name).read_text()) for name in ("plan-tt.json", "../own-run-tt/meta.json"))
    assert run["config"]["lr"] == pytest.approx(0.03 * (tt["recommended"]["global_batch"] / 16) ** 0.5)  # section 5
    trace = pd.read_parquet(out / "trace.parquet")
    assert set(trace["policy"]) == {"probe", recommended["policy"]}
    if recommended["policy"] in ("equal", "proportional", "optimal"):  # a fixed split runs as planned
        ranks = trace[trace["policy"] == recommended["policy"]].groupby("worker")["local_batch"].unique()
        assert [list(v) for v in ranks] == [[b] for b in recommended["split"]]
    other = _plan(tmp_path, [40, 40, 24, 24], ["a", "b", "c", "d"])
    refused = subprocess.run(
        [sys.executable, "examples/train_your_model.py", "--plan", str(other), "--out", str(tmp_path / "no")],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=rank_environment(0, 1, free_port()),
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"train_your_model: error: {other}:recommended.split: the plan is for 4 workers (a, b, c, d), "
        "this run has 1 rank: plan for this cluster"
    ]
    assert not (tmp_path / "no").exists()


EXAMPLE_REFUSALS = [
    (["--plan", ""], "--plan: an empty path: name the plan's file (hetsim plan --out)"),  # it trained without one
    (["--policy", "ksync"], "--policy: 'ksync' leaves the slowest gradients out, and this trainer waits for every "
     "rank each step: give a barrier policy (equal, proportional, dynamic, ...)"),
    (["--policy", "fastest"], "--policy: unknown policy 'fastest' (the barrier policies: equal, proportional, "
     "dynamic, dynamic-enhanced, optimal, adaptive)"),
    (["--slowdown", "1,2"], "--slowdown: 2 values for 1 ranks (one per rank, or RANK=VALUE items)"),
    (["--slowdown", "0=0.5"], "--slowdown: must be in [1, 1000], got 0.5"),
    (["--out", "{used}"], "--out: {used} exists and is not an empty folder: give a new one for this run"),
    (["--device", "cuda"], "--device: cuda:0 requested but CUDA is not available on this machine"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "line"), EXAMPLE_REFUSALS, ids=[" ".join(a) for a, _ in EXAMPLE_REFUSALS])
def test_the_examples_bad_options_are_refused_in_one_line(argv, line, tmp_path):
    """What a user gets wrong launching examples/train_your_model.py: a policy that does not wait
    for every rank, a slowdown for another world or below 1, a run folder that holds a run, a GPU
    on a machine without CUDA; one
    line, status 2, a used folder left as it was and no new one written."""
    if "cuda" in argv:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    used = tmp_path / "used"
    used.mkdir()
    (used / "meta.json").write_text("{}", encoding="utf-8")
    argv = [a.format(used=used) for a in argv]
    out = [] if "--out" in argv else ["--out", str(tmp_path / "run")]
    done = subprocess.run(
        [sys.executable, "examples/train_your_model.py", *argv, *out, "--epochs", "1"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=rank_environment(0, 1, free_port()),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    got = done.stderr.strip().splitlines()
    assert got and got[-1] == f"train_your_model: error: {line.format(used=used)}", got
    assert len(got) == 1 and not (tmp_path / "run").exists()
    assert [p.name for p in used.iterdir()] == ["meta.json"] and (used / "meta.json").read_text() == "{}"


@pytest.mark.slow  # about a second or more: out of make test-fast
def test_the_examples_plan_brings_its_own_policy_and_batch(tmp_path):
    done = subprocess.run(
        [sys.executable, "examples/train_your_model.py", "--plan", "p.json", "--policy", "equal", "--out", "x"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("error: --plan brings its policy and global batch: give --policy and --global-batch only without it")
    )


@pytest.mark.slow  # imports the trainer (torch.distributed, hetsim's policies): over a second
@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_made_before_the_first_step_trains_bit_for_bit_as_sgds_own(nesterov):
    """validation.trainer gives each segment's SGD its zero momentum buffers up front (so that no
    timed step grows the process's memory): the weights after three steps equal, bit for bit,
    those of SGD making them lazily; with dampening (where a zero buffer would differ) none is made."""
    import torch

    from validation.trainer import allocate_momentum

    def trained(early: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=nesterov)
        if early:
            allocate_momentum(optimizer)
            assert all(torch.count_nonzero(optimizer.state[p]["momentum_buffer"]) == 0 for p in model.parameters())
        data = torch.Generator().manual_seed(1)
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            model(torch.randn(4, 5, generator=data)).square().mean().backward()
            optimizer.step()
        return [p.detach().clone() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(trained(True), trained(False), strict=True))
    damped = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, momentum=0.9, dampening=0.5)
    allocate_momentum(damped)
    assert not damped.state
