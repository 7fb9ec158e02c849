"""One rank's training loop: the schedule of a run, its steps, and what the trace records of them.

Owns :class:`RankTrainer` (inside the process group :mod:`validation.train` started): the run's
schedule of trace segments, the probe's schedule and what the probe teaches the policies, and
the writer every rank calls (rank 0's :class:`~validation.record.RunWriter` writes the run
folder; :class:`NullWriter` elsewhere). The steps themselves are :mod:`validation.uneven`'s, the
library a user's own script trains with: one trainer, not two (:class:`~validation.uneven.UnevenStep`
times a step, :class:`~validation.uneven.Controller` splits it and writes its rows).

A rank runs, in order: unrecorded warm-up steps; the probe's first rounds (``policy = "probe"``,
:mod:`validation.probe`); then epoch by epoch, one epoch of each policy in turn (each from the
same initial weights, with its own model, optimizer and policy), the probe's other rounds
after them: every policy and the calibration see the same drift of machine load.

One step, as every rank sees it (all times from ``perf_counter``, after synchronising the
device on GPU; :mod:`validation.uneven.step`):

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

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hetsim.model.efficiency import Efficiency, lr_factor
from hetsim.model.partition import split_by_shares
from hetsim.policies import Policy, RunHint, StepInfo, WorkerHint, make_policy, policy_class
from hetsim.scenario.config import make_efficiency
from validation.backend import RankEnv, comm_device, resolve_device, select_backend, torch_device
from validation.config import RunConfig
from validation.inject import Injector
from validation.noise_scale import EPOCH_DECAY, block_sums, estimate
from validation.placement import placement_in_effect
from validation.probe import PROBE, START_ROUNDS, fit_probe, probe_round, probe_schedule, told_costs
from validation.record import NullWriter, RunWriter, Writer, run_meta
from validation.segment import Segment, StepResult
from validation.sharding import WARMUP, epoch_permutation, local_indices, steps_per_epoch
from validation.uneven.control import Controller
from validation.uneven.profiling import StepProfiler, segment_profilers
from validation.uneven.run import probe_rounds, run_steps
from validation.uneven.step import UnevenStep
from validation.workloads import load_workload
from validation.workloads.base import Dataset


def allocate_momentum(optimizer: torch.optim.SGD) -> None:
    """Give every parameter its zero momentum buffer now rather than at the first update, where SGD
    makes it lazily (as a clone of the gradient). With no dampening the first update of a zero
    buffer, ``buf * momentum + grad``, is that clone bit for bit; made lazily, each segment's
    buffers (a ResNet-18's 45 MB) took memory that the next segment's first step would have
    reused, so that step grew the process and paid the kernel's page faults inside its compute
    (issue 25; validation/README.md, "Using the trainer in your own script")."""
    for group in optimizer.param_groups:
        if group["momentum"] == 0 or group["dampening"] != 0:
            continue
        for p in group["params"]:
            optimizer.state[p].setdefault("momentum_buffer", torch.zeros_like(p, memory_format=torch.preserve_format))


def release_gradients(seg: Segment) -> None:
    """Free the gradients ``seg``'s last step left (a step keeps them for its caller to read)
    when the run moves to another segment's model: kept, every other segment's first step found
    that memory taken, grew the process and paid the kernel's page faults inside its compute."""
    seg.stepper.optimizer.zero_grad(set_to_none=True)


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
        self.sizes: list[set[int]] = [set() for _ in range(self.world)]  # local batch sizes each rank has run
        self.profilers: dict[str, StepProfiler] = {}  # --profile: each policy's, used in its first epoch

    # ------------------------------------------------------------------ steps

    def sync_ranks(self) -> None:
        """An untimed rendezvous (between epochs)."""
        dist.all_reduce(torch.zeros(1, device=self.comm))

    def loss_of(self, net: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
        """The workload's mean loss over the training samples ``idx``, through ``net``."""
        return self.workload.loss(net(self.data.train_x[idx]), self.data.train_y[idx])

    def before_step(self, label: str) -> Callable[[StepInfo], None]:
        """What runs before every step of ``label``: where the heartbeat says the rank is, and the
        hidden ``--crash-at RANK=STEP`` hook."""

        def before(info: StepInfo) -> None:
            self.where = f"{label}, epoch {info.epoch}, step {info.step}"
            self.check_crash()
            self.run_step += 1

        return before

    def check_crash(self) -> None:
        """The hidden ``--crash-at RANK=STEP`` hook, before every step."""
        if self.config.crash_at is not None and self.config.crash_at == (self.rank, self.run_step):
            raise InjectedCrash(self.rank, self.run_step)

    # ------------------------------------------------------------------ segments

    def new_segment(self, name: str) -> Segment:
        """Fresh weights (rank 0's, broadcast), optimizer, stepper (primed) and controller with,
        on rank 0, the policy."""
        config = self.config
        policy = self.make_policy(name) if self.rank == 0 and name != PROBE else None
        weighted = True
        if config.combine == "policy" and name != PROBE:
            weighted_t = torch.tensor([int(bool(policy.weighted_gradients)) if policy else 0], device=self.comm)
            dist.broadcast(weighted_t, src=0)
            weighted = bool(weighted_t.item())
        model = self.workload.make_model(config.seed, self.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
        allocate_momentum(optimizer)
        stepper = UnevenStep(
            model, optimizer, self.device, comm=config.comm, comm_device=self.comm, weighted=weighted,
            delay=self.injector.apply, noise_scale=config.noise_scale, sizes=self.sizes,
        )  # fmt: skip
        ctrl = Controller(
            name, policy, config.global_batch, self.writer, comm_device=self.comm,
            hints=lambda: self.probe_hints, run_hint=lambda: self.probe_run,
        )  # fmt: skip
        stepper.prime(self.loss_of, torch.arange(min(config.global_batch, self.data.n_train), device=self.device))
        return Segment(name, stepper, ctrl)

    def run_probe_rounds(self, seg: Segment, rounds: int, epoch: int) -> None:
        """``rounds`` rounds of the probe's plan, each step on its own permutation of the probe stream."""
        if rounds <= 0:
            return
        config = self.config
        results = probe_rounds(
            seg.ctrl, seg.stepper, self.loss_of, seed=config.seed, epoch=epoch, n_samples=self.data.n_train,
            rounds=rounds, fractions=config.probe_fractions, before_step=self.before_step("the probe"),
            largest=self.probe_largest(),
        )  # fmt: skip
        release_gradients(seg)
        if self.probe_noise is None:  # the first rounds' estimate: goodput's noise scale until its own
            self.probe_noise = estimate((r.local_sq, r.split, r.global_sq) for r in results)
        self.writer.flush()
        self.sync_ranks()

    def run_policy_epoch(self, seg: Segment, epoch: int) -> None:
        """One epoch of ``seg``'s policy, then the held-out evaluation and the epoch's row."""
        perm = epoch_permutation(self.config.seed, epoch, self.data.n_train)
        batch = self.epoch_batch(seg)
        profiler = self.profilers.pop(seg.name, None)
        n = self.data.n_train // batch
        every = self.config.eval_every or n
        results: list[StepResult] = []
        for first in range(0, n, every):  # blocks of --eval-every steps, each but the last evaluated after
            results += run_steps(
                seg.ctrl, seg.stepper, epoch, min(every, n - first), lambda k: (perm, k), self.loss_of,
                before_step=self.before_step(f"policy {seg.name}"), profiler=profiler, first=first, per_epoch=n,
            )  # fmt: skip
            if first + every < n:
                self.where = f"{seg.name}, epoch {epoch}, the evaluation after step {seg.ctrl.step - 1}"
                self.writer.add_eval(self.eval_row(seg, epoch))
        release_gradients(seg)
        if profiler is not None:
            profiler.close()  # within one epoch: the evaluation and the probe's rounds are no step
        self.where = f"{seg.name}, end of epoch {epoch}"
        sums = block_sums((r.local_sq, r.split, r.global_sq) for r in results)
        noise = sums.value()
        seg.noise.decay(EPOCH_DECAY)
        seg.noise.merge(sums)
        running = seg.noise.value()
        if seg.policy is not None and running is not None and self.config.efficiency is None:
            seg.policy.observe_noise_scale(running)  # with a table given, the policy keeps the table's

        def row() -> dict[str, Any]:
            return {
                **self.eval_row(seg, epoch)(),
                "train_loss": float(np.mean([r.loss for r in results])),
                "split": "/".join(str(b) for b in results[-1].split),
                "global_batch": batch,
                "noise_scale": noise,
            }

        self.writer.add_epoch(row)  # rank 0's writer evaluates the model; the others' never call row
        self.writer.flush()
        self.sync_ranks()

    def eval_row(self, seg: Segment, epoch: int) -> Callable[[], dict[str, Any]]:
        """A held-out evaluation (the epoch's row starts from it; within an epoch, ``--eval-every``'s),
        made by rank 0's writer alone, between two steps: the next step's clock starts after it
        on rank 0, whose clock is the step's (:func:`~validation.record.step_rows`; the other
        ranks wait for it in the split's broadcast)."""

        def row() -> dict[str, Any]:
            test_loss, accuracy = self.workload.evaluate(seg.model, self.data)
            return {"policy": seg.name, "epoch": epoch, "elapsed_s": seg.ctrl.elapsed_s, "test_loss": test_loss,
                    "test_accuracy": accuracy}  # fmt: skip

        return row

    def make_policy(self, name: str) -> Policy:
        """Rank 0: a fresh policy (its controller resets it at its first step, with the probe's
        costs when it needs them and what the probe measured of the run: :meth:`learn_from_probe`)."""
        varies = policy_class(name).varies_batch
        return make_policy(name, {"max_batch": self.config.max_batch} if varies else None)

    def learn_from_probe(self) -> None:
        """From the probe's first rounds (:data:`~validation.probe.START_ROUNDS` of them): each
        rank's cost curve as ``compare`` fits it (:func:`~validation.probe.fit_probe`), where a
        policy of the run reads costs (the fit and scipy's import are a large part of rank 0's
        start, which the other ranks wait out); the median all-reduce; and the noise scale (or,
        without an estimate, the global batch as a first guess, until a policy's first epoch
        measures one)."""
        if self.rank != 0:  # only rank 0's policy decides; the others' writers keep no trace (nor import pandas)
            return
        frame, batch = self.writer.trace_frame(), self.config.global_batch
        if told_costs(self.config.policies):  # scipy's fits: not for equal or dynamic
            self.probe_hints = fit_probe(frame, self.world)
        noise = self.probe_noise if self.probe_noise is not None else float(batch)
        given = self.config.efficiency
        efficiency = make_efficiency(given) if given is not None else Efficiency(noise, batch)
        self.probe_run = RunHint(float(frame["comm_s"].median()) if not frame.empty else 0.0, efficiency)

    def probe_largest(self) -> int | None:
        """The largest global batch a policy of the run may choose (``--max-batch``; None when
        none varies the batch), whose fractions the probe measures too."""
        return self.config.max_batch if any(policy_class(p).varies_batch for p in self.config.policies) else None

    def epoch_batch(self, seg: Segment) -> int:
        """The global batch of ``seg``'s next epoch, from rank 0's policy (which has observed the
        last epoch); for a policy that varies it, every rank's learning rate follows it by the
        square-root rule, ``lr * sqrt(B / global_batch)`` (Krizhevsky 2014; Hoffer et al. 2017)."""
        if not policy_class(seg.name).varies_batch:
            return self.config.global_batch
        batch = seg.ctrl.broadcast_global_batch()
        for group in seg.stepper.optimizer.param_groups:
            group["lr"] = self.config.lr * lr_factor("sqrt", batch, self.config.global_batch)
        return batch

    def warm_up(self, seg: Segment) -> None:
        """Unrecorded steps, each on its own permutation of the warm-up stream: one round of the
        probe's splits, then ``warmup_steps`` on an equal split. (Each local batch size's first
        use is warmed by the stepper anyway, outside the step: :meth:`UnevenStep.warm`.)"""
        config = self.config
        plan = (probe_round(config.global_batch, self.world, config.probe_fractions, self.probe_largest())
                if config.probe_repeats else [])  # fmt: skip
        plan += [split_by_shares([1.0] * self.world, config.global_batch)] * config.warmup_steps
        before = self.before_step("warm-up")
        for k, split in enumerate(plan):
            before(StepInfo(k, 0, k, len(plan)))
            self.where = f"warm-up step {k}"
            perm = epoch_permutation(config.seed, k, self.data.n_train, WARMUP)
            seg.stepper.run(
                partial(seg.ctrl.broadcast_split, partial(tuple, split)), partial(self.shard, perm), self.loss_of
            )
        release_gradients(seg)

    def shard(self, perm: np.ndarray, split: tuple[int, ...]) -> np.ndarray:
        """This rank's samples of a warm-up step (the first step of ``perm``)."""
        return local_indices(perm, 0, split, self.rank)

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
        self.profilers = segment_profilers(out / "profiler", list(config.policies), self.rank, config.profile)
        probe = self.new_segment(PROBE)
        self.warm_up(probe)
        schedule = iter(probe_schedule(config.probe_repeats, config.epochs * len(config.policies), START_ROUNDS))
        self.run_probe_rounds(probe, next(schedule), 0)
        self.learn_from_probe()
        segments = [self.new_segment(name) for name in config.policies]
        for epoch in range(config.epochs):
            for seg in segments:
                self.run_policy_epoch(seg, epoch)
                self.run_probe_rounds(probe, next(schedule), epoch + 1)
        return self.writer.finish(config.policies)
