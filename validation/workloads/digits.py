"""``digits-cnn``: scikit-learn's handwritten digits (1797 8x8 images that ship with the
package, no download) and a small CNN (about 38k parameters): the fast default."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from validation.workloads.base import Dataset, Workload
from validation.workloads.sklearn_data import load_digits
from validation.workloads.sweep_defaults import SweepDefaults

N_DIGITS = 1797  # samples in scikit-learn's digits (checked on load)
N_TEST = 359  # the held-out 20%
N_CLASSES = 10


def digits_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 1797 digits as float32 images N x 8 x 8 in [0, 1] and int64 labels, shuffled once with
    ``seed``; the last 20% (359) held out. Returns train images, train labels, test images, test labels."""
    flat, target = load_digits()
    if len(target) != N_DIGITS:
        raise RuntimeError(f"scikit-learn's digits have {len(target)} samples, expected {N_DIGITS}")
    images = np.asarray(flat, dtype=np.float32).reshape(-1, 8, 8) / 16.0
    labels = np.asarray(target, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(labels.size)
    train, test = order[:-N_TEST], order[-N_TEST:]
    return images[train], labels[train], images[test], labels[test]


class SmallCNN(nn.Module):
    """Two 3x3 convolutions, one max-pool, two linear layers (about 38k parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, N_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class DigitsCNN(Workload):
    name = "digits-cnn"

    classes = True  # its labels are classes: has_accuracy needs no data
    sweep_defaults = SweepDefaults(16, "sgd", 0.05, 0.95, 3000, 1500, 1)

    def train_size(self) -> int:
        return N_DIGITS - N_TEST

    def load(self, seed: int, device: torch.device) -> Dataset:
        train_x, train_y, test_x, test_y = (torch.from_numpy(a) for a in digits_split(seed))
        return Dataset(
            train_x.unsqueeze(1).to(device), train_y.to(device), test_x.unsqueeze(1).to(device), test_y.to(device)
        )

    def build_model(self) -> nn.Module:
        return SmallCNN()

    def loss(self, output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(output, labels)


WORKLOAD = DigitsCNN()
