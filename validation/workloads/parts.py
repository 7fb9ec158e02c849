"""A workload made of parts (:meth:`Workload.from_parts`): a model factory, training and
held-out data, a loss. Adding a model then needs no subclass, and its training set's size is
read from the data, never typed.

Owns the two forms the data may take and their checks: a ``torch.utils.data.Dataset`` of
``(input, label)`` items, or a pair ``(inputs, labels)`` of tensors indexed by sample along
their first dimension. A Dataset is materialised into two tensors when the workload is made
(``default_collate`` of its items, in order; a ``TensorDataset`` of two tensors is taken as it
is): the trainer indexes samples with tensors of indices, so the data lives in memory, as the
built-ins' does, and a malformed item is found when the workload is made, before any rank
starts. The size is ``len(dataset)`` (for a pair, the tensors' first dimension).

Every problem raises TypeError or ValueError naming ``Workload.from_parts`` and the part, so
that a workload file's import fails with a line that says what to fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import torch
from torch import nn
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import TensorDataset, default_collate

from validation.workloads.base import Dataset, Workload
from validation.workloads.plugins import a_kind

Data: TypeAlias = "TorchDataset[Any] | tuple[torch.Tensor, torch.Tensor]"  # what train and test may be
Loss: TypeAlias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
WHERE = "Workload.from_parts"


class PartsWorkload(Workload):
    """The workload :meth:`Workload.from_parts` makes: its data is the same for every seed."""

    def __init__(self, name: str, model_factory: Callable[[], nn.Module], train: Data, test: Data, loss: Loss) -> None:
        if not isinstance(name, str) or not name.strip() or ":" in name:
            raise ValueError(f"{WHERE}: name must be a non-empty string without ':', got {name!r}")
        for part, value in (("model_factory", model_factory), ("loss", loss)):
            if not callable(value):
                raise TypeError(f"{WHERE}: {part} must be callable, got {a_kind(value)}")
        self.name = name
        self._model_factory, self._loss = model_factory, loss
        self._train, self._test = as_tensors(train, "train"), as_tensors(test, "test")

    def has_accuracy(self) -> bool:
        return not self._test[1].is_floating_point()  # held already: nothing to load

    def train_size(self) -> int:
        return int(self._train[0].shape[0])

    def load(self, seed: int, device: torch.device) -> Dataset:
        """The given data on ``device``, whatever ``seed``."""
        (train_x, train_y), (test_x, test_y) = self._train, self._test
        return Dataset(train_x.to(device), train_y.to(device), test_x.to(device), test_y.to(device))

    def build_model(self) -> nn.Module:
        model = self._model_factory()
        if not isinstance(model, nn.Module):
            raise TypeError(f"{WHERE}: model_factory() returned {a_kind(model)}, not a torch.nn.Module")
        return model

    def loss(self, output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self._loss(output, labels)


def as_tensors(data: Any, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``data`` (a Dataset of ``(input, label)`` items, or a pair of tensors) as (inputs, labels),
    each indexed by sample along its first dimension; at least one sample."""
    if isinstance(data, TensorDataset) and len(data.tensors) == 2:
        data = data.tensors
    if isinstance(data, (tuple, list)):
        if len(data) != 2 or not all(isinstance(t, torch.Tensor) for t in data):
            raise TypeError(f"{WHERE}: {part}: a pair (inputs, labels) must hold two tensors, got {_kinds(data)}")
        inputs, labels = data
        if inputs.dim() == 0 or labels.dim() == 0 or inputs.shape[0] != labels.shape[0]:
            raise ValueError(
                f"{WHERE}: {part}: inputs and labels must have one entry per sample along their first "
                f"dimension, got shapes {tuple(inputs.shape)} and {tuple(labels.shape)}"
            )
        n = int(inputs.shape[0])
    elif isinstance(data, TorchDataset) and hasattr(data, "__len__"):
        n = len(data)
        inputs, labels = _collated(data, n, part) if n > 0 else (torch.empty(0), torch.empty(0))
    else:
        raise TypeError(
            f"{WHERE}: {part}: expected a torch.utils.data.Dataset (with a length) or a pair (inputs, labels) "
            f"of tensors, got {a_kind(data)}"
        )
    if n == 0:
        raise ValueError(f"{WHERE}: {part}: has no samples")
    return inputs, labels


def _collated(dataset: TorchDataset[Any], n: int, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``n`` items of ``dataset``, in order, collated into (inputs, labels)."""
    try:
        batch = default_collate([dataset[i] for i in range(n)])
    except Exception as exc:  # items of unequal shapes, or of a kind default_collate cannot stack
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{WHERE}: {part}: cannot stack its items into tensors: {first}") from None
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch)):
        raise TypeError(f"{WHERE}: {part}: each item must be an (input, label) pair, got {_kinds(batch)} collated")
    if batch[0].shape[0] != n or batch[1].shape[0] != n:
        raise ValueError(f"{WHERE}: {part}: its {n} items stack to {batch[0].shape[0]} inputs")
    return batch[0], batch[1]


def _kinds(values: Any) -> str:
    if isinstance(values, (tuple, list)):
        return f"{len(values)} item(s): {', '.join(type(v).__name__ for v in values)}"
    return a_kind(values)
