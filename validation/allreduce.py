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


_REUSED: dict[tuple[int, torch.dtype, bool], torch.Tensor] = {}  # host buffers, one per length, type and pinning


def host_buffer(numel: int, dtype: torch.dtype = torch.float32, pinned: bool = False) -> torch.Tensor:
    """A host buffer of ``numel`` values, made once per length, type and pinning and then the
    same every step (the all-reduce and :func:`unpack` are done with it before the next step
    packs; steps run one at a time). Pinned for a GPU rank whose collectives run on the host: a
    device-to-host copy into pageable memory is synchronous and runs at a fraction of the bus's
    speed (the driver stages it through a pinned bounce buffer), into pinned memory it is one DMA
    transfer. Pageable for a CPU rank: a fresh buffer past glibc's largest mmap threshold (32 MB:
    a ResNet-18's gradient is 45 MB) is mapped anew and returned to the kernel every step, so
    each step paid one page fault per 4 KiB of gradient inside its compute time (DDP's buckets
    too are made once)."""
    buffer = _REUSED.get((numel, dtype, pinned))
    if buffer is None:
        buffer = _REUSED[(numel, dtype, pinned)] = torch.empty(numel, dtype=dtype, pin_memory=pinned)
    return buffer


def buffer_dtype(params: Sequence[torch.nn.Parameter]) -> torch.dtype:
    """The flat buffer's type: float32, or wider where a parameter is (a float64 model's gradient
    is combined in float64; a half one's in float32, and cast back by :func:`unpack`)."""
    dtype = torch.float32
    for p in params:
        dtype = torch.promote_types(dtype, p.dtype)
    return dtype


def gradient_bytes(params: Iterable[torch.nn.Parameter]) -> int:
    """The bytes a step all-reduces: every parameter's gradient in :func:`buffer_dtype` (what DDP
    sends too, bucket by bucket in the parameters' type, for float32 and float64 models)."""
    params = list(params)
    return sum(p.numel() for p in params) * buffer_dtype(params).itemsize


def pack(params: Iterable[torch.nn.Parameter], weight: float, device: torch.device) -> torch.Tensor:
    """One flat buffer (:func:`buffer_dtype`) of ``weight * grad`` over ``params`` (zeros where a
    grad is missing) on ``device``: concatenated and scaled where the gradients are (on a GPU: one
    kernel each, not one CPU thread over the whole gradient), then, for a GPU rank whose
    collectives run on the host (gloo, ``cuda:0,cpu``), copied once into a pinned host buffer.
    Host buffers are :func:`host_buffer`'s, the same one every step."""
    params = list(params)
    dtype = buffer_dtype(params)
    parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1) for p in params]
    if parts and parts[0].device.type == "cpu":
        flat = host_buffer(sum(part.numel() for part in parts), dtype)
        if all(part.dtype == dtype for part in parts):
            torch.cat(parts, out=flat)
        else:
            flat.copy_(torch.cat(parts))
    else:
        flat = torch.cat(parts).to(dtype=dtype)
    flat.mul_(weight)
    if flat.device == device:
        return flat
    if flat.device.type == "cuda" and device.type == "cpu":
        host = host_buffer(flat.numel(), flat.dtype, pinned=True)
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
            p.grad = chunk.to(dtype=p.dtype, copy=True)
        else:
            p.grad.copy_(chunk)
        offset += n


def combine(flat: torch.Tensor, total_weight: float) -> torch.Tensor:
    """All-reduce SUM of the ranks' weighted buffers, divided by the total weight (in place)."""
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    return flat.div_(total_weight)
