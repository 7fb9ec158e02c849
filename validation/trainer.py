"""One rank's training loop: the schedule of a run, its steps, and what the trace records of them.

Owns :class:`RankTrainer` (inside the process group :mod:`validation.train` started): the trace
segments, one timed step, the probe's plan and schedule, and the writer every rank calls (rank
0's :class:`~validation.record.RunWriter` writes the run folder; :class:`NullWriter` elsewhere).

A rank runs, in order: unrecorded warm-up steps; the probe's first rounds (``policy = "probe"``,
:mod:`validation.probe`); then epoch by epoch, one epoch of each policy in turn (each from the
same initial weights, with its own model, optimizer and policy), the probe's other rounds
after them: every policy and the calibration see the same drift of machine load.

One step, as every rank sees it (all times from ``perf_counter``, after synchronising the
device on GPU):

    split   rank 0 asks the policy for the split and broadcasts it      -> comm_s (not compute:
            every rank waits here for rank 0's decision)
    compute the rank's shard of the epoch's permutation: forward, backward, injected delay
            flat: then the weighted gradient packed into one flat buffer -> compute_s
            ddp:  until the rank's last gradient bucket is ready (:mod:`validation.ddp`; CUDA
                  events on a GPU), the buckets' all-reduces overlapping the backward
    barrier a tiny all-reduce carrying every rank's compute_s and loss   -> wait_s (flat); with
            DDP the waiting happened inside backward and wait_s is the slowest rank's compute
            minus this rank's
    comm    flat: the gradient all-reduce and the division by the total weight; ddp: what was
            left of the bucket all-reduces; then the optimizer update   -> comm_s

so ``compute_s + wait_s + comm_s`` is the rank's own wall time of the step (the trace's rows,
:func:`~validation.record.step_rows`, add up to rank 0's). Rank 0 feeds the compute times to
``policy.observe`` before the next split. At the end of each epoch the ranks' times are
gathered to every rank; rank 0's writer evaluates the model on the held-out split, keeps the
rows and rewrites the run folder, the others' writers drop them. None of that is inside a step's
time. ``start_s`` is the segment's own elapsed step time, as in a simulated run of it alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hetsim.efficiency import Efficiency
from hetsim.partition import split_by_shares
from hetsim.policies import Policy, RunHint, StepInfo, StepRecord, WorkerHint, make_policy, policy_class
from validation.allreduce import combine, gradient_weights, pack, unpack
from validation.backend import RankEnv, comm_device, resolve_device, select_backend, synchronize, torch_device
from validation.config import RunConfig
from validation.ddp import ReadyClock, loss_scale, wrap
from validation.inject import Injector
from validation.noise_scale import EPOCH_DECAY, block_sums, estimate
from validation.placement import placement_in_effect
from validation.probe import PROBE, fit_probe, probe_round, probe_schedule
from validation.record import NullWriter, RankTiming, RunWriter, Writer, run_meta, step_rows
from validation.segment import Computed, Segment, StepResult
from validation.sharding import PROBE as PROBE_STREAM
from validation.sharding import WARMUP, epoch_permutation, local_indices, steps_per_epoch
from validation.workloads import load_workload
from validation.workloads.base import Dataset


class InjectedCrash(Exception):
    """The hidden ``--crash-at`` hook fired: the entry point ends the process as if it were killed."""

    def __init__(self, rank: int, run_step: int) -> None:
        super().__init__(f"rank {rank}: injected crash at run step {run_step}")


class RankTrainer:
    """One rank's share of the run. Only rank 0 holds policies; every rank calls its writer."""

    def __init__(self, config: RunConfig, env: RankEnv) -> None:
        self.config, self.env = config, env
        self.rank, self.world = env.rank, env.world_size
        self.backend = select_backend(config.devices)
        self.device = torch_device(resolve_device(config.devices[self.rank], env.local_rank))
        self.comm = comm_device(self.backend, self.device)
        self.workload = load_workload(config.workload)
        self.data: Dataset = self.workload.load(config.seed, self.device)
        self.steps_per_epoch = steps_per_epoch(self.data.n_train, config.global_batch)
        self.injector = Injector.for_rank(
            self.rank, self.world, config.seed, dict(config.delay), dict(config.per_sample_delay), dict(config.slowdown)
        )
        self.run_step = 0
        self.where = "start-up"
        self.writer: Writer = NullWriter()
        self.probe_hints: tuple[WorkerHint, ...] | None = None
        self.probe_run = RunHint()
        self.probe_noise: float | None = None

    # ------------------------------------------------------------------ collectives

    def sync_ranks(self) -> None:
        """An untimed rendezvous (between epochs)."""
        dist.all_reduce(torch.zeros(1, device=self.comm))

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Rank 0's weights onto every rank."""
        for p in model.parameters():
            buf = p.data.to(self.comm)
            dist.broadcast(buf, src=0)
            p.data.copy_(buf.to(p.device))

    def broadcast_split(self, propose: Callable[[], Sequence[int]]) -> tuple[int, ...]:
        """Rank 0's ``propose()`` onto every rank."""
        split_t = torch.zeros(self.world, dtype=torch.int64, device=self.comm)
        if self.rank == 0:
            split_t.copy_(torch.as_tensor(list(propose()), dtype=torch.int64))
        dist.broadcast(split_t, src=0)
        return tuple(int(b) for b in split_t.tolist())

    def gather_timings(self, local: list[RankTiming]) -> list[list[RankTiming]]:
        """Per step, every rank's timing (on every rank)."""
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, [(t.compute_s, t.wait_s, t.comm_s) for t in local])
        return [[RankTiming(*gathered[r][k]) for r in range(self.world)] for k in range(len(local))]

    # ------------------------------------------------------------------ one step

    def check_crash(self) -> None:
        """The hidden ``--crash-at RANK=STEP`` hook, before every step."""
        if self.config.crash_at is not None and self.config.crash_at == (self.rank, self.run_step):
            raise InjectedCrash(self.rank, self.run_step)

    def shard(self, perm: np.ndarray, step_in_epoch: int, split: tuple[int, ...]) -> torch.Tensor:
        """This rank's sample indices of the step (one sample, for DDP's zero-weighted pass, when it has none)."""
        idx = local_indices(perm, step_in_epoch, split, self.rank)
        return torch.from_numpy(idx if idx.size else perm[:1]).to(self.device)

    def backward_flat(self, seg: Segment, idx: torch.Tensor, b: int, weights: tuple[float, ...]) -> Computed:
        """Forward, backward and the injected delay, then the weighted gradient packed for one all-reduce."""
        loss_sum = 0.0
        t0 = time.perf_counter()
        if b > 0:
            loss = self.workload.loss(seg.net(self.data.train_x[idx]), self.data.train_y[idx])
            loss.backward()
            synchronize(self.device)
            self.injector.apply(b, time.perf_counter() - t0)
            loss_sum = float(loss.detach()) * b
        flat = pack(seg.model.parameters(), weights[self.rank], self.comm)
        weight = weights[self.rank]
        local_sq = float(flat.dot(flat)) / weight**2 if self.config.noise_scale and b > 0 and weight > 0 else 0.0
        synchronize(self.device)
        return Computed(time.perf_counter() - t0, loss_sum, flat, local_sq)

    def backward_ddp(self, seg: Segment, idx: torch.Tensor, b: int, weights: tuple[float, ...]) -> Computed:
        """Forward and backward inside DDP, the loss scaled so that DDP's average is the weighted
        combination; the compute time is the clock's (the rank's last bucket ready, delay included)."""
        t0 = time.perf_counter()
        clock = seg.clock
        assert clock is not None
        clock.start(lambda: self.injector.apply(b, time.perf_counter() - t0))
        loss = self.workload.loss(seg.net(self.data.train_x[idx]), self.data.train_y[idx])
        (loss * loss_scale(weights, self.rank)).backward()
        synchronize(self.device)
        return Computed(clock.compute_s(), float(loss.detach()) * b if b > 0 else 0.0, None)

    def step(
        self,
        seg: Segment,
        perm: np.ndarray,
        step_in_epoch: int,
        propose: Callable[[], Sequence[int]],
    ) -> StepResult:
        """One timed step (see the module's docstring); ``propose`` is only called on rank 0."""
        self.check_crash()
        self.run_step += 1
        synchronize(self.device)
        t_start = time.perf_counter()
        split = self.broadcast_split(propose)
        seg.optimizer.zero_grad(set_to_none=True)
        weights = gradient_weights(split, seg.weighted)
        backward = self.backward_ddp if seg.clock is not None else self.backward_flat
        done = backward(seg, self.shard(perm, step_in_epoch, split), split[self.rank], weights)
        t_ready = time.perf_counter()

        barrier = torch.zeros(2 * self.world + 1, dtype=torch.float64, device=self.comm)
        barrier[self.rank] = done.compute_s
        barrier[self.world] = done.loss_sum
        barrier[self.world + 1 + self.rank] = done.local_sq
        dist.all_reduce(barrier, op=dist.ReduceOp.SUM)
        synchronize(self.device)
        t_released = time.perf_counter()

        if done.flat is not None:
            unpack(combine(done.flat, sum(weights)), seg.model.parameters())
        seg.optimizer.step()
        synchronize(self.device)
        t_end = time.perf_counter()
        values = barrier.tolist()
        all_compute = tuple(values[: self.world])
        if done.flat is not None:  # flat: the barrier is where a rank waits for the slowest
            wait_s = t_released - t_ready
        else:  # DDP: the waiting happened inside backward; it is what the slowest rank's compute adds
            wait_s = max(all_compute) - done.compute_s
        comm_s = (t_end - t_start) - done.compute_s - wait_s  # the split's broadcast included: not compute
        noisy = self.config.noise_scale and done.flat is not None and seg.weighted
        return StepResult(
            split,
            RankTiming(done.compute_s, wait_s, comm_s),
            all_compute,
            values[self.world] / max(sum(split), 1),
            tuple(values[self.world + 1 :]) if noisy else None,
            float(done.flat.dot(done.flat)) if noisy and done.flat is not None else 0.0,  # after the step's time
        )

    # ------------------------------------------------------------------ segments

    def new_segment(self, name: str) -> Segment:
        """Fresh weights (rank 0's, broadcast), optimizer and, on rank 0, the policy."""
        config = self.config
        policy = self.make_policy(name) if self.rank == 0 and name != PROBE else None
        weighted = True
        if config.combine == "policy" and name != PROBE:
            weighted_t = torch.tensor([int(bool(policy.weighted_gradients)) if policy else 0], device=self.comm)
            dist.broadcast(weighted_t, src=0)
            weighted = bool(weighted_t.item())
        model = self.workload.make_model(config.seed, self.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
        clock = ReadyClock(self.device) if config.comm == "ddp" else None
        if clock is None:
            self.broadcast_parameters(model)
        net = model if clock is None else wrap(model, self.device, clock)  # DDP broadcasts them itself
        segment = Segment(name, model, net, clock, optimizer, policy, weighted)
        self.prime(segment)
        return segment

    def run_block(
        self,
        seg: Segment,
        epoch: int,
        n_steps: int,
        window: Callable[[int], tuple[np.ndarray, int]],
        fixed: Sequence[tuple[int, ...]] | None = None,
    ) -> list[StepResult]:
        """``n_steps`` steps of ``seg`` (splits from its policy, or ``fixed``), then the ranks'
        times gathered and the trace rows handed to the writer."""
        local: list[RankTiming] = []
        results: list[StepResult] = []
        label = "the probe" if seg.name == PROBE else f"policy {seg.name}"
        for k in range(n_steps):
            info = StepInfo(seg.step + k, epoch, k, n_steps)
            self.where = f"{label}, epoch {epoch}, step {info.step}"
            propose = (lambda s=fixed[k]: s) if fixed is not None else (lambda info=info: seg.propose(info))
            perm, step_in_epoch = window(k)
            result = self.step(seg, perm, step_in_epoch, propose)
            if seg.policy is not None:
                included = tuple(b > 0 for b in result.split)
                seg.pending.append(StepRecord(info, result.split, result.all_compute_s, included))
            local.append(result.timing)
            results.append(result)
        self.where = f"{seg.name}, end of epoch {epoch}"
        for k, (result, timings) in enumerate(zip(results, self.gather_timings(local))):
            rows = step_rows(seg.name, epoch, seg.step + k, seg.elapsed_s, result.split, timings)
            self.writer.add_steps(rows)
            seg.elapsed_s += min(r["compute_s"] + r["wait_s"] for r in rows) + rows[0]["comm_s"]
        seg.step += n_steps
        return results

    def run_probe_rounds(self, seg: Segment, rounds: int, epoch: int) -> None:
        """``rounds`` rounds of the probe's plan, each step on its own permutation of the probe stream."""
        if rounds <= 0:
            return
        plan = [
            split
            for _ in range(rounds)
            for split in probe_round(self.config.global_batch, self.world, self.config.probe_fractions)
        ]
        n, first = self.data.n_train, seg.step

        def window(k: int) -> tuple[np.ndarray, int]:
            return epoch_permutation(self.config.seed, first + k, n, PROBE_STREAM), 0

        results = self.run_block(seg, epoch, len(plan), window, plan)
        if self.probe_noise is None:  # the first rounds' estimate: goodput's noise scale until its own
            self.probe_noise = estimate((r.local_sq, r.split, r.global_sq) for r in results)
        self.writer.flush()
        self.sync_ranks()

    def run_policy_epoch(self, seg: Segment, epoch: int) -> None:
        """One epoch of ``seg``'s policy, then the held-out evaluation and the epoch's row."""
        perm = epoch_permutation(self.config.seed, epoch, self.data.n_train)
        batch = self.epoch_batch(seg)
        results = self.run_block(seg, epoch, self.data.n_train // batch, lambda k: (perm, k))
        sums = block_sums((r.local_sq, r.split, r.global_sq) for r in results)
        noise = sums.value()
        seg.noise.decay(EPOCH_DECAY)
        seg.noise.merge(sums)
        running = seg.noise.value()
        if seg.policy is not None and running is not None:
            seg.policy.observe_noise_scale(running)

        def row() -> dict[str, Any]:
            test_loss, accuracy = self.workload.evaluate(seg.model, self.data)
            return {
                "policy": seg.name,
                "epoch": epoch,
                "train_loss": float(np.mean([r.loss for r in results])),
                "test_loss": test_loss,
                "test_accuracy": accuracy,
                "elapsed_s": seg.elapsed_s,
                "split": "/".join(str(b) for b in results[-1].split),
                "global_batch": batch,
                "noise_scale": noise,
            }

        self.writer.add_epoch(row)  # rank 0's writer evaluates the model; the others' never call row
        self.writer.flush()
        self.sync_ranks()

    def make_policy(self, name: str) -> Policy:
        """Rank 0: a fresh policy, given the probe's costs when it needs them and what the probe
        measured of the run (:meth:`learn_from_probe`)."""
        config = self.config
        varies = policy_class(name).varies_batch
        policy = make_policy(name, {"max_batch": config.max_batch} if varies else None)
        policy.reset(self.world, config.global_batch, self.probe_hints if policy.needs_costs else None, self.probe_run)
        return policy

    def learn_from_probe(self) -> None:
        """From the probe's first rounds: each rank's affine cost, the median all-reduce and the
        noise scale (or, without an estimate, the global batch as a first guess, until a policy's
        first epoch measures one)."""
        frame, batch = self.writer.trace_frame(), self.config.global_batch
        self.probe_hints = fit_probe(frame, self.world)
        noise = self.probe_noise if self.probe_noise is not None else float(batch)
        self.probe_run = RunHint(float(frame["comm_s"].median()) if not frame.empty else 0.0, Efficiency(noise, batch))

    def epoch_batch(self, seg: Segment) -> int:
        """The global batch of ``seg``'s next epoch, from rank 0's policy (which has observed the
        last epoch); for a policy that varies it, every rank's learning rate follows it by the
        square-root rule, ``lr * sqrt(B / global_batch)`` (Krizhevsky 2014; Hoffer et al. 2017)."""
        if not policy_class(seg.name).varies_batch:
            return self.config.global_batch
        batch_t = torch.zeros(1, dtype=torch.int64, device=self.comm)
        if seg.policy is not None:
            seg.flush()
            batch_t[0] = seg.policy.global_batch
        dist.broadcast(batch_t, src=0)
        batch = int(batch_t.item())
        for group in seg.optimizer.param_groups:
            group["lr"] = self.config.lr * math.sqrt(batch / self.config.global_batch)
        return batch

    def warm_up(self, seg: Segment) -> None:
        """Unrecorded steps, each on its own permutation of the warm-up stream: one round of the
        probe's splits (every local batch size the probe will time, so the first timed step of
        a size does not pay for its first use), then ``warmup_steps`` on an equal split."""
        config = self.config
        plan = probe_round(config.global_batch, self.world, config.probe_fractions) if config.probe_repeats else []
        plan += [split_by_shares([1.0] * self.world, config.global_batch)] * config.warmup_steps
        for k, split in enumerate(plan):
            self.where = f"warm-up step {k}"
            perm = epoch_permutation(config.seed, k, self.data.n_train, WARMUP)
            self.step(seg, perm, 0, partial(tuple, split))

    def prime(self, seg: Segment) -> None:
        """One untimed forward and backward of a new segment's model with the loss scaled by zero
        (DDP builds its buckets in its first backward), gradients dropped, no update."""
        idx = torch.arange(min(self.config.global_batch, self.data.n_train), device=self.device)
        loss = self.workload.loss(seg.net(self.data.train_x[idx]), self.data.train_y[idx])
        (loss * 0.0).backward()
        seg.optimizer.zero_grad(set_to_none=True)

    def meta(self) -> dict[str, Any]:
        """The run's meta.json (before its ``status``); every rank calls it (it gathers what each
        rank really runs with: threads and CPUs)."""
        placements: list[Any] = [None] * self.world
        dist.all_gather_object(placements, placement_in_effect())
        model = self.workload.make_model(self.config.seed, torch.device("cpu"))
        return run_meta(self.config, self.backend, str(self.device), self.data, self.steps_per_epoch, model, placements)

    def run(self, out: Path) -> dict[str, Any]:
        """Warm-up; the probe's first rounds; then epoch by epoch, each policy's epoch in turn, the
        probe's remaining rounds spread evenly after the policies' epochs (so the calibration
        sees the machine's drift as the policies do). Returns the writer's summary (rank 0's
        per-policy summary; no policies on the other ranks)."""
        config = self.config
        meta = self.meta()
        self.writer = RunWriter(out, meta) if self.rank == 0 else NullWriter()
        probe = self.new_segment(PROBE)
        self.warm_up(probe)
        schedule = iter(probe_schedule(config.probe_repeats, config.epochs * len(config.policies)))
        self.run_probe_rounds(probe, next(schedule), 0)
        self.learn_from_probe()
        segments = [self.new_segment(name) for name in config.policies]
        for epoch in range(config.epochs):
            for seg in segments:
                self.run_policy_epoch(seg, epoch)
                self.run_probe_rounds(probe, next(schedule), epoch + 1)
        return self.writer.finish(config.policies)
