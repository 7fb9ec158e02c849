"""One timed step of uneven data-parallel training on this rank: :class:`UnevenStep`.

It owns the model as the ranks train it (inside DDP with a :class:`~validation.ddp.ReadyClock`,
or bare for the flat all-reduce), its optimizer, and the step's mechanics, in order:

    decide   ``decide()`` returns the step's split (the controller's broadcast)   -> comm
    warm     a local batch size some rank has never run: every rank runs its own shard once,
             untimed and without an update, and the ranks meet; the step's clock then restarts
             (the broadcast's time kept), so a size's one-off cost (allocations, oneDNN and
             cuDNN plans per shape: issue 25 item 1) never lands in ``compute_s``
    compute  forward and backward of the rank's shard, the loss scaled so that the combined
             gradient is ``sum_i (b_i / B) g_i`` (:func:`weighted_loss`), the injected delay
             -> ``compute_s`` (DDP: until the rank's last bucket is ready, outside DDP's waits)
    barrier  one all-reduce carrying every rank's compute_s, loss and |g_i|^2   -> wait
    comm     flat: the gradient all-reduce and division; DDP: the rest of its buckets;
             then the optimizer's update                                          -> comm

A rank with no samples still takes part: under DDP it runs one sample with the loss scaled by
zero (every bucket's all-reduce needs every rank), on the flat path it adds a zero buffer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist

from hetsim.traces.kineto import UNTIMED
from validation.allreduce import combine, gradient_weights, pack, unpack
from validation.backend import synchronize
from validation.ddp import ReadyClock, loss_scale, wrap
from validation.record import RankTiming
from validation.segment import Computed, StepResult
from validation.uneven.memory import keep_freed_memory
from validation.workloads.checks import batch_dependence

# (net, sample indices) -> the mean loss over them; the indices (int64) are on the step's device already
LossOf = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
Delay = Callable[[int, float], object]  # (local batch, seconds computed so far): an injected sleep


def slowdown_delay(factor: float) -> Delay | None:
    """The ``delay`` of a rank that emulates a device ``factor`` times slower: after its forward
    and backward it sleeps ``factor - 1`` times their time, as ``validation run --slowdown`` and
    ``validation profile --slowdown`` do (None at a factor of 1: nothing to emulate)."""
    if not factor >= 1.0:
        raise ValueError(f"slowdown: must be at least 1, got {factor!r}")
    slow = float(factor) - 1.0

    def delay(local_batch: int, computed_s: float) -> None:
        if local_batch > 0:  # a rank with no samples computes nothing to slow down (as validation run's)
            time.sleep(slow * computed_s)

    return delay if slow > 0 else None


def rank_slowdown(text: str | None, rank: int, world: int, option: str = "--slowdown") -> float:
    """This rank's factor of ``text`` (:func:`slowdown_factors`; None: 1)."""
    return slowdown_factors(text, world, option).get(rank, 1.0)


def slowdown_factors(text: str | None, world: int, option: str = "--slowdown") -> dict[int, float]:
    """Every rank's factor of ``text`` as ``validation profile --slowdown`` takes it, rank -> factor
    (what :func:`~validation.record.script_meta` records): one factor per rank (``1,2``) or
    ``RANK=FACTOR`` items (``1=2``; a rank not named is 1, and absent here); None: none.
    ConfigError (one line naming ``option``) for a wrong count, a rank outside the world or a
    factor below 1."""
    from validation.profile_config import slowdowns

    return slowdowns(text, world, option)


def weighted_loss(loss: torch.Tensor, split: Sequence[int], rank: int, weighted: bool = True) -> torch.Tensor:
    """The loss to call ``backward`` on under DDP: ``loss`` (the mean over the rank's samples)
    scaled by ``W b_i / B``, so that DDP's average over the ``W`` ranks is ``sum_i (b_i / B) g_i``
    (with ``weighted=False``, the plain mean of the ranks that got samples). A rank with no
    samples gets scale 0: it takes part in the all-reduce with a zero gradient."""
    return loss * loss_scale(gradient_weights(split, weighted), rank)


def check_model(model: torch.nn.Module) -> None:
    """ValueError on ``model`` when a layer of it makes a rank's gradient depend on how the
    global batch is cut (BatchNorm, named): :class:`UnevenStep` refuses such a model, and a
    script can ask before its ranks meet (then :func:`~validation.uneven.run.refuse`)."""
    if (problem := batch_dependence(model)) is not None:
        raise ValueError(f"model: {problem}")


class UnevenStep:
    """This rank's model, optimizer and timed step (see the module's docstring).

    ``comm``: ``"ddp"`` (the model inside DistributedDataParallel, buckets overlapping the
    backward; its weights broadcast from rank 0 by DDP) or ``"flat"`` (one all-reduce of the
    packed weighted gradient after the backward; rank 0's weights broadcast here).
    ``comm_device``: where collective buffers live (the GPU under NCCL, else the CPU).
    ``sizes``: the local batch sizes each rank has run, shared by the steppers of one process
    (a size warmed by one model is warm for another of the same shape); a new one by default.
    ``keep_memory``: keep the memory a step frees in the process
    (:func:`~validation.uneven.memory.keep_freed_memory`, for the whole process), so that no
    step faults it back in from the kernel inside its compute time.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        *,
        comm: str = "ddp",
        comm_device: torch.device | None = None,
        weighted: bool = True,
        delay: Delay | None = None,
        noise_scale: bool = False,
        sizes: list[set[int]] | None = None,
        keep_memory: bool = True,
    ) -> None:
        if comm not in ("ddp", "flat"):
            raise ValueError(f"comm: must be 'ddp' or 'flat', got {comm!r}")
        check_model(model)  # before the ranks' first collective
        if keep_memory:
            keep_freed_memory()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.model, self.optimizer, self.device = model, optimizer, device
        self.comm_device = comm_device or (device if dist.get_backend() == "nccl" else torch.device("cpu"))
        self.weighted, self.noise_scale = weighted, noise_scale
        self.delay: Delay = delay or (lambda b, elapsed_s: None)
        self.sizes = sizes if sizes is not None else [set() for _ in range(self.world)]
        self.clock = ReadyClock(device) if comm == "ddp" else None
        if self.clock is None:
            self._broadcast_parameters()
        self.ddp = None if self.clock is None else wrap(model, device, self.clock)
        self.net: torch.nn.Module = model if self.ddp is None else self.ddp  # what the forward pass calls
        self.primed = False

    def _broadcast_parameters(self) -> None:
        for p in self.model.parameters():
            buf = p.data.to(self.comm_device)
            dist.broadcast(buf, src=0)
            p.data.copy_(buf.to(p.device))

    # ------------------------------------------------------------------ before the first step

    def prime(self, loss_of: LossOf, samples: torch.Tensor) -> None:
        """Untimed passes with the loss scaled by zero, gradients dropped, no update; every rank
        together. DDP records the order its gradients become ready in its first backward and
        rebuilds its buckets in the *next* forward (``Reducer::_rebuild_buckets``, called from
        ``DistributedDataParallel._pre_forward``: a broadcast of the bucket order plus new
        buckets), so two passes are needed to move the rebuild out of the first timed step
        (issue 25 item 5). The flat path needs one (the first use of the batch size)."""
        for _ in range(2 if self.clock is not None else 1):
            (loss_of(self.net, samples) * 0.0).backward()
            self.optimizer.zero_grad(set_to_none=True)
        for seen in self.sizes:
            seen.add(int(samples.numel()) if samples.dim() else 1)
        self.primed = True

    def _ran(self, b: int) -> int:
        """The batch a rank with ``b`` samples runs: 1 under DDP when it has none (its zero-weighted pass)."""
        return max(b, 1) if self.clock is not None else b

    def warm(self, split: Sequence[int], loss_of: LossOf, idx: torch.Tensor) -> bool:
        """When a rank's local batch size is new to it, every rank runs its own shard once without
        an update (DDP: under ``no_sync``, so no collective) and the ranks meet; True when they
        did. Every rank knows the split, so every rank takes the same branch."""
        new = [self._ran(b) for r, b in enumerate(split) if self._ran(b) > 0 and self._ran(b) not in self.sizes[r]]
        if not new:
            return False
        with torch.profiler.record_function(UNTIMED):  # a profiler's import leaves this step out (its time is not it)
            self._warm(split, loss_of, idx)
        return True

    def _warm(self, split: Sequence[int], loss_of: LossOf, idx: torch.Tensor) -> None:
        """The warm-up :meth:`warm` runs: this rank's pass where its size is new, then the ranks meet."""
        b = self._ran(split[self.rank])
        if b > 0 and b not in self.sizes[self.rank]:
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                with nullcontext() if self.ddp is None else self.ddp.no_sync():
                    loss_of(self.net, idx).backward()
            self.optimizer.zero_grad(set_to_none=True)
            synchronize(self.device)
        for r, size in enumerate(split):
            if self._ran(size) > 0:
                self.sizes[r].add(self._ran(size))
        dist.all_reduce(torch.zeros(1, device=self.comm_device))

    # ------------------------------------------------------------------ one step

    def _compute_flat(self, loss_of: LossOf, idx: torch.Tensor, b: int, weights: tuple[float, ...]) -> Computed:
        """Forward, backward and the injected delay, then the weighted gradient packed for one all-reduce."""
        loss_sum = 0.0
        t0 = time.perf_counter()
        if b > 0:
            loss = loss_of(self.net, idx)
            loss.backward()
            synchronize(self.device)
            self.delay(b, time.perf_counter() - t0)
            loss_sum = float(loss.detach()) * b
        weight = weights[self.rank]
        flat = pack(self.model.parameters(), weight, self.comm_device)
        local_sq = float(flat.dot(flat)) / weight**2 if self.noise_scale and b > 0 and weight > 0 else 0.0
        synchronize(self.device)
        return Computed(time.perf_counter() - t0, loss_sum, flat, local_sq)

    def _compute_ddp(self, loss_of: LossOf, idx: torch.Tensor, b: int, split: Sequence[int]) -> Computed:
        """Forward and backward inside DDP with the weighted loss; the compute time is the clock's
        (the rank's last bucket ready, the injected delay included)."""
        t0 = time.perf_counter()
        clock = self.clock
        assert clock is not None
        clock.start(lambda: self.delay(b, time.perf_counter() - t0))
        loss = loss_of(self.net, idx)
        weighted_loss(loss, split, self.rank, self.weighted).backward()
        synchronize(self.device)
        return Computed(clock.compute_s(), float(loss.detach()) * b if b > 0 else 0.0, None)

    def run(
        self, decide: Callable[[], Sequence[int]], samples: Callable[[tuple[int, ...]], np.ndarray], loss_of: LossOf
    ) -> StepResult:
        """One timed step: ``decide()`` gives the split (every rank the same), ``samples(split)``
        this rank's sample indices, ``loss_of(net, indices)`` the mean loss over them (the indices
        an int64 tensor on this step's device; a rank with no samples is given one, at weight 0)."""
        if not self.primed:
            self.prime(loss_of, torch.zeros(1, dtype=torch.int64, device=self.device))
        synchronize(self.device)
        t_start = time.perf_counter()
        split = tuple(int(b) for b in decide())
        decided_s = time.perf_counter() - t_start
        found = samples(split)
        b = split[self.rank]
        idx = torch.from_numpy(np.asarray(found) if b > 0 else np.zeros(1, dtype=np.int64)).to(self.device)
        if self.warm(split, loss_of, idx):
            t_start = time.perf_counter() - decided_s  # the warm-up is outside the step; the decision is not
        self.optimizer.zero_grad(set_to_none=True)
        weights = gradient_weights(split, self.weighted)
        if self.clock is not None:
            done = self._compute_ddp(loss_of, idx, b, split)
        else:
            done = self._compute_flat(loss_of, idx, b, weights)
        t_ready = time.perf_counter()
        values, t_released = self._barrier(done)
        if done.flat is not None:
            unpack(combine(done.flat, sum(weights)), self.model.parameters())
        self.optimizer.step()
        synchronize(self.device)
        return self._result(split, done, values, t_end=time.perf_counter(), t_start=t_start,
                            t_ready=t_ready, t_released=t_released)  # fmt: skip

    def _barrier(self, done: Computed) -> tuple[list[float], float]:
        """Every rank's compute_s and |g_i|^2, and the summed loss, in one all-reduce."""
        world = self.world
        barrier = torch.zeros(2 * world + 1, dtype=torch.float64, device=self.comm_device)
        barrier[self.rank] = done.compute_s
        barrier[world] = done.loss_sum
        barrier[world + 1 + self.rank] = done.local_sq
        dist.all_reduce(barrier, op=dist.ReduceOp.SUM)
        synchronize(self.device)
        return barrier.tolist(), time.perf_counter()

    def _result(self, split: tuple[int, ...], done: Computed, values: list[float], **t: float) -> StepResult:
        """The step as this rank measured it: compute, wait and comm add up to its wall time."""
        world = self.world
        all_compute = tuple(values[:world])
        if done.flat is not None:  # flat: the barrier is where a rank waits for the slowest
            wait_s = t["t_released"] - t["t_ready"]
        else:  # DDP: the waiting happened inside backward; it is what the slowest rank's compute adds
            wait_s = max(all_compute) - done.compute_s
        comm_s = (t["t_end"] - t["t_start"]) - done.compute_s - wait_s  # the split's broadcast included
        noisy = self.noise_scale and done.flat is not None and self.weighted
        return StepResult(
            split,
            RankTiming(done.compute_s, wait_s, comm_s),
            all_compute,
            values[world] / max(sum(split), 1),
            tuple(values[world + 1 :]) if noisy else None,
            float(done.flat.dot(done.flat)) if noisy and done.flat is not None else 0.0,  # after the step's time
        )
