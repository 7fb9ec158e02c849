r"""A cost-model plug-in, the worked example of docs/guide/extending.md: a power-law step time,
for a device that is not yet busy at small batches (``exponent < 1``: each extra sample costs
less than the one before) or one that slows as its memory fills (``exponent > 1``). Name this
file in ``HETSIM_PLUGINS`` and a worker's ``cost`` takes ``{ model = "power", ... }``::

    HETSIM_PLUGINS=examples/my_cost_model.py python -m hetsim simulate mixed-gpus --policy equal,proportional,optimal \
        --set 'workers.2.cost={model="power", overhead_s=0.05, per_sample_s=0.004, exponent=0.8}' \
        --set workload.epochs=1

    time_s(b)       = overhead_s + per_sample_s * b^exponent
    batch_within(t) = ((t - overhead_s) / per_sample_s)^(1/exponent)     (t >= overhead_s; else 0)

``batch_within`` is ``time_s``'s exact inverse: the min-max split (``optimal``, ``adaptive``'s
re-split, ``plan``) counts with it how many samples each worker finishes by a given time. At
``exponent = 1`` the curve is affine, and ``affine_terms`` says so, which lets the policies and
the analysis take their closed-form affine paths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsim.core.params import Param
from hetsim.core.registry import COSTS
from hetsim.model.costs import CostModel


@COSTS.register
class Power(CostModel):
    """``overhead_s + per_sample_s * b**exponent``: non-decreasing in the batch for any exponent > 0."""

    name = "power"
    params = (
        Param("overhead_s", default=0.0, low=0.0, doc="fixed cost of a step with samples, seconds"),
        Param("per_sample_s", low=0.0, low_open=True, doc="the cost of the first sample, seconds"),
        Param("exponent", default=1.0, low=0.0, low_open=True, doc="how the cost grows with the batch (1: affine)"),
    )
    overhead_s: float
    per_sample_s: float
    exponent: float

    def time_s(self, batch: Any) -> Any:
        # engines call it with arrays of batches (and the analysis with floats): stay element-wise
        return self.overhead_s + self.per_sample_s * np.asarray(batch, dtype=float) ** self.exponent

    def batch_within(self, time_s: float) -> float:
        if time_s <= self.overhead_s:
            return 0.0  # not even a fraction of a sample fits (callers round down)
        return float(((time_s - self.overhead_s) / self.per_sample_s) ** (1.0 / self.exponent))

    def affine_terms(self) -> tuple[float, float] | None:
        return (self.overhead_s, self.per_sample_s) if self.exponent == 1.0 else None
