"""What a rank's training loop keeps per trace segment and per step: :class:`Segment` (a
policy's model, optimizer and counters, or the probe's), :class:`Computed` (a rank's compute
phase) and :class:`StepResult` (one step as the rank measured it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from hetsim.policies import Policy, StepInfo, StepRecord
from validation.ddp import ReadyClock
from validation.noise_scale import NoiseScale
from validation.record import RankTiming


@dataclass
class Segment:
    """One trace segment (a policy, or the probe): its model, optimizer, counters and, on rank 0,
    the policy with the record it has not observed yet."""

    name: str
    model: torch.nn.Module
    net: torch.nn.Module  # what the forward pass calls: the model, or the model inside DDP
    clock: ReadyClock | None  # DDP's compute clock (None: the flat all-reduce)
    optimizer: torch.optim.Optimizer
    policy: Policy | None
    weighted: bool
    step: int = 0
    elapsed_s: float = 0.0
    pending: list[StepRecord] = field(default_factory=list)
    noise: NoiseScale = field(default_factory=NoiseScale)  # running noise-scale sums (rank 0's policy is fed them)

    def flush(self) -> None:
        """Rank 0: feed the policy the measurements it has not observed yet."""
        assert self.policy is not None
        while self.pending:
            self.policy.observe(self.pending.pop(0))

    def propose(self, info: StepInfo) -> Sequence[int]:
        """Rank 0: feed the policy the last step's measurements, then ask for this step's split."""
        self.flush()
        assert self.policy is not None
        return self.policy.partition(info)


@dataclass(frozen=True)
class Computed:
    """A rank's compute phase of one step: its time, its shard's summed loss and, on the flat
    path, the weighted gradient packed for the all-reduce."""

    compute_s: float
    loss_sum: float
    flat: torch.Tensor | None
    local_sq: float = 0.0  # |g_i|^2 of the rank's mean gradient (with --noise-scale; else 0)


@dataclass(frozen=True)
class StepResult:
    """One step as this rank measured it, with what the barrier told it of every rank."""

    split: tuple[int, ...]
    timing: RankTiming
    all_compute_s: tuple[float, ...]
    loss: float
    local_sq: tuple[float, ...] | None = None  # every rank's |g_i|^2 (--noise-scale, flat, weighted)
    global_sq: float = 0.0  # and |g_B|^2 of the combined gradient
