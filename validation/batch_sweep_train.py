"""One run of ``validation batch-sweep``: a workload trained at one global batch until its held-out
accuracy reaches a target, in this process (a world of one: steps to a target do not depend on
how a step's samples are cut across ranks under the weighted combine, so one process measures
them, and each step's time is its own compute, timed here).

Owns the training loop of a sweep point (:func:`train_to_target`) and what it records:

* the held-out curve, evaluated on a geometric grid (:func:`next_eval`): the next evaluation
  comes at most :data:`EVAL_SPACING` of the steps so far after the last, so the first step whose
  evaluation reaches the target is within that fraction of the true crossing (the issue asks 5%);
* the gradient noise scale over training, from the two halves of every step's batch
  (:mod:`validation.noise_scale`'s pair estimator, with the halves as two "ranks": each half's
  mean gradient against the whole batch's), summed over the blocks between evaluations;
* the learning rate of the batch by the named rule (:func:`scaled_lr`), for the optimizer named
  (:data:`OPTIMIZERS`: SGD with momentum 0.9, or Adam, whose square-root rule is Malladi et al.
  2022's).

The samples come from the shared epoch permutation (:func:`validation.sharding.epoch_permutation`,
seeded by the run's seed), taken in order, a batch never straddling two epochs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from hetsim.model.efficiency import lr_factor
from validation.noise_scale import NoiseScale
from validation.sharding import epoch_permutation
from validation.workloads.base import Dataset, Workload

EVAL_SPACING = 0.04  # the next evaluation is at most this fraction of the steps so far after the last
MOMENTUM = 0.9  # SGD's, as in validation run

MakeOptimizer = Callable[[Iterable[torch.nn.Parameter], float], torch.optim.Optimizer]
OPTIMIZERS: dict[str, MakeOptimizer] = {  # the command line's names; the training loop takes the factory
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=MOMENTUM),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
}


def scaled_lr(lr: float, batch: int, base_batch: int, rule: str) -> float:
    """``lr`` tuned at ``base_batch`` scaled to ``batch`` by ``rule`` (:func:`hetsim.model.efficiency.lr_factor`)."""
    return lr * lr_factor(rule, batch, base_batch)


def next_eval(step: int, min_gap: int = 1) -> int:
    """The step of the next held-out evaluation after one at ``step`` (at least ``min_gap`` on)."""
    return step + max(1, min_gap, int(EVAL_SPACING * step))


@dataclass
class PointResult:
    """What one (batch, seed) run measured."""

    batch: int
    seed: int
    lr: float
    steps_to_target: int | None = None
    time_to_target_s: float | None = None
    steps_run: int = 0
    mean_step_s: float = 0.0
    curve: list[dict[str, float]] = field(default_factory=list)  # step, samples, test_loss, test_accuracy
    noise: list[dict[str, float]] = field(default_factory=list)  # step (block end), grad_sq, trace, pairs

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in
                ("batch", "seed", "lr", "steps_to_target", "time_to_target_s", "steps_run", "mean_step_s")}  # fmt: skip


def _flat_grad_sq(model: torch.nn.Module) -> tuple[list[torch.Tensor], float]:
    """The parameters' gradients (cloned) and their squared norm."""
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    return grads, float(sum(float((g * g).sum()) for g in grads))


def _step(workload: Workload, model: torch.nn.Module, optimizer: torch.optim.Optimizer, data: Dataset,
          idx: torch.Tensor) -> tuple[list[float], list[int], float]:  # fmt: skip
    """One step on ``idx`` computed as two halves (their mean is the batch's gradient, as the
    loss is a per-sample mean); returns the halves' squared norms, sizes and the whole's."""
    halves = [h for h in (idx[: len(idx) // 2], idx[len(idx) // 2 :]) if len(h) > 0]
    parts: list[tuple[list[torch.Tensor], float]] = []
    for half in halves:
        optimizer.zero_grad(set_to_none=False)
        workload.loss(model(data.train_x[half]), data.train_y[half]).backward()
        parts.append(_flat_grad_sq(model))
    total = float(len(idx))
    sq = 0.0
    for k, p in enumerate(model.parameters()):  # the whole batch's gradient, weighted by the halves' sizes
        p.grad = sum((len(h) / total) * part[0][k] for h, part in zip(halves, parts))  # type: ignore[assignment]
        sq += float((p.grad * p.grad).sum())  # type: ignore[operator]
    optimizer.step()
    return [part[1] for part in parts], [len(h) for h in halves], sq


def train_to_target(workload: Workload, data: Dataset, seed: int, batch: int, lr: float,
                    make_optimizer: MakeOptimizer, target: float, max_steps: int,
                    min_gap: int = 1) -> PointResult:  # fmt: skip
    """Train a fresh model (``seed``'s weights) at ``batch`` with ``make_optimizer(parameters,
    lr)`` until an evaluation reaches ``target`` or ``max_steps`` steps."""
    model = workload.make_model(seed, torch.device("cpu"))
    optimizer = make_optimizer(model.parameters(), lr)
    out = PointResult(batch, seed, lr)
    n = data.n_train
    per_epoch = max(1, n // batch)
    block, elapsed_s, due = NoiseScale(), 0.0, 1
    perm = torch.as_tensor(epoch_permutation(seed, 0, n))
    for step in range(1, max_steps + 1):
        epoch, k = divmod(step - 1, per_epoch)
        if k == 0 and epoch > 0:
            perm = torch.as_tensor(epoch_permutation(seed, epoch, n))
        idx = perm[k * batch : (k + 1) * batch]
        start = time.perf_counter()
        local_sq, split, global_sq = _step(workload, model, optimizer, data, idx)
        elapsed_s += time.perf_counter() - start
        block.add_step(local_sq, split, global_sq)
        out.steps_run = step
        if step < due and step < max_steps:  # the last step is evaluated too: a run cut there needs more than it
            continue
        due = next_eval(step, min_gap)
        loss, accuracy = workload.evaluate(model, data)
        out.curve.append({"step": step, "samples": step * batch, "test_loss": loss, "test_accuracy": accuracy,
                          "elapsed_s": elapsed_s})  # fmt: skip
        out.noise.append({"step": step, "grad_sq": block.grad_sq, "trace": block.trace, "pairs": block.pairs})
        block = NoiseScale()
        if accuracy >= target:
            out.steps_to_target, out.time_to_target_s = step, elapsed_s
            break
    out.mean_step_s = elapsed_s / max(1, out.steps_run)
    return out
