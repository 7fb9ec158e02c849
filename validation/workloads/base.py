"""The interface every workload implements, and the tensors it hands the trainer.

A workload owns its data (real data that ships with an installed package: no download), its
model and its loss. The trainer only indexes ``train_x`` / ``train_y`` by sample and calls
:meth:`Workload.loss` on a shard: the loss must be the *mean over the shard's samples* of a
per-sample loss, and the model must have no statistic that depends on how a batch is cut
(no BatchNorm: :mod:`validation.workloads.checks` refuses one), so that the weighted
combination ``sum_i (b_i/B) g_i`` of the ranks' gradients is exactly the gradient of the union
of their shards, whatever the split.

A workload is a subclass (the built-ins, whose split of their data depends on the seed) or,
for a model and data at hand, :meth:`Workload.from_parts` (:mod:`validation.workloads.parts`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from validation.workloads.sweep_defaults import SweepDefaults

if TYPE_CHECKING:
    from validation.workloads.parts import Data


@dataclass(frozen=True)
class Dataset:
    """Train and held-out tensors, indexed by sample along the first dimension."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def n_train(self) -> int:
        return int(self.train_y.shape[0])


class Workload(ABC):
    """One trainable workload: data, a freshly seeded model, the loss and a held-out evaluation."""

    name: str
    classes: bool | None = None  # whether the labels are classes, where known without the data
    # batch-sweep's base batch, optimizer, rate, target, step caps and evaluation gap where the command
    # line names none (None: --base-batch, --lr and --target are the user's to give)
    sweep_defaults: SweepDefaults | None = None

    @classmethod
    def from_parts(
        cls,
        name: str,
        model_factory: Callable[[], nn.Module],
        train: Data,
        test: Data,
        loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> Workload:
        """A workload from its parts: ``model_factory()`` builds a fresh model (from torch's
        random state, which :meth:`make_model` seeds); ``train`` and ``test`` are each a
        ``torch.utils.data.Dataset`` of ``(input, label)`` items or a pair ``(inputs, labels)``
        of tensors; ``loss(output, labels)`` is the mean over the samples of a per-sample loss.
        The training set's size is ``len(train)``. The data is the same for every seed (the
        seed still orders each epoch's samples and draws the weights)."""
        from validation.workloads.parts import PartsWorkload

        return PartsWorkload(name, model_factory, train, test, loss)

    def train_size(self) -> int:
        """How many training samples :meth:`load` gives, the same for every seed: the
        configuration checks the global batch against it before any rank starts. Here the data
        is loaded once on the CPU to count them; a workload that knows without loading says so."""
        return self.load(0, torch.device("cpu")).n_train

    def has_accuracy(self) -> bool:
        """Whether the held-out labels are classes (whole numbers), so that :meth:`evaluate` has an
        accuracy to give (floating-point labels, a regression's, have a loss alone). Here the data
        is loaded once on the CPU to ask, unless the class says (:attr:`classes`); asked only where
        an accuracy is needed."""
        if self.classes is not None:
            return self.classes
        return not self.load(0, torch.device("cpu")).test_y.is_floating_point()

    @abstractmethod
    def load(self, seed: int, device: torch.device) -> Dataset:
        """The train / held-out split (the same for every rank given ``seed``), on ``device``."""

    @abstractmethod
    def build_model(self) -> nn.Module:
        """A new model with torch's current random state (make_model seeds it)."""

    @abstractmethod
    def loss(self, output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The mean over the batch's samples of each sample's loss."""

    def make_model(self, seed: int, device: torch.device) -> nn.Module:
        """A freshly initialised model; the same ``seed`` gives the same weights on every rank."""
        torch.manual_seed(seed)
        return self.build_model().to(device)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, data: Dataset, chunk: int = 512) -> tuple[float, float]:
        """Mean loss and accuracy (of the arg-max prediction, per sample or per token) on the
        held-out split; the accuracy is nan where the labels are not classes (floating-point
        labels: a regression, which has a loss alone)."""
        classes = not data.test_y.is_floating_point()
        model.eval()
        loss_sum, count, n = 0.0, 0, int(data.test_y.shape[0])
        right, labels = 0, 0  # counted, not averaged in float32: 90 right of 100 is 0.9, not 0.89999998
        for start in range(0, n, chunk):
            x, y = data.test_x[start : start + chunk], data.test_y[start : start + chunk]
            out = model(x)
            loss_sum += float(self.loss(out, y)) * int(y.shape[0])
            if classes:
                right, labels = right + int((out.argmax(dim=-1) == y).sum()), labels + y.numel()
            count += int(y.shape[0])
        model.train()
        return loss_sum / count, right / labels if classes else float("nan")
