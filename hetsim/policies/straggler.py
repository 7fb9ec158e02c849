"""Straggler policies: ``backup`` and ``ksync`` (wait for the first k gradients) and ``async``.

``backup`` (Chen et al. 2016) and ``ksync`` (Dutta et al. 2018) share one timing model: every
worker gets ``B/n`` samples, the step completes when the first ``k`` gradients arrive, the
others are cancelled and their samples dropped, and all restart together. They differ in how
``k`` is given: ``backups = b`` (k = n - b) or ``k``. A failed worker is one more straggler.

``async`` has no barrier: each worker pushes its gradient (``B/n`` samples) as soon as it is
done and starts again; the engines run it on their own loop (``synchronous = False``).
"""

from __future__ import annotations

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param
from hetsim.policies.base import UNTIL_THE_END, Policy, StepInfo


class _FirstK(Policy):
    excludes_failed = False
    closed_form = True

    def steady_steps(self, info: StepInfo) -> int:
        return UNTIL_THE_END


class Backup(_FirstK):
    """Equal split; each step ends at the first ``n - backups`` gradients, the rest are dropped."""

    name = "backup"
    params = (Param("backups", "integer", default=1, low=0, doc="gradients not waited for (k = n - backups)"),)
    backups: int

    def check_cluster(self, n_workers: int) -> None:
        if self.backups >= n_workers:
            alone = " (backup needs two workers or more)" if n_workers == 1 else ""
            raise ConfigError(
                "backups", f"must be smaller than the number of workers ({n_workers}), got {self.backups}{alone}"
            )

    def wait_for(self) -> int:
        return self.n_workers - self.backups


class KSync(_FirstK):
    """Equal split; each step ends at the first ``k`` gradients (default ``n - 1``), the rest are dropped."""

    name = "ksync"
    params = (Param("k", "integer", default=None, low=1, doc="gradients waited for (default n - 1)"),)
    k: int | None

    def check_cluster(self, n_workers: int) -> None:
        if self.k is not None and self.k > n_workers:
            raise ConfigError("k", f"must be at most the number of workers ({n_workers}), got {self.k}")

    def wait_for(self) -> int:
        return max(1, self.n_workers - 1) if self.k is None else self.k


class Async(Policy):
    """No barrier: each worker pushes its gradient of ``B/n`` samples when done and starts again."""

    name = "async"
    synchronous = False
    excludes_failed = False
    autocorrelated_steps = True
    closed_form = True
