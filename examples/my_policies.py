r"""Two policy plug-ins, the worked examples of docs/guide/extending.md: a file of your own, named
in ``HETSIM_PLUGINS``, that every command then takes by name, with no edit to hetsim::

    HETSIM_PLUGINS=examples/my_policies.py python -m hetsim simulate mixed-gpus --policy equal,optimal,drop-slowest

``drop-slowest`` (static) leaves the ``leave_out`` slowest workers out (by their nominal
throughput at the equal split, as ``proportional`` measures it) and splits the global batch over
the others in proportion to that throughput, within their ``max_batch``. It is static (one split
for the whole run), so it needs the workers' expected costs, which the simulator knows; a
scenario sets its parameter in ``[policy]``: ``name = "drop-slowest"``, ``leave_out = 2``. Being
static, it also has a closed form (``analyze`` predicts it: E[max] of the compute times of its
one split), and the vector engine computes its whole run in blocks (it overrides none of the
hooks through which a split changes, so ``steady_steps`` says "until the end" by itself)::

    HETSIM_PLUGINS=examples/my_policies.py python -m hetsim analyze mixed-gpus --policy equal,drop-slowest \
        --set workload.epochs=1

``shift`` (re-splitting) needs no costs, only measurements: at the end of each epoch it moves
``samples`` samples (default 4) from the worker whose mean compute time over the epoch was the
longest to the quickest one that has samples and room for more, a hill-climb towards equal
times that settles within ``samples`` of the balanced split and wanders there with the noise::

    HETSIM_PLUGINS=examples/my_policies.py python -m hetsim simulate paper --policy equal,dynamic,shift \
        --set policy.name=shift --set policy.samples=2
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param
from hetsim.core.registry import POLICIES
from hetsim.model.partition import split_by_shares
from hetsim.policies import Policy, RunHint, StepInfo, StepRecord, WorkerHint


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


@POLICIES.register
class Shift(Policy):
    """At each epoch's end, ``samples`` samples move from the slowest worker (by its mean compute
    time over the epoch) to the quickest that has samples and room for more."""

    name = "shift"
    weighted_gradients = True
    resplits = True  # the split changes during a run: the plots draw it, analyze's CI replicates runs
    autocorrelated_steps = True  # a step's time depends on what earlier epochs measured
    closed_form = True  # analyze drives observe with expected times, an epoch at a time (as for dynamic)
    params = (Param("samples", "integer", default=4, low=1, doc="samples moved at each epoch's end"),)
    samples: int

    def reset(
        self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None, run: RunHint | None = None
    ) -> None:
        super().reset(n_workers, global_batch, hints, run)  # sets self._batches = initial_split(): equal
        self._sum_s = np.zeros(n_workers)  # each worker's compute time summed over this epoch
        self._steps = 0

    def steady_steps(self, info: StepInfo) -> int:
        return info.steps_per_epoch - info.step_in_epoch  # the split holds to the end of this epoch

    def observe(self, record: StepRecord) -> None:
        self._sum_s += record.compute_s
        self._steps += 1
        if record.ends_epoch:
            self._move(self._sum_s / self._steps)
            self._sum_s[:] = 0.0
            self._steps = 0

    def observe_steps(
        self, first: StepInfo, local_batches: tuple[int, ...], compute_s: np.ndarray, included: np.ndarray
    ) -> int:
        """The vector engine's block of steps at once (the default calls observe once a step: the
        same result, a Python call and a record a step). A block ends at the epoch's end at the
        latest (steady_steps), so the move is due after its last step when that ends the epoch.
        The times are added in order, as observe adds them, so both engines move alike."""
        for times in compute_s:
            self._sum_s += times
        self._steps += len(compute_s)
        if (first.step_in_epoch + len(compute_s)) % first.steps_per_epoch == 0:
            self._move(self._sum_s / self._steps)
            self._sum_s[:] = 0.0
            self._steps = 0
        return len(compute_s)

    def _move(self, mean_s: np.ndarray) -> None:
        batches = list(self._batches)
        working = [i for i, b in enumerate(batches) if b > 0]  # a worker left without samples stays out
        slow = max(working, key=lambda i: mean_s[i])
        room = [i for i in working if batches[i] < self.caps[i]]
        fast = min(room, key=lambda i: mean_s[i], default=slow)
        if mean_s[slow] <= mean_s[fast]:
            return  # balanced (or nowhere to move to): keep the same tuple, the engines then reuse it
        k = int(min(self.samples, batches[slow], self.caps[fast] - batches[fast]))  # caps may be inf
        batches[slow] -= k
        batches[fast] += k
        self._batches = tuple(batches)
