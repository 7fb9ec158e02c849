"""Freed memory kept in the process, so that a timed step does not take it back from the kernel.

glibc's malloc returns memory to the kernel as it goes: a block past its mmap threshold is
unmapped when freed, and free space at the heap's top is trimmed past the trim threshold, both
thresholds moving with what the process last freed. A CPU training step frees and allocates its
activations and gradients every step, so a step of a large model could fault tens of megabytes
back in (one page fault per 4 KiB, inside the compute time), or none, depending on what ran
before it: models trained in turn in one process (``validation run``'s policies) settled into
different layouts and measured the same split several percent apart. :func:`keep_freed_memory`
fixes both thresholds (``mallopt``, the setting ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` make at start-up), so that after the first steps every step reuses
the memory the last one freed. :class:`~validation.uneven.UnevenStep` calls it (``keep_memory``)
and so does ``validation profile``, so that a profile and your own run measure the same steps.
The price: the process keeps its peak memory until it ends, as PyTorch's CUDA allocator does.
"""

from __future__ import annotations

import ctypes
from functools import cache

M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # the largest glibc accepts on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD_BYTES = 2**31 - 1  # mallopt takes an int: trim only past 2 GiB of free top


@cache  # the setting is the process's: every UnevenStep (one per model) and the profile ask, once is enough
def keep_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds for the rest of the process; False where the C library
    has no ``mallopt`` (macOS) or refuses the values (a block past 32 MB is still unmapped when
    freed: keep such buffers, as :func:`validation.allreduce.host_buffer` does)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    mapped = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return bool(mapped) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
