r"""A network-model plug-in, the worked example of docs/guide/extending.md: a binary-tree
all-reduce (reduce up the tree to the root, broadcast back down, the whole gradient on every
hop, no pipelining), the textbook alternative to the ring: fewer messages in a large cluster,
each carrying all of the gradient. Name this file in ``HETSIM_PLUGINS`` and ``[network]`` takes
``kind = "tree"``::

    HETSIM_PLUGINS=examples/my_network.py python -m hetsim simulate paper --policy equal,optimal \
        --set 'network={kind="tree", latency_s=1e-5, bandwidth_gbps=10}' --set workload.epochs=2

For ``n`` workers and a gradient of ``S`` bytes (``gradient_mb * 1e6``), ``L = latency_s`` and
``W = bandwidth_gbps * 1e9 / 8`` bytes a second:

    allreduce_s(n) = 2 * ceil(log2 n) * (L + S / W)      (0 for one worker)

against the ring's ``2 (n-1) L + 2 (n-1)/n S / W``: the tree's bandwidth term is
``ceil(log2 n) / (1 - 1/n)`` times the ring's (2x at 2 workers, 4.3x at 16), its latency term
``ceil(log2 n) / (n - 1)`` of the ring's (4/15 at 16), so it wins only where latency dominates:
small gradients, many workers.
"""

from __future__ import annotations

from hetsim.core.params import Param
from hetsim.core.registry import NETWORKS
from hetsim.model.network import NetworkModel, Nodes


@NETWORKS.register
class Tree(NetworkModel):
    """Reduce to the root of a binary tree, then broadcast: ``2 ceil(log2 n)`` hops of the whole gradient."""

    name = "tree"
    params = (
        Param("latency_s", default=2e-5, low=0.0, doc="per-message latency, seconds"),
        Param("bandwidth_gbps", default=100.0, low=0.0, low_open=True, doc="link bandwidth, Gbit/s"),
    )
    latency_s: float
    bandwidth_gbps: float

    def allreduce_s(self, n_workers: int, gradient_mb: float, nodes: Nodes | None = None) -> float:
        if n_workers <= 1:
            return 0.0
        hops = 2 * (n_workers - 1).bit_length()  # 2 ceil(log2 n), in integers: exact at powers of 2
        return hops * (self.latency_s + gradient_mb * 1e6 / (self.bandwidth_gbps * 1e9 / 8.0))
