"""``--comm ddp``: the model inside ``torch.nn.parallel.DistributedDataParallel``, with its
gradient all-reduce bucketed and overlapped with backward, as real training does.

Two things need care:

* **Weighting.** DDP averages the ranks' gradients: ``(1/W) sum_i grad_i``. Rank i's loss is
  scaled by ``W w_i / sum_j w_j`` (``w_i = b_i``, or 1 for ranks with samples under the paper's
  plain mean), so the average is ``sum_i (w_i / sum_j w_j) g_i``: with ``w_i = b_i`` exactly the
  gradient of the union of the shards (see :mod:`validation.allreduce` for the flat path). A
  rank with no samples still has to take part in every bucket's all-reduce: it runs one sample
  with the loss scaled by zero, so its gradient is zero.
* **Timing.** Inside DDP a rank's backward does not return before every bucket's all-reduce, so
  the slowest rank's time leaks into everybody's backward (a 200 ms delay on one rank would be
  invisible to per-rank wall times). :class:`ReadyClock` is a communication hook: it notes when
  the *last* bucket of the rank's backward is ready (the end of the rank's own compute),
  applies the rank's injected delay just before that, and then starts the bucket's all-reduce
  as DDP's default hook does. On a GPU the note is a CUDA event on the current stream, read
  after the step's synchronisation; on a CPU it is ``perf_counter``.
* **The injected delay on a GPU.** The hook runs when the host has *queued* the last bucket's
  gradients, not when the GPU has computed them. Sleeping there would overlap the queued work
  (the step would measure about max(GPU time, launch time + delay), and ``--slowdown`` would
  scale the host's launch time). So the hook first waits for the current stream (the rank's own
  forward and backward; not the NCCL streams, where earlier buckets' all-reduces wait for the
  peers), then sleeps, then notes the ready event: the delay adds its whole length, as on the
  flat path (which synchronises the device before sleeping), and ``--slowdown`` scales the
  synchronised forward-and-backward wall time, on both paths.

No ``from __future__ import annotations`` here: DDP checks the hook's annotations at run time.
"""

import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel


def loss_scale(weights: Sequence[float], rank: int) -> float:
    """``W w_i / sum_j w_j``: DDP's average of the scaled gradients is the weighted combination."""
    total = float(sum(weights))
    return len(weights) * float(weights[rank]) / total if total > 0 else 0.0


class ReadyClock:
    """When this rank's own backward finished, seen from inside DDP (see the module's docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.before_last: Callable[[], object] = lambda: None
        self._start: float | torch.cuda.Event = 0.0
        self._ready: float | torch.cuda.Event = 0.0

    def _now(self) -> float | torch.cuda.Event:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self, before_last: Callable[[], object]) -> None:
        """The step's compute starts now; ``before_last`` runs when the last bucket is ready."""
        self.before_last = before_last
        self._start = self._ready = self._now()

    def hook(self, state: dist.ProcessGroup | None, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if bucket.is_last():
            if self.cuda:
                torch.cuda.current_stream().synchronize()  # the rank's own kernels, before it sleeps
            self.before_last()
            self._ready = self._now()
        return allreduce_hook(state, bucket)  # type: ignore[arg-type]

    def compute_s(self) -> float:
        """Seconds from :meth:`start` to the last bucket (call after the device is synchronised)."""
        if isinstance(self._start, torch.cuda.Event) and isinstance(self._ready, torch.cuda.Event):
            return float(self._start.elapsed_time(self._ready)) / 1e3
        assert isinstance(self._start, float) and isinstance(self._ready, float)
        return self._ready - self._start


def wrap(model: torch.nn.Module, device: torch.device, clock: ReadyClock) -> DistributedDataParallel:
    """``model`` inside DDP (parameters broadcast from rank 0), its all-reduce timed by ``clock``."""
    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    ddp.register_comm_hook(None, clock.hook)
    return ddp
