"""A workload of your own for ``python -m validation run``: a small MLP on scikit-learn's breast
cancer data (569 tumours, 30 measurements each, benign or malignant; the data ships with
scikit-learn, no download, and is read from its file without importing scikit-learn). See
"Adding a workload" in validation/README.md.

By file and attribute::

    python -m validation run --workload examples/my_workload.py:WORKLOAD --global-batch 64

or by name, once ``HETSIM_PLUGINS`` names this file (it registers the workload)::

    HETSIM_PLUGINS=examples/my_workload.py python -m validation run --workload breast-cancer-mlp --global-batch 64
"""

from __future__ import annotations

import torch
from torch import nn

from validation.workloads import WORKLOADS
from validation.workloads.base import Workload
from validation.workloads.sklearn_data import load_breast_cancer

N_TEST = 114  # held out: 20% of the 569 samples
Pair = tuple[torch.Tensor, torch.Tensor]


def split() -> tuple[Pair, Pair]:
    """(inputs, labels) to train on and to hold out: float32 measurements standardised with the
    training set's mean and standard deviation, int64 labels; one fixed shuffle."""
    measurements, labels = load_breast_cancer()  # scikit-learn's file, read without importing it
    x = torch.tensor(measurements, dtype=torch.float32)
    y = torch.tensor(labels, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, test = order[:-N_TEST], order[-N_TEST:]
    mean, std = x[train].mean(dim=0), x[train].std(dim=0)
    x = (x - mean) / std
    return (x[train], y[train]), (x[test], y[test])


def make_model() -> nn.Module:
    """30 measurements -> 64 hidden units -> 2 classes. LayerNorm normalises each sample on its
    own; a BatchNorm1d here would be refused (its statistics depend on how the batch is cut)."""
    return nn.Sequential(nn.Linear(30, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 2))


TRAIN, TEST = split()
WORKLOAD = Workload.from_parts(
    "breast-cancer-mlp",
    model_factory=make_model,
    train=TRAIN,  # 455 samples: the size comes from the data
    test=TEST,
    loss=nn.functional.cross_entropy,  # the mean over the batch's samples, as the trainer needs
)
WORKLOADS.register(WORKLOAD)  # for --workload breast-cancer-mlp under HETSIM_PLUGINS
