"""All-reduce cost models: how long the gradient exchange of one step takes.

A network model has one hook, ``allreduce_s(n_workers, gradient_mb)``. Sizes are decimal
megabytes (1 MB = 1e6 bytes), bandwidths Gbit/s per link. One worker needs no exchange.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class NetworkModel:
    kind: ClassVar[str] = ""

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)}}


def _bytes_per_s(bandwidth_gbps: float) -> float:
    return bandwidth_gbps * 1e9 / 8.0


@dataclass(frozen=True)
class Ring(NetworkModel):
    """Ring all-reduce (reduce-scatter + all-gather): 2(n-1) messages of size bytes/n in sequence.

    time = 2(n-1) * latency + 2(n-1)/n * bytes / bandwidth
    """

    kind: ClassVar[str] = "ring"
    latency_s: float = 2e-5
    bandwidth_gbps: float = 100.0

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        if n_workers <= 1:
            return 0.0
        n = n_workers
        return 2 * (n - 1) * self.latency_s + 2 * (n - 1) / n * gradient_mb * 1e6 / _bytes_per_s(self.bandwidth_gbps)


@dataclass(frozen=True)
class ParameterServer(NetworkModel):
    """One parameter server whose link carries every worker's push and pull in turn.

    time = 2 * latency + 2 * n * bytes / bandwidth  (the server's link is the bottleneck)
    """

    kind: ClassVar[str] = "ps"
    latency_s: float = 2e-5
    bandwidth_gbps: float = 100.0

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        if n_workers <= 1:
            return 0.0
        return 2 * self.latency_s + 2 * n_workers * gradient_mb * 1e6 / _bytes_per_s(self.bandwidth_gbps)


@dataclass(frozen=True)
class ConstantNetwork(NetworkModel):
    """A fixed exchange time per step, e.g. a measured one."""

    kind: ClassVar[str] = "constant"
    time_s: float = 0.0

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        return 0.0 if n_workers <= 1 else self.time_s


NETWORKS: dict[str, type[NetworkModel]] = {cls.kind: cls for cls in (Ring, ParameterServer, ConstantNetwork)}
