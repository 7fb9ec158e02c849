"""The split across the ranks: :class:`Controller`, one per trace segment (a policy, or the probe).

Rank 0 holds the hetsim policy (any :class:`~hetsim.policies.Policy` object; the other ranks
hold none): before each step it feeds the policy the last step's measured compute times of
every rank (``observe``) and asks for the split (``partition``), and broadcasts it. Each
step's timing stays on its rank until :meth:`Controller.end_block`, where the ranks' times are
gathered (one ``all_gather_object`` per block, outside every step's time) and rank 0's writer
gets the trace rows (:func:`~validation.record.step_rows`), so a run folder of a user's own
script has the same trace as ``validation run``'s.

A policy that ``needs_costs`` (``proportional``, ``optimal``) gets each rank's cost curve
fitted from the probe's rows (:func:`~validation.probe.fit_probe`, read back from rank 0's
writer, which keeps them even without a run folder): run the probe first. One
that ``uses_costs`` (``goodput``) gets them when the probe has run, and does without otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hetsim.policies import Policy, RunHint, StepInfo, StepRecord, WorkerHint
from validation.record import NullWriter, RankTiming, RunWriter, step_rows
from validation.segment import StepResult
from validation.uneven.step import LossOf, UnevenStep

Writer = RunWriter | NullWriter


def default_comm_device() -> torch.device:
    """Where a collective's tensors live when the caller does not say: the CPU under gloo; under
    NCCL, which carries CUDA tensors only, the device the process group was bound to
    (``init_process_group(device_id=...)``), else torchrun's ``cuda:LOCAL_RANK`` (one rank per
    GPU; a rank that moved its model there without ``torch.cuda.set_device`` still has device 0
    as its current one)."""
    if dist.get_backend() != "nccl":
        return torch.device("cpu")
    bound = getattr(dist.group.WORLD, "bound_device_id", None)
    if bound is not None:
        return torch.device(bound)
    local = os.environ.get("LOCAL_RANK")
    return torch.device("cuda", int(local) if local is not None else torch.cuda.current_device())


class Controller:
    """The split of one trace segment named ``name`` (see the module's docstring). ``policy`` is
    only used on rank 0 (pass None elsewhere; rank 0 without one is for fixed splits, as the
    probe's). ``reset`` is called on the policy at the first step unless ``reset=False`` (a
    policy the caller has reset already). ``comm_device``: where its broadcasts' tensors live
    (default: :func:`default_comm_device`; give the model's device, as UnevenStep is given it)."""

    def __init__(
        self,
        name: str,
        policy: Policy | None,
        global_batch: int,
        writer: Writer | None = None,
        *,
        comm_device: torch.device | None = None,
        hints: Callable[[], tuple[WorkerHint, ...] | None] = lambda: None,
        run_hint: Callable[[], RunHint] = RunHint,
        reset: bool = True,
    ) -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.name, self.global_batch = name, global_batch
        self.policy = policy if self.rank == 0 else None
        self.writer: Writer = writer if writer is not None else NullWriter()
        self.comm_device = comm_device or default_comm_device()
        self._hints, self._run_hint, self._needs_reset = hints, run_hint, reset and self.policy is not None
        self.step = 0  # steps of this segment written to the trace so far
        self.elapsed_s = 0.0  # the segment's own elapsed step time (the trace's start_s)
        self.pending: list[StepRecord] = []
        self._block: list[tuple[StepInfo, StepResult]] = []

    # ------------------------------------------------------------------ rank 0's policy

    def start_policy(self) -> None:
        """Rank 0: reset the policy for this world and batch, with the probe's costs when it needs them."""
        if not self._needs_reset:
            return
        assert self.policy is not None
        hints = self._hints() if self.policy.reads_costs() else None
        if self.policy.needs_costs and hints is None:
            raise ValueError(f"policy {self.policy.name!r} needs each rank's costs: run the probe before it, "
                             "with the same writer (its rows are read back from it)")  # fmt: skip
        self.policy.reset(self.world, self.global_batch, hints, self._run_hint())
        self._needs_reset = False

    def flush(self) -> None:
        """Rank 0: feed the policy the steps it has not observed yet."""
        assert self.policy is not None
        self.start_policy()
        while self.pending:
            self.policy.observe(self.pending.pop(0))

    def propose(self, info: StepInfo) -> tuple[int, ...]:
        """Rank 0: the last steps' measurements to the policy, then its split of this step."""
        self.flush()
        assert self.policy is not None
        return tuple(int(b) for b in self.policy.partition(info))

    # ------------------------------------------------------------------ collectives

    def broadcast_split(self, propose: Callable[[], Sequence[int]]) -> tuple[int, ...]:
        """Rank 0's ``propose()`` onto every rank (``propose`` is only called on rank 0)."""
        split_t = torch.zeros(self.world, dtype=torch.int64, device=self.comm_device)
        if self.rank == 0:
            split = [int(b) for b in propose()]
            if len(split) != self.world or min(split) < 0:
                raise ValueError(f"split {split}: needs {self.world} local batches of at least 0")
            split_t.copy_(torch.as_tensor(split, dtype=torch.int64))
        dist.broadcast(split_t, src=0)
        return tuple(int(b) for b in split_t.tolist())

    def broadcast_global_batch(self) -> int:
        """Rank 0's policy's global batch now (one that ``varies_batch`` changes it) onto every rank."""
        batch_t = torch.tensor([self.global_batch], dtype=torch.int64, device=self.comm_device)
        if self.policy is not None:
            self.flush()
            batch_t[0] = int(self.policy.global_batch)
        dist.broadcast(batch_t, src=0)
        return int(batch_t.item())

    def gather_timings(self, local: Sequence[RankTiming]) -> list[list[RankTiming]]:
        """Per step, every rank's timing (on every rank)."""
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, [(t.compute_s, t.wait_s, t.comm_s) for t in local])
        return [[RankTiming(*gathered[r][k]) for r in range(self.world)] for k in range(len(local))]

    # ------------------------------------------------------------------ steps

    def step_with(
        self,
        stepper: UnevenStep,
        info: StepInfo,
        samples: Callable[[tuple[int, ...]], np.ndarray],
        loss_of: LossOf,
        fixed: Sequence[int] | None = None,
    ) -> StepResult:
        """One timed step of ``stepper`` with this segment's split (the policy's, or ``fixed``):
        the broadcast is inside the step's time, as every rank waits there for rank 0."""
        propose = (lambda: fixed) if fixed is not None else (lambda: self.propose(info))
        result = stepper.run(lambda: self.broadcast_split(propose), samples, loss_of)
        if self.policy is not None:
            included = tuple(b > 0 for b in result.split)
            self.pending.append(StepRecord(info, result.split, result.all_compute_s, included))
        self._block.append((info, result))
        return result

    def end_block(self) -> list[StepResult]:
        """Every rank: gather the block's times since the last call and hand rank 0's writer the
        trace rows (``start_s``: the segment's elapsed step time); the block's results."""
        block, self._block = self._block, []
        timings = self.gather_timings([result.timing for _, result in block])
        for (info, result), step_timings in zip(block, timings):
            rows = step_rows(self.name, info.epoch, self.step, self.elapsed_s, result.split, step_timings)
            self.writer.add_steps(rows)
            self.elapsed_s += min(r["compute_s"] + r["wait_s"] for r in rows) + rows[0]["comm_s"]
            self.step += 1
        return [result for _, result in block]
