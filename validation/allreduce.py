"""Combining the ranks' gradients into one update.

Each rank computes ``g_i``, the mean gradient over its ``b_i`` samples (zero when ``b_i = 0``),
packs ``w_i * g_i`` of every parameter into one flat buffer, the buffers are summed with one
all-reduce, and the sum is divided by ``W = sum_i w_i``. With ``w_i = b_i`` (the default, and
the correct update of docs/architecture.md) the result is ``sum_i (b_i / B) g_i``: exactly the mean
gradient over the union of the local batches, whatever the split. With ``w_i = 1`` for every
rank that got samples it is the plain mean of the ranks' gradients, the paper's DP-SGD, which
over-weights the samples of ranks with small shares whenever the split is uneven.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.distributed as dist


def gradient_weights(split: Sequence[int], weighted: bool) -> tuple[float, ...]:
    """``w_i``: ``b_i`` (weighted) or 1 for every rank with samples (plain mean)."""
    return tuple(float(b) if weighted else float(b > 0) for b in split)


def pack(params: Iterable[torch.nn.Parameter], weight: float, device: torch.device) -> torch.Tensor:
    """One flat buffer of ``weight * grad`` over ``params`` (zeros where a grad is missing)."""
    parts = []
    for p in params:
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        parts.append(g.detach().reshape(-1))
    flat = torch.cat(parts).to(device=device, dtype=torch.float32)
    return flat.mul_(weight)


def unpack(flat: torch.Tensor, params: Iterable[torch.nn.Parameter]) -> None:
    """Write the combined gradient back into every parameter's ``.grad``."""
    offset = 0
    for p in params:
        n = p.numel()
        chunk = flat[offset : offset + n].view_as(p).to(p.device)
        if p.grad is None:
            p.grad = chunk.clone()
        else:
            p.grad.copy_(chunk)
        offset += n


def combine(flat: torch.Tensor, total_weight: float) -> torch.Tensor:
    """All-reduce SUM of the ranks' weighted buffers, divided by the total weight (in place)."""
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    return flat.div_(total_weight)
