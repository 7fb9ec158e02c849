"""The gradient noise scale of a real run, estimated online from the ranks' own uneven batches.

McCandlish et al. (2018, appendix A) estimate ``|G|^2`` (the true gradient's squared norm) and
``tr(S)`` (the per-sample gradient variance) from the squared norms of two mean gradients over
``b_small`` and ``b_big`` samples, since ``E |g_b|^2 = |G|^2 + tr(S) / b``:

    |G|^2 ~ (b_big |g_big|^2 - b_small |g_small|^2) / (b_big - b_small)
    tr(S) ~ (|g_small|^2 - |g_big|^2) / (1 / b_small - 1 / b_big)

In a data-parallel step every rank i already has its own mean gradient over ``b_i`` samples and
the combined one over ``B = sum_i b_i`` (with the weighted combine, exactly the mean over the
union), so each rank with ``0 < b_i < B`` gives one such pair, at its own, uneven, batch.
:class:`NoiseScale` sums the estimates of a block of steps (an epoch) and reports the ratio of
the sums, ``B_noise = tr(S) / |G|^2`` (a ratio of means, not a mean of ratios: each estimate
alone is noisy and may be negative). Pollux (Qiao et al. 2021) smooths the two the same way; a
policy that chooses its batch by the noise scale is fed running sums that halve every epoch
(:data:`EPOCH_DECAY`), so one epoch's noisy estimate does not swing its batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

EPOCH_DECAY = 0.5  # the running estimate a policy is fed keeps this much of the sums at each epoch's end


def pair_estimates(local_sq: float, local_batch: int, global_sq: float, global_batch: int) -> tuple[float, float]:
    """``(|G|^2, tr(S))`` from one rank's mean gradient and the step's combined one."""
    b, big = float(local_batch), float(global_batch)
    grad_sq = (big * global_sq - b * local_sq) / (big - b)
    trace = (local_sq - global_sq) / (1.0 / b - 1.0 / big)
    return grad_sq, trace


@dataclass
class NoiseScale:
    """Running sums of the estimates of a block of steps."""

    grad_sq: float = 0.0
    trace: float = 0.0
    pairs: int = 0

    def add_step(self, local_sq: Sequence[float], split: Sequence[int], global_sq: float) -> None:
        """One step: every rank's ``|g_i|^2`` and batch, and the combined ``|g_B|^2``."""
        total = int(sum(split))
        for sq, b in zip(local_sq, split):
            if 0 < b < total:
                g, t = pair_estimates(float(sq), int(b), global_sq, total)
                self.grad_sq, self.trace, self.pairs = self.grad_sq + g, self.trace + t, self.pairs + 1

    def decay(self, factor: float) -> None:
        """Scale the sums down by ``factor`` (a running estimate that forgets old epochs)."""
        self.grad_sq, self.trace = self.grad_sq * factor, self.trace * factor

    def merge(self, other: NoiseScale) -> None:
        """Add another block's sums to these."""
        self.grad_sq, self.trace = self.grad_sq + other.grad_sq, self.trace + other.trace
        self.pairs += other.pairs

    def value(self) -> float | None:
        """``B_noise`` in samples (None before any pair, or when the sums are not both positive)."""
        if self.pairs == 0 or self.grad_sq <= 0 or self.trace <= 0:
            return None
        return self.trace / self.grad_sq


def block_sums(steps: Iterable[tuple[Sequence[float] | None, Sequence[int], float]]) -> NoiseScale:
    """The sums of a block of steps, each ``(every rank's |g_i|^2, the split, |g_B|^2)``; steps
    without norms (no ``--noise-scale``, DDP, the plain-mean combine) are skipped."""
    sums = NoiseScale()
    for local_sq, split, global_sq in steps:
        if local_sq is not None:
            sums.add_step(local_sq, split, global_sq)
    return sums


def estimate(steps: Iterable[tuple[Sequence[float] | None, Sequence[int], float]]) -> float | None:
    """``B_noise`` from a block of steps (:func:`block_sums`)."""
    return block_sums(steps).value()
