r"""A distribution plug-in, the worked example of docs/guide/extending.md: a heavy-tailed delay
(Lomax, the Pareto distribution of the second kind, shifted to start at 0), for stalls that are
usually short and now and then very long (a garbage collection, a page fault storm, a noisy
neighbour). Name this file in ``HETSIM_PLUGINS`` and a worker's ``delay`` takes
``{ dist = "lomax", mean = ..., shape = ... }`` (and its ``noise`` too, with ``mean = 1``: a
noise factor must have mean 1)::

    HETSIM_PLUGINS=examples/my_distribution.py python -m hetsim simulate paper --policy equal,dynamic,optimal \
        --set 'workers.1.delay={dist="lomax", mean=0.1, shape=3}' --set workload.epochs=2

With ``lam = mean * (shape - 1)`` (the scale) and ``a = shape`` (the tail index):

    P(D > t) = (1 + t/lam)^(-a)                       (t >= 0)
    ppf(u)   = lam * ((1 - u)^(-1/a) - 1)
    mean     = lam / (a - 1)
    var      = lam^2 a / ((a - 1)^2 (a - 2))  =  mean^2 a / (a - 2)

The variance is finite only for ``a > 2``, which the declaration asks (the analysis integrates
step times up to 12 standard deviations above the mean, then the tail to infinity). The smaller
``shape``, the heavier the tail: at ``shape = 3`` (``lam = 2 mean``) 6 delays in a thousand
are above 9 times the mean, ``(1 + 9/2)^-3 = 0.006``, and 0.9 in a thousand above 19 times it,
``(1 + 19/2)^-3``, where an exponential delay of the same mean has 0.1 and 6e-6 in a thousand.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsim.core.params import Param
from hetsim.core.registry import DISTRIBUTIONS
from hetsim.model.distributions import Distribution


@DISTRIBUTIONS.register
class Lomax(Distribution):
    """A Lomax (Pareto II) delay of the given ``mean`` and tail index ``shape``."""

    name = "lomax"
    params = (
        # ``mean`` is the name in files; ``attr`` keeps the value as ``mean_s`` because the
        # class has a method ``mean()`` (as the built-in ``exponential`` does)
        Param("mean", low=0.0, low_open=True, attr="mean_s", doc="the mean delay, seconds"),
        Param("shape", low=2.0, low_open=True, doc="the tail index a (> 2: a finite variance)"),
    )
    mean_s: float
    shape: float

    @property
    def scale(self) -> float:
        """``lam``: the delay at which the survival function has fallen to ``2^-shape``."""
        return self.mean_s * (self.shape - 1.0)

    def ppf(self, u: np.ndarray) -> np.ndarray:
        # lam * ((1 - u)^(-1/a) - 1) = lam * expm1(-log1p(-u) / a): exact digits near u = 0
        return self.scale * np.expm1(-np.log1p(-np.asarray(u, dtype=float)) / self.shape)

    def mean(self) -> float:
        return self.mean_s

    def var(self) -> float:
        return self.mean_s**2 * self.shape / (self.shape - 2.0)

    def cdf(self, t: Any) -> Any:
        t = np.asarray(t, dtype=float)
        # 1 - (1 + t/lam)^(-a) = -expm1(-a log1p(t/lam)) for t > 0, and 0 below (a delay is >= 0)
        return np.where(t > 0, -np.expm1(-self.shape * np.log1p(np.maximum(t, 0.0) / self.scale)), 0.0)[()]

    def expected_max_of_two(self) -> float:
        """E[max(D1, D2)] of two independent delays: ``int_0^inf 1 - F(t)^2 dt =
        2 lam/(a-1) - lam/(2a-1)``. Not part of the interface: the exact answer that
        docs/guide/extending.md and the tests hold ``analyze`` to."""
        return 2.0 * self.scale / (self.shape - 1.0) - self.scale / (2.0 * self.shape - 1.0)
