"""One rank of ``python -m validation profile``: ``python -m validation.profile_rank CONFIG.json
FOLDER``, started by the launcher (:func:`validation.launch.launch`, which keeps it on loopback
and supervises it) with the configuration :mod:`validation.profile` wrote.

A rank, in order: takes its threads and CPUs; joins the process group; finds the largest local
batch its device holds (:func:`~validation.profile_grid.back_off`; on a CPU that is its
``--max-batch``); waits for the others; measures its step-time curve on the adaptive grid
(:func:`~validation.profile_grid.run_grid`) until the shared deadline, ``--budget-s`` after
that common start, spending what the grid leaves on more repeats, round robin over the batches
measured, with blocks of the trainer's own steps at the split that balances every rank's table
in between (:meth:`Rank.fill_between_trainer_blocks`); waits for the others again; times the
all-reduce at several sizes up to the gradient's; and sends its results to rank 0, which writes
``FOLDER/result.json``. With ``--slowdown`` a rank emulates a slower device: each step sleeps
(factor - 1) times what it measured, as ``validation run --slowdown`` does.

**All ranks at once.** The devices are profiled concurrently, each rank running its own grid
until the same deadline, rather than one at a time: in a real run every rank computes at the
same time, and ranks that share a machine (its cores, memory bandwidth, a noisy neighbour, a
PCIe switch) slow each other down. A device profiled alone would look faster than it is in the
run the scenario predicts. Filling the budget with repeats keeps every rank busy until the
deadline, so none measures while its peers have already stopped. (A real run also waits at each
step's barrier, which a profile does not: the contention profiled is that of ranks that are
always busy, its upper end.)

**Output.** A rank prints nothing: its stderr goes to ``FOLDER/rank-R.log`` (the launcher's
caller prints one line). Bad input found here (a model that does not fit even at a local batch
of one, a budget too small for two batch sizes) is written to ``FOLDER/error-R.json`` as
``{"field", "problem"}`` and the rank exits with status 2; a failed collective (most often a
peer that exited) with status 1.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hetsim.core.errors import ConfigError
from hetsim.core.files import write_json
from validation import heartbeat
from validation.backend import (
    RankEnv,
    comm_device,
    exit_now,
    init_process_group,
    resolve_device,
    select_backend,
    torch_device,
)
from validation.placement import apply_placement, placement_in_effect
from validation.profile_config import ProfileConfig
from validation.profile_grid import BudgetTooSmall, DoesNotFit, GridPlanner, back_off, next_fill, run_grid, spread_rel
from validation.profile_measure import LR, MOMENTUM, Stepper, allreduce_sizes, free_memory, time_allreduce
from validation.profile_output import balanced_split, rank_table
from validation.workloads import load_workload

MAX_SAMPLES_FACTOR = 100  # extra repeats stop at this many times --repeats per batch (bounds profile.csv)
SLACK = 1.2  # a measurement is predicted to take this much more than its steps
TRAINER_SHARE = 0.2  # the trainer's steps, beside the budget, take at most this share of it
MAX_TRAINER_STEPS = 250  # and at most this many steps
TRAINER_BLOCKS = 4  # the trainer's steps come in this many blocks, spread over the budget's repeats


class Rank:
    """One rank's profile (see the module's docstring)."""

    def __init__(self, config: ProfileConfig, env: RankEnv, device: torch.device, backend: str) -> None:
        self.config, self.env, self.device, self.backend = config, env, device, backend
        self.where = f"rank {env.rank} ({config.devices[env.rank]})"
        self.doing = "start-up"
        self.samples: dict[int, list[float]] = {}

    def sync(self) -> None:
        dist.all_reduce(torch.zeros(1, device=comm_device(self.backend, self.device)))

    def run(self) -> dict[str, Any]:
        config, rank = self.config, self.env.rank
        stepper = Stepper(
            load_workload(config.workload), config.seed, self.device, rank, config.slowdown.get(rank, 1.0)
        )
        self.doing = "finding the largest local batch"
        try:
            cap, rough_s = back_off(stepper.fits, config.max_batch[rank])
        except DoesNotFit:
            problem = f"{stepper.workload.name} does not fit on {self.where} even at a local batch of 1 (out of memory)"
            raise ConfigError("--workload", problem) from None
        if cap < 2:
            raise ConfigError("--devices", f"{self.where} holds a local batch of 1 only: a curve needs two batch sizes")
        warm = stepper.fits(cap)  # the first step of all pays for one-time set-up: a second is a fairer estimate
        rough_s = min(rough_s, warm if warm is not None else rough_s)
        self.sync()
        deadline = time.perf_counter() + config.budget_s
        planner = GridPlanner(1, cap, rough={cap: rough_s})
        self.doing = "measuring step times"
        for batch in config.batches:  # fixed sizes (the benchmark's held-out ones) instead of the grid
            planner.record(batch, self.measure(stepper, planner, batch)[0])
        try:
            if not config.batches:
                steps = config.warmup + config.repeats
                run_grid(planner, lambda b: self.measure(stepper, planner, b), config.budget_s, steps)
        except BudgetTooSmall as exc:
            raise ConfigError("--budget-s", f"{self.where}: {exc}") from None
        in_step = self.fill_between_trainer_blocks(stepper, planner, deadline, cap)
        self.doing = "timing the all-reduce"
        self.sync()
        sizes = allreduce_sizes(stepper.gradient_bytes // 4) if self.env.world_size > 1 else []  # float32 elements
        allreduce = time_allreduce(sizes, comm_device(self.backend, self.device))
        return {
            "rank": rank,
            "device": config.devices[rank],
            "max_batch": cap,
            "parameters": stepper.parameters,
            "gradient_mb": stepper.gradient_bytes / 1e6,  # as the trainer all-reduces it
            "samples": {str(b): times for b, times in sorted(self.samples.items())},
            "allreduce": {str(size): times for size, times in allreduce.items()},
            "in_step": in_step,
            "rows": stepper.rows,
            "placement": placement_in_effect(),
        }

    def fill_between_trainer_blocks(
        self, stepper: Stepper, planner: GridPlanner, deadline: float, cap: int
    ) -> dict[str, Any]:
        """The rest of the budget's repeats (:meth:`fill`) in ``TRAINER_BLOCKS`` parts ending at
        :func:`block_bounds`, each followed by a block of the trainer's steps (:meth:`trainer`;
        with two ranks or more), whose time moves the later bounds on: the budget is the table's,
        and the trainer's steps sample the same stretch of time as the table's repeats (a machine
        whose speed drifts moves both alike, so what a step adds to the compute is not read from
        its last seconds alone)."""
        if self.env.world_size < 2:
            self.fill(stepper, planner, deadline)
            return {"batch": 0, "comm_s": []}
        trainer, shift_s = None, 0.0
        for bound in block_bounds(deadline, self.config.budget_s):
            self.fill(stepper, planner, bound + shift_s)
            self.doing = "timing the trainer's steps"
            if trainer is None:
                trainer = self.trainer(stepper, cap)
            self.sync()
            t0 = time.perf_counter()  # a moment every rank shares, so the shift is the same on every rank
            trainer.block()
            shift_s += time.perf_counter() - t0
            self.doing = "measuring step times"
        assert trainer is not None
        return trainer.result()

    def trainer(self, stepper: Stepper, cap: int) -> TrainerSteps:
        """The trainer's own steps (:class:`TrainerSteps`) at the split that balances the ranks'
        measured tables (:func:`~validation.profile_output.balanced_split`): the exchange a step
        exposes depends on how the ranks arrive at it (at an uneven split the fast rank's side of
        it overlaps its wait), and the balanced split is the one a throughput plan runs."""
        self.sync()
        table = rank_table({str(b): t for b, t in self.samples.items()})
        gathered: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(gathered, (table, cap))  # every rank computes the same split from the same tables
        caps = [c for _, c in gathered]  # a GPU's back-off may leave them short of the global batch
        split = balanced_split([t for t, _ in gathered], min(self.config.global_batch, sum(caps)), caps)
        slowest_s = max(float(np.interp(b, *np.transpose(t))) for (t, _), b in zip(gathered, split) if b > 0)
        per_block = max(1, trainer_step_count(self.config, slowest_s) // TRAINER_BLOCKS)
        comm = comm_device(self.backend, self.device)
        return TrainerSteps(stepper, self.config, self.device, comm, split, per_block)

    def measure(self, stepper: Stepper, planner: GridPlanner, batch: int) -> tuple[float, float]:
        """Warm-up and repeats at a new batch: (median step time, time taken); the planner's
        tolerance follows the measurements' noise (the median relative half-width of their CIs)."""
        t0 = time.perf_counter()
        self.samples[batch] = stepper.measure(batch, self.config.warmup, self.config.repeats)
        planner.tolerance_rel = statistics.median(spread_rel(s) for s in self.samples.values())
        return statistics.median(self.samples[batch]), time.perf_counter() - t0

    def fill(self, stepper: Stepper, planner: GridPlanner, deadline: float) -> None:
        """Until the deadline: more repeats (after one warm-up step), round robin over the batches
        measured (:func:`~validation.profile_grid.next_fill`)."""
        repeats = self.config.repeats

        def fits(batch: int) -> bool:
            return time.perf_counter() + SLACK * (1 + repeats) * statistics.median(self.samples[batch]) <= deadline

        while (batch := next_fill(self.samples, MAX_SAMPLES_FACTOR * repeats, fits)) is not None:
            self.samples[batch] += stepper.measure(batch, 1, repeats)
            planner.record(batch, statistics.median(self.samples[batch]))


def block_bounds(deadline: float, budget_s: float) -> list[float]:
    """When each block of the trainer's steps starts, before the time the blocks before it took:
    at equal shares of the budget's end, the last at the ``deadline`` (the same on every rank,
    so that no rank measures alone while its peers wait in a block; a rank whose grid took
    longer starts its first block late, and the others wait for it there)."""
    return [deadline - (TRAINER_BLOCKS - 1 - k) * budget_s / TRAINER_BLOCKS for k in range(TRAINER_BLOCKS)]


def trainer_step_count(config: ProfileConfig, step_s: float) -> int:
    """How many of the trainer's steps to time: as many as fit in ``TRAINER_SHARE`` of the budget
    at the slowest rank's step time (the scenario's network comes from their mean step, and a
    step's time is spread: a few steps leave it to chance), between ``config.repeats`` and
    ``MAX_TRAINER_STEPS``."""
    fit = int(TRAINER_SHARE * config.budget_s / max(step_s, 1e-9))
    return max(config.repeats, min(MAX_TRAINER_STEPS, fit))


class TrainerSteps:
    """Blocks of the trainer that runs plans (:class:`validation.uneven.UnevenStep` with
    ``config.comm``, the fixed ``split``) on fresh copies of the model, each ``config.warmup``
    untimed steps and ``steps`` timed ones: each timed step's communication as the trainer records
    it (the split's broadcast, the gradients' exchange, the barrier, the optimizer's update;
    without the compute and the waiting for the slowest rank), this rank's compute, and the mean
    step time as a run's trace counts it (the slowest rank's compute and the communication)."""

    def __init__(
        self, stepper: Stepper, config: ProfileConfig, device: torch.device, comm: torch.device,
        split: tuple[int, ...], steps: int,
    ) -> None:  # fmt: skip
        from validation.uneven import Controller

        self.stepper, self.config, self.device, self.comm = stepper, config, device, comm
        self.ctrl = Controller("profile", None, sum(split), comm_device=comm)
        self.perm = np.resize(stepper.rng.permutation(stepper.data.n_train), sum(split))  # one step's samples, reused
        self.split, self.steps = split, steps
        self.comm_s: list[float] = []
        self.compute_s: list[float] = []
        self.step_s = 0.0  # the timed steps' time, as a run's trace counts it (every rank the same)

    def block(self) -> None:
        """One block, on a copy of the model made for it and freed after it: between blocks the
        profile's own steps run up to the largest batch the device holds without that copy."""
        from validation.uneven import UnevenStep, run_steps

        config, device = self.config, self.device
        model = self.stepper.workload.make_model(config.seed, device)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        step = UnevenStep(model, optimizer, device, comm=config.comm, comm_device=self.comm, delay=self.stepper.delay)
        for n, timed in ((config.warmup, False), (self.steps, True)):
            before_s = self.ctrl.elapsed_s
            results = run_steps(self.ctrl, step, 0, n, lambda k: (self.perm, 0), self.stepper.loss_of,
                                fixed=[self.split] * n)  # fmt: skip
            if timed:
                self.comm_s += [r.timing.comm_s for r in results]
                self.compute_s += [r.timing.compute_s for r in results]
                self.step_s += self.ctrl.elapsed_s - before_s
        del step, optimizer, model
        free_memory(device)

    def result(self) -> dict[str, Any]:
        return {
            "batch": self.split[dist.get_rank()],
            "split": list(self.split),
            "comm_s": self.comm_s,
            "compute_s": self.compute_s,
            "mean_step_s": self.step_s / max(len(self.comm_s), 1),
        }


def run_rank(config: ProfileConfig, env: RankEnv, folder: Path) -> None:
    """The rank's process group around :meth:`Rank.run`; rank 0 writes ``result.json``."""
    threads = config.threads.get(env.rank, 1)
    apply_placement(threads, config.cpus.get(env.rank))
    torch.set_num_threads(threads)
    device = torch_device(resolve_device(config.devices[env.rank], env.local_rank))
    backend = select_backend(config.devices)
    rank = Rank(config, env, device, backend)
    heartbeat.start(env.rank, lambda: rank.doing)
    init_process_group(backend, env, device, timeout_s=2 * config.budget_s + 60)
    try:
        result = rank.run()
        rank.doing = "sending the results"
        gathered: list[Any] = [None] * env.world_size
        dist.all_gather_object(gathered, result)
        if env.rank == 0:
            write_json(folder / "result.json", gathered)
        rank.sync()  # leave together: a rank tearing gloo down while a peer still talks to it aborts
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str]) -> int:
    """0 when done, 2 for bad input found here (``error-R.json``), 1 when a collective failed."""
    config_path, folder = Path(argv[0]), Path(argv[1])
    env = RankEnv.from_environ()
    if env is None:
        print("validation.profile_rank: start it with python -m validation profile", file=sys.stderr)
        return 2
    log = open(folder / f"rank-{env.rank}.log", "a", encoding="utf-8")
    os.dup2(log.fileno(), 2)
    try:
        run_rank(ProfileConfig.from_dict(_read(config_path)), env, folder)
    except ConfigError as exc:
        write_json(folder / f"error-{env.rank}.json", {"field": exc.field, "problem": exc.problem})
        return 2
    except (RuntimeError, OSError) as exc:
        print(f"validation: rank {env.rank}: failed: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def _read(path: Path) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
