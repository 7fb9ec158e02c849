"""The workloads a validation run can train (``--workload``), torch-free until one is resolved.

:data:`WORKLOADS` is hetsim's :class:`~hetsim.core.registry.Registry`, holding workload objects by
name: the built-ins (:mod:`validation.workloads.builtin`) and what ``HETSIM_PLUGINS`` modules
register. ``--workload`` also takes ``FILE.py:ATTR`` and ``MODULE:ATTR``
(:mod:`validation.workloads.plugins`). Every workload implements
:class:`validation.workloads.base.Workload`; :meth:`~validation.workloads.base.Workload.from_parts`
makes one from a model factory, data and a loss. A plug-in registers one with::

    from validation.workloads import WORKLOADS
    from validation.workloads.base import Workload

    WORKLOADS.register(Workload.from_parts("my-mlp", make_model, train, test, loss))
"""

from __future__ import annotations

from validation.workloads.plugins import BUILTIN_WORKLOADS, WORKLOADS, load_workload, resolve_workload

__all__ = ["BUILTIN_WORKLOADS", "WORKLOADS", "load_workload", "resolve_workload"]
