"""What a workload's model may not hold, checked before any rank starts.

The trainer combines the ranks' gradients as ``sum_i (b_i/B) g_i``, which is the gradient of
the union of their shards only when each sample's loss depends on that sample alone. A
BatchNorm layer (any ``torch.nn.modules.batchnorm._BatchNorm``: ``BatchNorm1d/2d/3d``, their
lazy forms, ``SyncBatchNorm``) normalises in training with the statistics of the batch it is
given, so a rank's gradient would depend on how the global batch was cut (and a rank given one
sample could not normalise at all); its running statistics would also drift apart across ranks.
Per-sample normalisations (``GroupNorm``, ``LayerNorm``) and weight normalisation
(``torch.nn.utils.parametrizations.weight_norm``) have no such dependence.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from hetsim.core.errors import ConfigError
from validation.workloads.base import Workload
from validation.workloads.plugins import first_line

INSTEAD = (
    "use a per-sample normalisation (torch.nn.GroupNorm, torch.nn.LayerNorm) or weight normalisation "
    "(torch.nn.utils.parametrizations.weight_norm) instead"
)


def batch_dependent_layers(model: nn.Module) -> list[tuple[str, str]]:
    """``(path, class name)`` of every layer whose output for a sample depends on the rest of its
    batch, in ``named_modules`` order (the path as in the state dict: ``layer1.0.bn1``)."""
    return [(path, type(m).__name__) for path, m in model.named_modules() if isinstance(m, _BatchNorm)]


def batch_dependence(model: nn.Module) -> str | None:
    """Why ``model`` cannot be trained on uneven shards (its first batch-dependent layer named), or
    None when it can."""
    found = batch_dependent_layers(model)
    if not found:
        return None
    path, kind = found[0]
    where = path or "the model itself"
    more = f" (and {len(found) - 1} more BatchNorm layer(s))" if len(found) > 1 else ""
    return (f"{where} is a {kind}{more}, whose batch statistics make a rank's gradient depend on how the "
            f"global batch is cut: {INSTEAD}")  # fmt: skip


def check_model(workload: Workload, field: str) -> None:
    """Build ``workload``'s model once (leaving torch's random state as it was) and refuse it, on
    ``field``, when it holds a batch-dependent layer, naming the first."""
    with torch.random.fork_rng(devices=[]):
        try:
            model = workload.build_model()
        except (Exception, SystemExit) as exc:  # a plug-in's factory: any error, or sys.exit, is the workload's
            problem = f"building the model failed: {first_line(exc)}"
            raise ConfigError(field, f"{workload.name}: {problem}") from None
    if not isinstance(model, nn.Module):
        problem = f"build_model() returned a {type(model).__name__}, not a torch.nn.Module"
        raise ConfigError(field, f"{workload.name}: {problem}")
    if (dependence := batch_dependence(model)) is not None:
        raise ConfigError(field, f"{workload.name}: {dependence}")
