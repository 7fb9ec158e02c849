"""All-reduce cost models: how long the gradient exchange of one step takes.

A network model declares its parameters (named as in the scenario's ``[network]`` table,
whose ``kind`` picks the model) and has one hook, ``allreduce_s(n_workers, gradient_mb,
nodes=None)``. Sizes are decimal megabytes (1 MB = 1e6 bytes), bandwidths Gbit/s per link. One
worker needs no exchange. A new model subclasses :class:`NetworkModel` and registers with
``hetsim.core.registry.NETWORKS``.

Two traits, asked by the scenario, the engines and the analysis (never a model's name):

* ``uses_nodes``: the all-reduce depends on where the workers are. Every worker then names its
  ``node``, and the scenario passes ``nodes`` (how many workers each node holds, in order of
  first appearance) to ``allreduce_s`` and ``bucket_times``; a model without the trait is never
  given it (and may leave the argument out).
* :meth:`NetworkModel.update_link_s`: how long one ``async`` update's push-and-pull occupies a
  link every worker shares (``ps``: the server's link); the updates then queue for it, first
  come first served. None (the default): no shared link, and each update's exchange is the
  two-party all-reduce ``allreduce_s(2, gradient_mb)``, uncontended.

Overlap (the built-in models' optional ``buckets_mb`` and ``first_bucket_mb``), as PyTorch DDP
does it: the gradient is cut into buckets (the first of ``first_bucket_mb``, default
``min(1, buckets_mb)``; then ``buckets_mb`` each; the last holds the rest), produced during the
backward pass in that order (reverse layer order) at a uniform rate. The backward pass is the
last ``backward_fraction`` (a workload key, default 2/3) of each worker's compute, so worker i's
bucket k is ready at ``finish_i - compute_i * backward_fraction * (1 - C_k / gradient_mb)``,
``C_k`` the size of buckets 0..k (the last bucket is ready when the worker finishes). Bucket k's
all-reduce starts when every waited-for worker has produced it and bucket k-1's is done:
``s_k = max(ready_k, e_{k-1})``, ``e_k = s_k + allreduce_s(n, size_k)`` (``constant``: its share
``time_s * size_k / gradient_mb``); the step ends at ``e_{K-1}``. :class:`Buckets` holds the plan
and computes that end for both engines (:meth:`Buckets.exposed_s`) and the analysis
(:meth:`Buckets.end_s`). Without ``buckets_mb``, the whole all-reduce follows the barrier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import FrozenPlugIn, Param
from hetsim.core.registry import NETWORKS

Nodes = tuple[int, ...]  # how many workers each node holds
DEFAULT_KIND = "ring"  # a [network] table without ``kind``
DDP_FIRST_BUCKET_MB = 1.0  # DDP's first bucket (the default first_bucket_mb, at most buckets_mb)
MAX_BUCKETS = 10_000  # more buckets than this is a mistake in buckets_mb, not a model


@dataclass(frozen=True)
class Buckets:
    """The overlap plan of one scenario: every bucket's size, all-reduce time, and ``backlog``,
    the share of a worker's compute still to run when it has produced the bucket
    (``backward_fraction * (1 - C_k / gradient_mb)``, exactly 0 for the last)."""

    sizes_mb: tuple[float, ...]
    times_s: tuple[float, ...]
    backlog: tuple[float, ...]

    def exposed_s(self, finish_s: np.ndarray, compute_s: np.ndarray, waited: np.ndarray | None = None) -> np.ndarray:
        """The all-reduce time left after the barrier: the step's end minus the last waited-for
        finish. ``finish_s`` and ``compute_s`` are (..., workers): when each worker finished, from
        the step's start, and its compute time; ``waited`` marks the workers whose gradients the
        step waits for (None: all). Both engines call this with the same arrays, so their clocks
        agree to the last bit."""
        if waited is not None:
            finish_s = np.where(waited, finish_s, -np.inf)
        barrier_s = finish_s.max(axis=-1)
        end_s = np.full(np.shape(barrier_s), -np.inf)
        for time_s, backlog in zip(self.times_s, self.backlog):
            end_s = np.maximum(end_s, (finish_s - compute_s * backlog).max(axis=-1)) + time_s
        return end_s - barrier_s

    def end_s(self, barrier: Any) -> Any:
        """The step's end when every worker starts at 0 and the last waited-for one finishes at
        ``barrier`` (a worker's bucket k is then ready at ``finish * (1 - backlog_k)``, so bucket
        k is ready at ``barrier * (1 - backlog_k)``): ``max_k(barrier * (1 - backlog_k) +
        sum_{l >= k} time_l)``, increasing, convex and piecewise linear in ``barrier``."""
        b = np.asarray(barrier, dtype=float)
        tails = np.cumsum(self.times_s[::-1])[::-1]
        lines = b[..., None] * (1.0 - np.asarray(self.backlog)) + tails
        return lines.max(axis=-1)

    def envelope(self) -> list[tuple[float, float]]:
        """The pieces of :meth:`end_s` over ``barrier >= 0``: (where the piece starts, its
        slope), in order; the last piece has slope 1 and runs to infinity."""
        slopes = 1.0 - np.asarray(self.backlog)
        tails = np.cumsum(self.times_s[::-1])[::-1]
        hull: list[tuple[float, int]] = [(0.0, 0)]  # (start, line); slopes rise with k, tails fall
        for k in range(1, len(slopes)):
            if slopes[k] <= slopes[hull[-1][1]]:
                continue  # no steeper and no higher: never on top
            while hull:
                start, j = hull[-1]
                x = max(float((tails[j] - tails[k]) / (slopes[k] - slopes[j])), 0.0)  # k overtakes j
                if x > start:
                    break
                hull.pop()
            hull.append((x if hull else 0.0, k))
        return [(start, float(slopes[k])) for start, k in hull]


class NetworkModel(FrozenPlugIn):
    """The base of network plug-ins: the time of one all-reduce of the gradient among the workers
    (:meth:`allreduce_s`), and, for a step whose all-reduce overlaps the backward pass, the
    buckets it is sent in (:meth:`bucket_sizes`). Parameters are declared as for every plug-in."""

    uses_nodes: ClassVar[bool] = False  # the all-reduce depends on the workers' nodes (see the module docstring)

    def allreduce_s(self, n_workers: int, gradient_mb: float, nodes: Nodes | None = None) -> float:
        """The all-reduce of ``gradient_mb`` among ``n_workers``; ``nodes``: the workers on each
        node, given only to a model with ``uses_nodes``."""
        raise NotImplementedError

    def allreduce_among(self, n_workers: int, gradient_mb: float, nodes: Nodes | None) -> float:
        """``allreduce_s``, passing ``nodes`` only when there is a layout (a model without
        ``uses_nodes`` need not take the argument)."""
        time_s = float(self.allreduce_s(n_workers, gradient_mb) if nodes is None else
                       self.allreduce_s(n_workers, gradient_mb, nodes))  # fmt: skip
        return self._checked(time_s, "allreduce_s")

    def _checked(self, time_s: float, method: str) -> float:
        """``time_s``, what ``method`` gave, where it is a finite number >= 0 (a plug-in's nan
        stood the vector engine's clock still); else ConfigError on ``network``."""
        if not 0 <= time_s < math.inf:
            raise ConfigError(
                "network", f"{self.name}'s {method} gave {time_s!r} s: a time must be a finite number >= 0"
            )
        return time_s

    def update_link_s(self, gradient_mb: float) -> float | None:
        """How long one async update (push and pull of ``gradient_mb``) occupies a link that every
        worker shares, so that updates queue for it; None: no shared link (the default)."""
        return None

    def exchange_s(self, gradient_mb: float) -> float:
        """One async update's exchange when nothing queues: the shared link's time, or else the
        two-party all-reduce ``allreduce_s(2, gradient_mb)``."""
        link = self.update_link_s(gradient_mb)
        if link is None:
            return self._checked(float(self.allreduce_s(2, gradient_mb)), "allreduce_s")
        return self._checked(float(link), "update_link_s")

    def bucket_times(self, n_workers: int, sizes_mb: Sequence[float], nodes: Nodes | None = None) -> tuple[float, ...]:
        """Each bucket's all-reduce time (by default, each bucket is an all-reduce of its own)."""
        return tuple(self.allreduce_among(n_workers, s, nodes) for s in sizes_mb)

    def validate(self) -> None:
        if getattr(self, "first_bucket_mb", None) is not None and getattr(self, "buckets_mb", None) is None:
            raise ConfigError("first_bucket_mb", "needs buckets_mb (the size of the other buckets)")

    def bucket_sizes(self, gradient_mb: float) -> tuple[float, ...] | None:
        """The buckets' sizes for a gradient of ``gradient_mb``, in the order they are produced
        (None without ``buckets_mb``); ConfigError on the parameter when one is larger than the
        gradient."""
        size = getattr(self, "buckets_mb", None)
        if size is None:
            return None
        first = getattr(self, "first_bucket_mb", None)
        first = min(DDP_FIRST_BUCKET_MB, size) if first is None else first
        for key, value in (("buckets_mb", size), ("first_bucket_mb", first)):
            if value > gradient_mb:
                gradient = f"workload.gradient_mb = {gradient_mb:g}"
                raise ConfigError(key, f"{value:g} MB is larger than the gradient ({gradient})")
        if (gradient_mb - first) / size > MAX_BUCKETS:
            raise ConfigError("buckets_mb", f"cuts the gradient into more than {MAX_BUCKETS} buckets")
        sizes, rest = [first], gradient_mb - first
        while rest > 1e-9 * gradient_mb:  # a remainder of rounding error is no bucket
            sizes.append(min(size, rest))
            rest -= size
        return tuple(sizes)

    def buckets(
        self, n_workers: int, gradient_mb: float, backward_fraction: float, nodes: Nodes | None = None
    ) -> Buckets | None:
        """The overlap plan (None: the whole all-reduce after the barrier)."""
        sizes = self.bucket_sizes(gradient_mb)
        if sizes is None:
            return None
        done = np.cumsum(sizes) / gradient_mb  # the share of the gradient produced with bucket k
        backlog = [max(backward_fraction * (1.0 - float(c)), 0.0) for c in done[:-1]] + [0.0]
        times = self.bucket_times(n_workers, sizes) if nodes is None else self.bucket_times(n_workers, sizes, nodes)
        return Buckets(sizes, times, tuple(backlog))

    def to_dict(self) -> dict[str, Any]:
        """The ``[network]`` table (optional parameters left unset are left out)."""
        return {"kind": self.name, **{k: v for k, v in self.file_values().items() if v is not None}}


def _bytes_per_s(bandwidth_gbps: float) -> float:
    return bandwidth_gbps * 1e9 / 8.0


def _ring_s(n: int, gradient_mb: float, latency_s: float, bandwidth_gbps: float) -> float:
    """A ring all-reduce among ``n``: ``2(n-1) * latency + 2(n-1)/n * bytes / bandwidth``."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * latency_s + 2 * (n - 1) / n * gradient_mb * 1e6 / _bytes_per_s(bandwidth_gbps)


BUCKET_PARAMS = (
    Param("buckets_mb", default=None, low=0.0, low_open=True,
          doc="overlap the all-reduce with the backward pass in buckets of this size, MB (DDP: 25)"),
    Param("first_bucket_mb", default=None, low=0.0, low_open=True,
          doc="the first bucket's size, MB (default min(1, buckets_mb), as DDP)"),
)  # fmt: skip
LINK_PARAMS = (
    Param("latency_s", default=2e-5, low=0.0, doc="per-message latency"),
    Param("bandwidth_gbps", default=100.0, low=0.0, low_open=True, doc="link bandwidth, Gbit/s"),
    *BUCKET_PARAMS,
)


class _OneLink(NetworkModel):
    """A model of one kind of link: latency and bandwidth (and the optional buckets)."""

    params = LINK_PARAMS
    latency_s: float
    bandwidth_gbps: float
    buckets_mb: float | None
    first_bucket_mb: float | None


@NETWORKS.register
class Ring(_OneLink):
    """Ring all-reduce (reduce-scatter + all-gather): 2(n-1) messages of size bytes/n in sequence.

    time = 2(n-1) * latency + 2(n-1)/n * bytes / bandwidth
    """

    name: ClassVar[str] = "ring"

    def allreduce_s(self, n_workers: int, gradient_mb: float, nodes: Nodes | None = None) -> float:
        return _ring_s(n_workers, gradient_mb, self.latency_s, self.bandwidth_gbps)


@NETWORKS.register
class ParameterServer(_OneLink):
    """One parameter server whose link carries every worker's push and pull in turn.

    time = 2 * latency + 2 * n * bytes / bandwidth  (the server's link is the bottleneck)

    The link is one resource under every policy: an ``async`` update holds it for its own push
    and pull, ``2 * latency + 2 * bytes / bandwidth`` (:meth:`update_link_s`), and updates queue
    for it, so they never arrive faster than the link carries them.
    """

    name: ClassVar[str] = "ps"

    def allreduce_s(self, n_workers: int, gradient_mb: float, nodes: Nodes | None = None) -> float:
        if n_workers <= 1:
            return 0.0
        return 2 * self.latency_s + 2 * n_workers * gradient_mb * 1e6 / _bytes_per_s(self.bandwidth_gbps)

    def update_link_s(self, gradient_mb: float) -> float:
        """One worker's push and pull through the server's link (the n = 1 share of a step's)."""
        return 2 * self.latency_s + 2 * gradient_mb * 1e6 / _bytes_per_s(self.bandwidth_gbps)


@NETWORKS.register
class ConstantNetwork(NetworkModel):
    """A fixed time per step after the computes, e.g. a measured one: the exchange and whatever
    else the loop does between computes (the optimizer's update). One worker's steps take it too:
    it has no exchange, but a trace of one rank measures the rest (docs/architecture.md,
    calibration)."""

    name: ClassVar[str] = "constant"
    params = (
        Param("time_s", low=0.0, doc="one step's time after the computes (the exchange, the update)"),
        *BUCKET_PARAMS,
    )
    time_s: float
    buckets_mb: float | None
    first_bucket_mb: float | None

    def allreduce_s(self, n_workers: int, gradient_mb: float, nodes: Nodes | None = None) -> float:
        return self.time_s

    def bucket_times(self, n_workers: int, sizes_mb: Sequence[float], nodes: Nodes | None = None) -> tuple[float, ...]:
        """A bucket takes its share of ``time_s`` by size (the step's exchange stays ``time_s``)."""
        total = math.fsum(sizes_mb)
        return tuple(self.allreduce_s(n_workers, total) * s / total for s in sizes_mb)


@NETWORKS.register
class Hierarchical(NetworkModel):
    """Fast links inside a node (NVLink, PCIe), a slower network between nodes (Ethernet,
    InfiniBand): the two-level all-reduce of NCCL and Horovod. For ``k`` nodes of at most ``m``
    workers (``nodes``, from each worker's ``node``):

    1. inside each node, a ring reduce-scatter: every worker holds the node's sum of ``1/m`` of
       the gradient, after ``(m-1)`` messages of ``bytes/m`` on the intra-node links;
    2. between nodes, a ring all-reduce of each of those shards, all ``m`` at once: they share
       the node's NIC, which carries ``2(k-1)/k * bytes`` in ``2(k-1)`` rounds;
    3. inside each node, a ring all-gather: ``(m-1)`` messages of ``bytes/m`` again.

    time = 2(m-1) * latency_s + 2(m-1)/m * bytes / bandwidth_gbps
         + 2(k-1) * inter_latency_s + 2(k-1)/k * bytes / inter_bandwidth_gbps

    Nodes of unequal size take the largest node's intra-node phases (they run in parallel, and
    the slowest ends them). One node is a ``ring`` of the intra-node links, one worker per node
    a ``ring`` of the inter-node ones. Without a layout (``nodes=None``; the async exchange of
    two workers) every worker is a node of its own.
    """

    name: ClassVar[str] = "hierarchical"
    uses_nodes: ClassVar[bool] = True
    params = (
        Param("latency_s", default=5e-6, low=0.0, doc="per-message latency inside a node"),
        Param("bandwidth_gbps", default=1200.0, low=0.0, low_open=True,
              doc="link bandwidth inside a node, Gbit/s (NVLink-class: 1200)"),
        Param("inter_latency_s", default=2e-5, low=0.0, doc="per-message latency between nodes"),
        Param("inter_bandwidth_gbps", default=100.0, low=0.0, low_open=True,
              doc="a node's network bandwidth, Gbit/s, shared by its workers"),
        *BUCKET_PARAMS,
    )  # fmt: skip
    latency_s: float
    bandwidth_gbps: float
    inter_latency_s: float
    inter_bandwidth_gbps: float
    buckets_mb: float | None
    first_bucket_mb: float | None

    def allreduce_s(self, n_workers: int, gradient_mb: float, nodes: Nodes | None = None) -> float:
        if n_workers <= 1:
            return 0.0
        k, m = (n_workers, 1) if nodes is None else (len(nodes), max(nodes))
        intra = _ring_s(m, gradient_mb, self.latency_s, self.bandwidth_gbps)
        return intra + _ring_s(k, gradient_mb, self.inter_latency_s, self.inter_bandwidth_gbps)
