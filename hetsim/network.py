"""All-reduce cost models: how long the gradient exchange of one step takes.

A network model declares its parameters (named as in the scenario's ``[network]`` table,
whose ``kind`` picks the model) and has one hook, ``allreduce_s(n_workers, gradient_mb)``.
Sizes are decimal megabytes (1 MB = 1e6 bytes), bandwidths Gbit/s per link. One worker needs
no exchange. A new model subclasses :class:`NetworkModel` and registers with
``hetsim.registry.NETWORKS``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hetsim.params import FrozenPlugIn, Param
from hetsim.registry import NETWORKS

DEFAULT_KIND = "ring"  # a [network] table without ``kind``


class NetworkModel(FrozenPlugIn):
    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.name, **self.param_values()}


def _bytes_per_s(bandwidth_gbps: float) -> float:
    return bandwidth_gbps * 1e9 / 8.0


LINK_PARAMS = (
    Param("latency_s", default=2e-5, low=0.0, doc="per-message latency"),
    Param("bandwidth_gbps", default=100.0, low=0.0, low_open=True, doc="link bandwidth, Gbit/s"),
)


@NETWORKS.register
class Ring(NetworkModel):
    """Ring all-reduce (reduce-scatter + all-gather): 2(n-1) messages of size bytes/n in sequence.

    time = 2(n-1) * latency + 2(n-1)/n * bytes / bandwidth
    """

    name: ClassVar[str] = "ring"
    params = LINK_PARAMS
    latency_s: float
    bandwidth_gbps: float

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        if n_workers <= 1:
            return 0.0
        n = n_workers
        return 2 * (n - 1) * self.latency_s + 2 * (n - 1) / n * gradient_mb * 1e6 / _bytes_per_s(self.bandwidth_gbps)


@NETWORKS.register
class ParameterServer(NetworkModel):
    """One parameter server whose link carries every worker's push and pull in turn.

    time = 2 * latency + 2 * n * bytes / bandwidth  (the server's link is the bottleneck)
    """

    name: ClassVar[str] = "ps"
    params = LINK_PARAMS
    latency_s: float
    bandwidth_gbps: float

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        if n_workers <= 1:
            return 0.0
        return 2 * self.latency_s + 2 * n_workers * gradient_mb * 1e6 / _bytes_per_s(self.bandwidth_gbps)


@NETWORKS.register
class ConstantNetwork(NetworkModel):
    """A fixed exchange time per step, e.g. a measured one."""

    name: ClassVar[str] = "constant"
    params = (Param("time_s", low=0.0, doc="the exchange time of one step"),)
    time_s: float

    def allreduce_s(self, n_workers: int, gradient_mb: float) -> float:
        return 0.0 if n_workers <= 1 else self.time_s
