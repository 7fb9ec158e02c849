"""One rank's measurements for ``validation profile``: its step time at a local batch, the
largest local batch its device holds, and the all-reduce between the ranks.

**A step** is what a rank of a real run computes per step before the exchange, on the
workload's real data: the shard gathered from the training set (``rng``'s random samples),
forward and backward, between two device synchronisations (``torch.cuda.synchronize`` on a GPU:
its kernels run asynchronously); the trainer's ``compute_s`` times the same. The optimizer's
update (SGD with the run's momentum) follows, untimed: in the trainer it comes after the
exchange, and the trainer's steps, whose time beyond the compute is the scenario's network,
count it there (timed in both, a step would pay for it twice). The all-reduce is timed
on its own (:func:`time_allreduce`), not inside the step, so that the scenario can give it to
the network model; and then inside the trainer's own steps
(:class:`validation.profile_rank.TrainerSteps`), where it competes with compute for the cores.

**Out of memory.** A step that runs out of memory (``torch.cuda.OutOfMemoryError``, or the CPU
allocator's "can't allocate memory") is caught; its tensors are freed (after the ``except``
block: the traceback holds the frames that hold them) and CUDA's cache emptied, so a smaller
batch can be tried (:func:`validation.profile_grid.back_off`).

Every sample of every measurement, warm-ups included, is kept in ``rows`` for ``profile.csv``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from validation.allreduce import gradient_bytes
from validation.backend import synchronize
from validation.uneven.memory import keep_freed_memory
from validation.uneven.step import slowdown_delay
from validation.workloads.base import Workload

OOM_TEXT = ("out of memory", "can't allocate memory", "not enough memory")
LR, MOMENTUM = 0.05, 0.9  # the run's defaults (validation.config.RunConfig): the same update


def free_memory(device: torch.device) -> None:
    """Give back what freed tensors held: Python's cycles collected, and on a GPU the caching
    allocator's blocks returned (the next step's batch is sized without them)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in OOM_TEXT)


class Stepper:
    """A model, its optimizer and the workload's data on one device, and every timing taken."""

    def __init__(self, workload: Workload, seed: int, device: torch.device, rank: int, slowdown: float = 1.0) -> None:
        self.workload, self.device, self.rank = workload, device, rank
        self.delay = slowdown_delay(slowdown)  # an emulated slower device: validation run's --slowdown
        self.data = workload.load(seed, device)
        self.model = workload.make_model(seed, device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)
        keep_freed_memory()  # as UnevenStep does in the runs this profile predicts
        self.rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(rank + 1)[rank])
        self.rows: list[dict[str, Any]] = []

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def gradient_bytes(self) -> int:
        """What a step all-reduces (:func:`validation.allreduce.gradient_bytes`)."""
        return gradient_bytes(self.model.parameters())

    def step_s(self, batch: int) -> float:
        """One timed step of ``batch`` random training samples (see the module's docstring)."""
        n = self.data.n_train
        idx = torch.from_numpy(self.rng.choice(n, size=batch, replace=batch > n)).to(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        synchronize(self.device)
        t0 = time.perf_counter()
        self.loss_of(self.model, idx).backward()
        synchronize(self.device)
        if self.delay is not None:
            self.delay(batch, time.perf_counter() - t0)
        elapsed_s = time.perf_counter() - t0
        self.optimizer.step()  # after the exchange in the trainer, whose communication time counts it
        return elapsed_s

    def loss_of(self, net: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
        """The workload's mean loss of ``net`` over the training samples ``idx``."""
        return self.workload.loss(net(self.data.train_x[idx]), self.data.train_y[idx])

    def fits(self, batch: int) -> float | None:
        """One step's time at ``batch``, or None when the device ran out of memory."""
        failed = False
        try:
            time_s: float | None = self.step_s(batch)
        except (RuntimeError, MemoryError) as exc:
            if not is_out_of_memory(exc):
                raise
            failed, time_s = True, None
        if failed:
            self.optimizer.zero_grad(set_to_none=True)
            free_memory(self.device)
        self.rows.append(self.row("fit", batch, 0, float("nan") if time_s is None else time_s, fits=not failed))
        return time_s

    def measure(self, batch: int, warmup: int, repeats: int) -> list[float]:
        """``warmup`` untimed steps, then ``repeats`` timed ones: their times."""
        for k in range(warmup):
            self.rows.append(self.row("warmup", batch, k, self.step_s(batch)))
        times = [self.step_s(batch) for _ in range(repeats)]
        done = sum(1 for r in self.rows if r["kind"] == "step" and r["batch"] == batch)
        self.rows += [self.row("step", batch, done + k, t) for k, t in enumerate(times)]
        return times

    def row(self, kind: str, batch: int, repeat: int, seconds: float, fits: bool = True) -> dict[str, Any]:
        return {"rank": self.rank, "kind": kind, "batch": batch, "size_mb": float("nan"), "repeat": repeat,
                "seconds": seconds, "fits": fits}  # fmt: skip


def allreduce_sizes(numel: int) -> list[int]:
    """Buffer sizes (float32 elements) to time: one element (the latency), and 1/16, 1/4 and all
    of the gradient (the bandwidth), distinct and increasing."""
    return sorted({1, max(1, numel // 16), max(1, numel // 4), max(1, numel)})


def time_allreduce(
    sizes: Sequence[int], device: torch.device, warmup: int = 2, repeats: int = 9
) -> dict[int, list[float]]:
    """Per size, ``repeats`` timed all-reduces (SUM, float32) after ``warmup`` untimed ones, each
    started together (a one-element all-reduce first, as a barrier) and timed until this rank
    has the result."""
    out: dict[int, list[float]] = {}
    together = torch.zeros(1, device=device)
    for size in sizes:
        buf = torch.ones(size, dtype=torch.float32, device=device)
        times = []
        for k in range(warmup + repeats):
            dist.all_reduce(together)
            synchronize(device)
            t0 = time.perf_counter()
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            synchronize(device)
            if k >= warmup:
                times.append(time.perf_counter() - t0)
            buf.fill_(1.0)
        out[size] = times
    return out
