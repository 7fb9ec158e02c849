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


_STAGING: dict[int, torch.Tensor] = {}  # pinned host buffers by length: a GPU rank's under gloo, reused every step


def staging_buffer(numel: int) -> torch.Tensor:
    """A page-locked (pinned) float32 host buffer of ``numel`` values, made once per length: a
    device-to-host copy into pageable memory is synchronous and runs at a fraction of the bus's
    speed (the driver stages it through a pinned bounce buffer), into pinned memory it is one
    DMA transfer."""
    buffer = _STAGING.get(numel)
    if buffer is None:
        buffer = _STAGING[numel] = torch.empty(numel, dtype=torch.float32, pin_memory=True)
    return buffer


def pack(params: Iterable[torch.nn.Parameter], weight: float, device: torch.device) -> torch.Tensor:
    """One flat float32 buffer of ``weight * grad`` over ``params`` (zeros where a grad is
    missing) on ``device``: concatenated and scaled where the gradients are (on a GPU: one kernel
    each, not one CPU thread over the whole gradient), then, for a GPU rank whose collectives run
    on the host (gloo, ``cuda:0,cpu``), copied once into a pinned host buffer (:func:`staging_buffer`,
    the same one every step: the all-reduce and :func:`unpack` are done with it before the next
    step packs). On CPU a fresh tensor, as before."""
    parts = []
    for p in params:
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        parts.append(g.detach().reshape(-1))
    flat = torch.cat(parts).to(dtype=torch.float32)
    flat.mul_(weight)
    if flat.device == device:
        return flat
    if flat.device.type == "cuda" and device.type == "cpu":
        host = staging_buffer(flat.numel())
        host.copy_(flat, non_blocking=True)
        torch.cuda.current_stream(flat.device).synchronize()  # the host's all-reduce reads it next
        return host
    return flat.to(device)


def unpack(flat: torch.Tensor, params: Iterable[torch.nn.Parameter]) -> None:
    """Write the combined gradient back into every parameter's ``.grad``: the whole buffer moved
    to the parameters' device in one copy (asynchronous from a pinned buffer; the copies into
    ``.grad`` follow it on the same stream), then a view per parameter."""
    params = list(params)
    if params and flat.device != params[0].device:
        flat = flat.to(params[0].device, non_blocking=flat.is_pinned())
    offset = 0
    for p in params:
        n = p.numel()
        chunk = flat[offset : offset + n].view_as(p)
        if p.grad is None:
            p.grad = chunk.clone()
        else:
            p.grad.copy_(chunk)
        offset += n


def combine(flat: torch.Tensor, total_weight: float) -> torch.Tensor:
    """All-reduce SUM of the ranks' weighted buffers, divided by the total weight (in place)."""
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    return flat.div_(total_weight)
