"""The workload: scikit-learn's handwritten digits (ships with the package, no download) and a
small CNN. Owns the data split (train / held-out), the model and the loss."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from validation.config import N_DIGITS, N_TEST

N_CLASSES = 10


@dataclass(frozen=True)
class Dataset:
    """Train and held-out tensors (images N x 1 x 8 x 8 scaled to [0, 1], integer labels)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def n_train(self) -> int:
        return int(self.train_y.shape[0])


def load_digits_split(seed: int, device: torch.device) -> Dataset:
    """The 1797 digits, shuffled once with ``seed``; the last 20% (359) held out for evaluation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    if len(digits.target) != N_DIGITS:
        raise RuntimeError(f"scikit-learn's digits have {len(digits.target)} samples, expected {N_DIGITS}")
    images = np.asarray(digits.images, dtype=np.float32) / 16.0
    labels = np.asarray(digits.target, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(labels.size)
    train, test = order[:-N_TEST], order[-N_TEST:]
    x = torch.from_numpy(images).unsqueeze(1)
    y = torch.from_numpy(labels)
    return Dataset(x[train].to(device), y[train].to(device), x[test].to(device), y[test].to(device))


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


def make_model(seed: int, device: torch.device) -> nn.Module:
    """A freshly initialised model; the same ``seed`` gives the same weights on every rank."""
    torch.manual_seed(seed)
    return SmallCNN().to(device)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the batch."""
    return nn.functional.cross_entropy(logits, labels)


@torch.no_grad()
def evaluate(model: nn.Module, data: Dataset) -> tuple[float, float]:
    """Mean loss and accuracy on the held-out split."""
    model.eval()
    logits = model(data.test_x)
    loss = float(loss_fn(logits, data.test_y))
    accuracy = float((logits.argmax(dim=1) == data.test_y).float().mean())
    model.train()
    return loss, accuracy
