r"""A policy plug-in, the worked example of docs/guide/extending.md: a file of your own, named in
``HETSIM_PLUGINS``, that every command then takes by name, with no edit to hetsim::

    HETSIM_PLUGINS=examples/my_policies.py python -m hetsim simulate mixed-gpus --policy equal,optimal,drop-slowest

``drop-slowest`` leaves the ``leave_out`` slowest workers out (by their nominal throughput at the
equal split, as ``proportional`` measures it) and splits the global batch over the others in
proportion to that throughput, within their ``max_batch``. It is static (one split for the whole
run), so it needs the workers' expected costs, which the simulator knows; a scenario sets its
parameter in ``[policy]``: ``name = "drop-slowest"``, ``leave_out = 2``. Being static, it also
has a closed form (``analyze`` predicts it: E[max] of the compute times of its one split), and
the vector engine computes its whole run in blocks (it overrides none of the hooks through
which a split changes, so ``steady_steps`` says "until the end" by itself)::

    HETSIM_PLUGINS=examples/my_policies.py python -m hetsim analyze mixed-gpus --policy equal,drop-slowest \
        --set workload.epochs=1
"""

from __future__ import annotations

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param
from hetsim.core.registry import POLICIES
from hetsim.model.partition import split_by_shares
from hetsim.policies import Policy


@POLICIES.register
class DropSlowest(Policy):
    """The ``leave_out`` slowest workers get no samples; the rest shares proportional to speed."""

    name = "drop-slowest"
    needs_costs = True  # reset receives every worker's expected cost curve in its hints
    weighted_gradients = True  # a trainer combines the uneven split's gradients by their batches
    closed_form = True  # analyze's barrier model applies: its split is fixed by the expected costs
    params = (Param("leave_out", "integer", default=1, low=0, doc="how many of the slowest workers get no samples"),)
    leave_out: int

    def check_cluster(self, n_workers: int) -> None:
        if self.leave_out >= n_workers:
            raise ConfigError("leave_out", f"{self.leave_out} would leave none of the {n_workers} workers")

    def initial_split(self) -> tuple[int, ...]:
        b = self.global_batch / self.n_workers
        speeds_sps = [b / float(h.expected_s(b)) for h in self.hints]  # samples/s at the equal split
        slowest = sorted(range(self.n_workers), key=lambda i: speeds_sps[i])[: self.leave_out]
        shares = [0.0 if i in slowest else s for i, s in enumerate(speeds_sps)]
        return split_by_shares(shares, self.global_batch, self.caps)
