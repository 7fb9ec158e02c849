"""Partitioning and straggler policies; :func:`make_policy` builds one from its name and parameters.

Importing this package registers the built-in policies with :data:`hetsim.core.registry.POLICIES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetsim.core.errors import ConfigError
from hetsim.core.params import join
from hetsim.core.registry import POLICIES
from hetsim.policies.adaptive import Adaptive
from hetsim.policies.base import Policy, RunHint, StepInfo, StepRecord, WorkerHint, fresh
from hetsim.policies.dynamic import Dynamic, DynamicEnhanced
from hetsim.policies.goodput import Goodput
from hetsim.policies.static import Equal, Optimal, Proportional, planned_policy
from hetsim.policies.straggler import Async, Backup, KSync

for _cls in (Equal, Proportional, Dynamic, DynamicEnhanced, Optimal, Adaptive, Goodput, Backup, KSync, Async):
    POLICIES.register(_cls)  # in this order: the order of --policy's default, the tables and the docs


def policy_class(name: Any, field: str = "policy.name") -> type[Policy]:
    """The class registered as ``name``; an unknown name raises :class:`ConfigError` on ``field``."""
    return POLICIES.lookup(name, field)


def make_policy(
    name: str, params: Mapping[str, Any] | None = None, field: str = "policy", n_workers: int | None = None
) -> Policy:
    """A fresh policy object; an unknown name or a bad parameter (also, given ``n_workers``, one
    that does not fit the cluster) raises :class:`ConfigError` on the parameter's path under
    ``field`` (``policy.forgetting``)."""
    cls = policy_class(name, join(field, "name"))
    try:
        policy = cls(**dict(params or {}))
        if n_workers is not None:
            policy.check_cluster(n_workers)
        return policy
    except ConfigError as exc:
        raise ConfigError(join(field, exc.field), exc.problem) from None


__all__ = [
    "POLICIES",
    "Adaptive",
    "Async",
    "Backup",
    "Dynamic",
    "DynamicEnhanced",
    "Goodput",
    "Equal",
    "KSync",
    "Optimal",
    "Policy",
    "Proportional",
    "RunHint",
    "StepInfo",
    "StepRecord",
    "WorkerHint",
    "fresh",
    "make_policy",
    "planned_policy",
    "policy_class",
]
