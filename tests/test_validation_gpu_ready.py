"""The GPU path's fixes that can be checked without a GPU (issue 25): one rank per GPU refused up
front, the backend, a rank's failure reported with its whole reason and the right cause, the
stall guard, the GPU matrix per number of GPUs, the flat path's packing on CPU, DDP's clock
counting the injected delay, and the torch lower bound."""

from __future__ import annotations

import argparse
import re
import threading
import time
import tomllib
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from hetsim.core.errors import ConfigError
from validation import ddp, train
from validation.allreduce import gradient_bytes, pack, unpack
from validation.backend import check_one_rank_per_gpu, select_backend
from validation.cli import main as cli_main
from validation.config import build_config
from validation.matrix import gpu_runs, select
from validation.options import add_run_options
from validation.record import RankTiming, step_rows

ROOT = Path(__file__).resolve().parents[1]
NCCL_ERROR = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error, "
    "NCCL version 2.21.5\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
    "Last error:\n"
    "socket recv failed: Connection reset by peer\n"
    "Exception raised from checkForNCCLErrorsInternal at "
    "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2046\n"
    "frame #0: c10::Error::Error(...) + 0x96 (0x7f in libc10.so)\n"
)  # fmt: skip


def config(*argv: str, **kwargs):
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    return build_config(parser.parse_args(list(argv)), **kwargs)


@pytest.mark.parametrize(
    ("devices", "ranks"), [("cuda:0,cuda:0", "0 and 1"), ("cuda,cuda:0", "0 and 1"), ("cpu,cuda:1,cuda:1", "1 and 2")]
)
def test_two_ranks_on_one_gpu_are_refused_without_cuda(devices, ranks):
    world = str(devices.count(",") + 1)
    with pytest.raises(ConfigError, match=f"--devices: ranks {ranks} are both on cuda:"):
        config("--world-size", world, "--devices", devices)


def test_distinct_gpus_cpu_ranks_and_other_machines_are_accepted():
    check_one_rank_per_gpu(("cuda", "cuda", "cuda"))  # cuda:0, cuda:1, cuda:2
    check_one_rank_per_gpu(("cuda:0", "cpu", "cpu"))
    check_one_rank_per_gpu(("cuda:0", "cuda:0"), local_world_size=1)  # one rank per machine
    with pytest.raises(ConfigError):
        check_one_rank_per_gpu(("cuda", "cuda:0", "cuda", "cuda:0"), local_world_size=2)


def test_the_refusal_is_one_line_and_status_2_before_any_rank(capsys, tmp_path):
    out = tmp_path / "run"
    assert cli_main(["run", "--world-size", "2", "--devices", "cuda:0,cuda:0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["validation: error: --devices: ranks 0 and 1 are both on cuda:0: one rank per GPU "
                   "(put the others on other GPUs or on cpu)"]  # fmt: skip
    assert not out.exists()


def test_backend_nccl_only_when_every_rank_is_cuda():
    assert select_backend(("cuda:0",)) == "nccl"
    assert select_backend(("cuda", "cuda", "cuda")) == "nccl"
    assert select_backend(("cuda:0", "cpu", "cpu")) == "gloo"


def test_a_collective_failure_keeps_nccls_reason_without_the_stack():
    message = str(train.RankFailure(1, "policy equal, epoch 0, step 3", dist.DistBackendError(NCCL_ERROR)))
    assert message.startswith("rank 1: failed during policy equal, epoch 0, step 3: NCCL error in:")
    assert "Last error: | socket recv failed: Connection reset by peer" in message
    assert "frame #" not in message and "Exception raised from" not in message
    assert message.endswith("(another rank died or timed out)") and "\n" not in message


def test_out_of_memory_is_this_ranks_failure():
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB")
    failure = train.RankFailure(0, "warm-up step 2", oom)
    assert failure.own and "another rank died" not in str(failure)
    assert str(failure).endswith("(this rank ran out of device memory: a smaller --global-batch or share for it)")
    assert "Tried to allocate 2.00 GiB" in str(failure)
    assert not train.RankFailure(0, "x", RuntimeError("Connection closed by peer [127.0.0.1]:4242")).own
    assert train.RankFailure(0, "x", RuntimeError("mat1 and mat2 shapes cannot be multiplied")).own


def test_a_rank_that_failed_by_itself_exits_with_its_own_status(monkeypatch, capsys, tmp_path):
    def run_rank(config, env, out):
        raise train.RankFailure(env.rank, "warm-up step 0", torch.OutOfMemoryError("CUDA out of memory."))

    monkeypatch.setattr(train, "run_rank", run_rank)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert train.main(["--out", str(tmp_path / "r")]) == train.OWN_FAILURE != 1  # the launcher names it first
    assert "rank 0: failed during warm-up step 0: CUDA out of memory." in capsys.readouterr().err


def test_the_stall_guard_ends_a_rank_that_makes_no_progress(capsys):
    ended = threading.Event()
    codes = []
    thread = train.stall_guard(2, lambda: "policy equal, epoch 1, step 7", 0.05, poll_s=0.01,
                               end=lambda code: (codes.append(code), ended.set()))  # fmt: skip
    assert ended.wait(5.0)
    thread.join(1.0)
    assert codes == [1]
    line = capsys.readouterr().err.strip()
    assert line.startswith("validation: rank 2: failed during policy equal, epoch 1, step 7: no progress for 0.05 s")


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_the_stall_guard_leaves_a_rank_that_progresses():
    steps = iter(range(10**6))
    ended = []
    train.stall_guard(0, lambda: f"step {next(steps)}", 0.05, poll_s=0.01, end=ended.append)
    time.sleep(0.3)
    assert ended == []


@pytest.mark.parametrize("n_gpus", [1, 2, 4])
def test_the_gpu_matrix_follows_the_number_of_gpus(n_gpus):
    runs = {r.name: config(*r.argv) for r in gpu_runs(n_gpus)}
    assert all(r.gpus <= n_gpus for r in gpu_runs(n_gpus))
    nccl = {n: c for n, c in runs.items() if select_backend(c.devices) == "nccl"}
    assert any(c.comm == "ddp" for c in nccl.values()) and any(c.comm == "flat" for c in nccl.values())
    assert any(select_backend(c.devices) == "gloo" and "cpu" in c.devices for c in runs.values())
    if n_gpus >= 2:
        many = [c for c in nccl.values() if c.world_size == n_gpus]
        assert many and all(c.delay == {n_gpus - 1: "0.01"} and c.per_sample_delay == {} for c in many)
    else:
        assert all(c.world_size == 1 and c.contention for c in nccl.values())  # uneven by a busy host core
    quick = {r.name for r in select(quick=True, gpus=n_gpus)[0]}
    assert {"gpu-nccl-1", "gpu-nccl-1-ddp", "gpu-mixed"} <= quick  # matrix --quick --gpu runs NCCL on one GPU


def test_the_leave_out_configuration_is_quick_and_runs_the_min_max_policies():
    run = next(r for r in select(quick=True, gpus=0)[0] if r.name == "digits-leave-out")
    c = config(*run.argv)
    assert c.world_size == 3 and {"adaptive", "optimal"} <= set(c.policies)
    assert c.slowdown == {2: 10.0} and c.contention == {2: 0.7} and c.cpus == {2: (1,)}


def test_pack_on_cpu_scales_into_one_buffer_every_step_and_unpack_restores():
    """The CPU buffer is made once and refilled (a fresh 45 MB one cost each step its page faults)."""
    model = torch.nn.Linear(3, 2)
    for p in model.parameters():
        p.grad = torch.arange(p.numel(), dtype=torch.float32).view_as(p)
    first = pack(model.parameters(), 2.0, torch.device("cpu"))
    assert torch.equal(first, 2.0 * torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    model.weight.grad = -model.weight.grad
    second = pack(model.parameters(), 3.0, torch.device("cpu"))
    assert second.data_ptr() == first.data_ptr()
    assert torch.equal(second, 3.0 * torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    model.bias.grad = None
    unpack(second / 3.0, model.parameters())
    assert torch.equal(model.bias.grad, torch.arange(2, dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_pack_keeps_a_float64_gradient_whole_and_unpack_gives_each_parameter_its_own_type(dtype):
    """A float64 model's gradients were packed in float32 (1e-8 relative error where the weighted
    all-reduce is exact to 1e-16), and a rank with no samples (no .grad) got a float32 .grad that
    torch refuses on a float64 parameter; a half model packs in float32 and gets half back."""
    model = torch.nn.Linear(3, 2).to(dtype)
    for p in model.parameters():
        p.grad = (torch.arange(p.numel(), dtype=torch.float64).view_as(p) / 3.0).to(dtype)
    flat = pack(model.parameters(), 1.0, torch.device("cpu"))
    assert flat.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.equal(flat, torch.cat([p.grad.reshape(-1) for p in model.parameters()]).to(flat.dtype))
    for p in model.parameters():
        p.grad = None  # a rank whose shard was empty
    unpack(flat, model.parameters())
    assert model.weight.grad.dtype == dtype and model.bias.grad.dtype == dtype
    assert torch.equal(model.bias.grad, (torch.arange(2, dtype=torch.float64) / 3.0).to(dtype))
    # what a step all-reduces, in meta.json's gradient_mb and the profile's all-reduce sizes
    assert gradient_bytes(model.parameters()) == 8 * flat.element_size()  # 8 parameters


class LastBucket:
    def is_last(self) -> bool:
        return True


def test_ddps_clock_counts_the_whole_injected_delay(monkeypatch):
    monkeypatch.setattr(ddp, "allreduce_hook", lambda state, bucket: None)
    clock = ddp.ReadyClock(torch.device("cpu"))
    clock.start(lambda: time.sleep(0.03))
    clock.hook(None, LastBucket())  # type: ignore[arg-type]
    assert clock.compute_s() >= 0.03


def test_a_rank_without_samples_is_recorded_as_computing_its_one_sample_pass():
    # under DDP the rank runs one sample at weight 0: its time is compute, the rest of the step idle
    timings = [RankTiming(0.010, 0.0, 0.002), RankTiming(0.004, 0.006, 0.002)]
    rows = step_rows("optimal", 0, 5, 0.0, (128, 0), timings)
    assert rows[1]["local_batch"] == 0 and not rows[1]["included"]
    assert rows[1]["compute_s"] == 0.004
    assert rows[1]["wait_s"] == pytest.approx(0.006)


def test_torch_lower_bound_has_init_process_groups_device_id():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["validation"]
    torch_dep = next(d for d in deps if d.startswith("torch"))
    major, minor = map(int, re.search(r">=(\d+)\.(\d+)", torch_dep).groups())
    assert (major, minor) >= (2, 3)


def test_a_controllers_broadcasts_default_to_the_ranks_own_gpu_under_nccl(monkeypatch):
    """NCCL carries CUDA tensors only: the split's broadcasts go on the device the process group
    was bound to, else torchrun's cuda:LOCAL_RANK (a rank that moved its model there without
    set_device would have broadcast on cuda:0 with every other rank); gloo's on the CPU."""
    from types import SimpleNamespace

    import torch

    from validation.uneven import control

    def under(backend: str, bound: object) -> torch.device:
        fake = SimpleNamespace(
            get_backend=lambda: backend, group=SimpleNamespace(WORLD=SimpleNamespace(bound_device_id=bound))
        )
        monkeypatch.setattr(control, "dist", fake)
        return control.default_comm_device()

    monkeypatch.setenv("LOCAL_RANK", "2")
    assert under("gloo", None) == torch.device("cpu")
    assert under("nccl", torch.device("cuda", 3)) == torch.device("cuda", 3)
    assert under("nccl", None) == torch.device("cuda", 2)
