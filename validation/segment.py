"""What a rank's training loop keeps per trace segment and per step: :class:`Segment` (a
policy's stepper and controller, or the probe's), :class:`Computed` (a rank's compute phase)
and :class:`StepResult` (one step as the rank measured it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from hetsim.policies import Policy
from validation.noise_scale import NoiseScale
from validation.record import RankTiming

if TYPE_CHECKING:  # validation.uneven imports this module
    from validation.uneven.control import Controller
    from validation.uneven.step import UnevenStep


@dataclass
class Segment:
    """One trace segment (a policy, or the probe): its model and optimizer (in ``stepper``), its
    split and counters (in ``ctrl``; on rank 0 the policy) and its running noise-scale sums."""

    name: str
    stepper: UnevenStep
    ctrl: Controller
    noise: NoiseScale = field(default_factory=NoiseScale)  # running noise-scale sums (rank 0's policy is fed them)

    @property
    def model(self) -> torch.nn.Module:
        return self.stepper.model

    @property
    def policy(self) -> Policy | None:
        return self.ctrl.policy


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
    """One step as this rank measured it, with what the barrier told it of every rank: what
    :meth:`~validation.uneven.step.UnevenStep.run` returns."""

    split: tuple[int, ...]  # the step's local batches, rank by rank
    timing: RankTiming  # this rank's compute_s, wait_s (for the slowest rank) and comm_s
    all_compute_s: tuple[float, ...]  # every rank's compute_s, rank by rank
    loss: float  # the mean loss over the global batch (every rank's samples)
    local_sq: tuple[float, ...] | None = None  # every rank's |g_i|^2 (--noise-scale, flat, weighted)
    global_sq: float = 0.0  # and |g_B|^2 of the combined gradient
