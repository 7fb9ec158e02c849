"""Partitioning and straggler policies; :func:`make_policy` builds one from its name and parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetsim.errors import ConfigError
from hetsim.policies.base import Policy, StepInfo, StepRecord, WorkerHint
from hetsim.policies.adaptive import Adaptive
from hetsim.policies.dynamic import Dynamic, DynamicEnhanced
from hetsim.policies.static import Equal, Optimal, Proportional
from hetsim.policies.straggler import Async, Backup, KSync

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (Equal, Proportional, Dynamic, DynamicEnhanced, Optimal, Adaptive, Backup, KSync, Async)
}


def policy_class(name: str, field: str = "policy.name") -> type[Policy]:
    """The class registered as ``name``; an unknown name raises :class:`ConfigError` on ``field``."""
    if name not in POLICIES:
        raise ConfigError(field, f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    return POLICIES[name]


def make_policy(name: str, params: Mapping[str, Any] | None = None) -> Policy:
    """A fresh policy object; unknown names or parameters raise :class:`ConfigError`."""
    cls = policy_class(name)
    try:
        return cls(**dict(params or {}))
    except TypeError as exc:  # an unknown parameter name
        raise ConfigError("policy", f"bad parameters for {name!r}: {exc}") from None


__all__ = ["POLICIES", "Policy", "StepInfo", "StepRecord", "WorkerHint", "make_policy", "policy_class"]
