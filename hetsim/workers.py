"""The compute-time model of one worker.

    compute = (overhead_s + per_sample_s * b) * noise + delay        (b > 0)
    compute = 0                                                      (b = 0: the worker sits the step out)

``noise`` is a mean-1 multiplicative factor, ``delay`` an additive injected time (the paper's
sleep). Each worker draws from two streams of its own, one for noise and one for delay, one
number each per step, whether or not it got samples: the draws of a step never depend on the
split, so any two engines (and any two policies) see the same random numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsim.distributions import Constant, Distribution


@dataclass(frozen=True)
class WorkerSpec:
    """One worker (a ``[[workers]]`` entry with ``count = 1``)."""

    name: str
    overhead_s: float
    per_sample_s: float
    noise: Distribution = field(default_factory=lambda: Constant(1.0))
    delay: Distribution = field(default_factory=lambda: Constant(0.0))
    max_batch: int | None = None

    def compute_s(self, local_batch: int, noise: float, delay: float) -> float:
        """Compute time for ``local_batch`` samples given this step's noise and delay draws."""
        if local_batch <= 0:
            return 0.0
        return (self.overhead_s + self.per_sample_s * local_batch) * noise + delay

    def expected_compute_s(self, local_batch: int | float) -> float:
        if local_batch <= 0:
            return 0.0
        return (self.overhead_s + self.per_sample_s * local_batch) * self.noise.mean() + self.delay.mean()

    @property
    def expected_fixed_s(self) -> float:
        """Expected per-step cost that does not grow with the batch (overhead and delay)."""
        return self.overhead_s * self.noise.mean() + self.delay.mean()

    @property
    def expected_per_sample_s(self) -> float:
        return self.per_sample_s * self.noise.mean()

    @property
    def cap(self) -> float:
        return float("inf") if self.max_batch is None else float(self.max_batch)

    @property
    def is_deterministic(self) -> bool:
        return self.noise.is_constant and self.delay.is_constant

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "overhead_s": self.overhead_s,
            "per_sample_s": self.per_sample_s,
            "noise": self.noise.to_dict(),
            "delay": self.delay.to_dict(),
        }
        if self.max_batch is not None:
            out["max_batch"] = self.max_batch
        return out


@dataclass
class WorkerStreams:
    """The random streams of one worker, spawned from its ``SeedSequence``."""

    noise: np.random.Generator
    delay: np.random.Generator

    @classmethod
    def spawn(cls, seed: int, n_workers: int) -> list["WorkerStreams"]:
        """``SeedSequence(seed).spawn(n)``, then one child per stream of each worker."""
        streams = []
        for worker_seq in np.random.SeedSequence(seed).spawn(n_workers):
            noise_seq, delay_seq = worker_seq.spawn(2)
            streams.append(cls(np.random.default_rng(noise_seq), np.random.default_rng(delay_seq)))
        return streams
