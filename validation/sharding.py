"""Which samples each rank trains on.

Every epoch has one permutation of the training set, shared by all ranks (a NumPy generator
seeded with ``(seed, stream, epoch)``, so every policy sees the same order). Step k of the epoch takes
the window ``perm[k*B : (k+1)*B]`` and cuts it into contiguous slices in rank order by the
step's split: rank i gets ``b_i`` samples starting at ``b_0 + ... + b_{i-1}``. Shards are
therefore disjoint and cover the window exactly; over an epoch they cover the first
``steps_per_epoch * B`` samples of the permutation (the ``n mod B`` left over are dropped, a
different few each epoch).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def steps_per_epoch(n_samples: int, global_batch: int) -> int:
    """Full global batches per epoch."""
    if global_batch < 1 or n_samples < global_batch:
        raise ValueError(f"{n_samples} samples make no step of {global_batch}")
    return n_samples // global_batch


TRAINING, WARMUP, PROBE = 0, 1, 2  # separate streams of permutations


def epoch_permutation(seed: int, epoch: int, n_samples: int, stream: int = TRAINING) -> np.ndarray:
    """The epoch's shared order of sample indices (``stream`` keeps warm-up and probe orders apart)."""
    return np.random.default_rng([seed, stream, epoch]).permutation(n_samples)


def shard_bounds(split: Sequence[int], rank: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s slice within the step's window."""
    start = int(sum(split[:rank]))
    return start, start + int(split[rank])


def local_indices(perm: np.ndarray, step_in_epoch: int, split: Sequence[int], rank: int) -> np.ndarray:
    """Sample indices of ``rank`` in step ``step_in_epoch`` of the epoch ordered by ``perm`` (the
    epoch's shared permutation, :func:`epoch_permutation`): the step's window of ``sum(split)``
    samples cut in rank order, ``split[rank]`` of them for this rank (none where it is 0), so
    that the ranks' slices are disjoint and cover the window exactly. ``validation.uneven``
    exports it as ``rank_samples``."""
    total = int(sum(split))
    window = perm[step_in_epoch * total : (step_in_epoch + 1) * total]
    if window.size != total:
        raise ValueError(f"step {step_in_epoch} of {total} samples runs past the {perm.size} samples of the epoch")
    start, stop = shard_bounds(split, rank)
    return window[start:stop]
