"""The built-in workloads, registered in :data:`validation.workloads.WORKLOADS` when the registry
is first used (this import brings torch; no data is loaded until a rank asks)."""

from __future__ import annotations

from validation.workloads.digits import WORKLOAD as DIGITS_CNN
from validation.workloads.plugins import WORKLOADS
from validation.workloads.resnet import WORKLOAD as RESNET18
from validation.workloads.transformer import WORKLOAD as TRANSFORMER

for _workload in (DIGITS_CNN, RESNET18, TRANSFORMER):
    WORKLOADS.register(_workload)
