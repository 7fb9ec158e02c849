"""The workloads a validation run can train (``--workload``): what each is, torch-free.

Each entry names the module that builds it (imported only inside a rank, where torch is) and
how many training samples it has, which the configuration checks the global batch against
before any process starts. The modules share one interface, :class:`validation.workloads.base.Workload`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hetsim.errors import ConfigError

if TYPE_CHECKING:
    from validation.workloads.base import Workload


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload's name, the module that defines ``WORKLOAD`` and its training samples."""

    name: str
    module: str
    n_train: int
    summary: str


WORKLOAD_INFO: dict[str, WorkloadInfo] = {
    w.name: w
    for w in (
        WorkloadInfo(
            "digits-cnn",
            "validation.workloads.digits",
            1438,
            "scikit-learn's 8x8 digits, a 38k-parameter CNN (the fast default)",
        ),
        WorkloadInfo(
            "resnet18",
            "validation.workloads.resnet",
            1438,
            "scikit-learn's digits upscaled to 3x32x32, ResNet-18 with GroupNorm (11.2M parameters, 44.7 MB "
            "of gradient)",
        ),
        WorkloadInfo(
            "transformer",
            "validation.workloads.transformer",
            2048,
            "a byte-level GPT-style model (2 blocks, width 128, context 64; 0.47M parameters, 1.9 MB of "
            "gradient) on the source of 10 standard-library modules",
        ),
    )
}


def workload_info(name: str, option: str = "--workload") -> WorkloadInfo:
    """The entry named ``name``; an unknown name is a ConfigError listing the known ones."""
    if name not in WORKLOAD_INFO:
        raise ConfigError(option, f"unknown workload {name!r} (known: {', '.join(WORKLOAD_INFO)})")
    return WORKLOAD_INFO[name]


def load_workload(name: str) -> Workload:
    """The workload object (imports its module, and torch)."""
    workload: Workload = importlib.import_module(workload_info(name).module).WORKLOAD
    return workload
