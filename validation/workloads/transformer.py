"""``transformer``: a small GPT-style causal language model, byte-level, on real text that ships
with Python itself (the source files of a fixed list of pure-Python standard-library modules; no
download).

Owns the text (:func:`corpus`), its cut into samples (:func:`byte_split`), the model
(:class:`TinyGPT`) and the workload. The text is the modules' source bytes, concatenated in the
order of :data:`MODULES`, so it is the same for a given Python version; it is cut into
non-overlapping windows of ``T + 1`` bytes (input: the first ``T``, target: the next ``T``). The
windows are shuffled once with the seed; the first :data:`N_TRAIN` train, the last :data:`N_TEST`
of the first ``N_TRAIN + N_TEST`` are held out, so the training set has a constant size whatever
the version's text (a text too short for it is an error). The vocabulary is the 256 byte values.

The loss is the mean token cross-entropy; every sample has ``T`` tokens, so it is the mean over
samples of each sample's mean over its tokens, as :class:`~validation.workloads.base.Workload`
requires. The blocks use LayerNorm (per token, so per sample) and no dropout: the weighted
combination of shard gradients is exactly the gradient of their union.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from validation.workloads.base import Dataset, Workload
from validation.workloads.sweep_defaults import SweepDefaults

# Pure-Python modules of the standard library, read from their source files (no download).
MODULES = (
    "heapq",
    "shlex",
    "string",
    "textwrap",
    "calendar",
    "fractions",
    "functools",
    "statistics",
    "dataclasses",
    "glob",
)
VOCAB = 256  # bytes
T = 64  # context length: tokens per sample
N_TRAIN = 2048
N_TEST = 512  # 20% of the samples used
D_MODEL = 128
N_HEADS = 4
N_LAYERS = 2


def corpus() -> bytes:
    """The source bytes of :data:`MODULES`, concatenated in that order."""
    parts = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None or not origin.endswith(".py"):
            raise RuntimeError(f"the standard-library module {name!r} has no Python source here ({origin})")
        parts.append(Path(origin).read_bytes())
    return b"".join(parts)


def byte_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train inputs, train targets, held-out inputs, held-out targets: int64 arrays N x T of byte
    values, from the corpus's windows of ``T + 1`` bytes shuffled once with ``seed``."""
    text = np.frombuffer(corpus(), dtype=np.uint8).astype(np.int64)
    n_windows = text.size // (T + 1)
    if n_windows < N_TRAIN + N_TEST:
        raise RuntimeError(
            f"the standard-library text has {n_windows} windows of {T + 1} bytes, fewer than {N_TRAIN + N_TEST}"
        )
    windows = text[: n_windows * (T + 1)].reshape(n_windows, T + 1)
    order = np.random.default_rng(seed).permutation(n_windows)[: N_TRAIN + N_TEST]
    train, test = windows[order[:N_TRAIN]], windows[order[N_TRAIN:]]
    return train[:, :-1], train[:, 1:], test[:, :-1], test[:, 1:]


class Block(nn.Module):
    """A pre-norm decoder block: causal self-attention, then a 4x-wide GELU MLP, each residual."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(n, t, d))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """Token and learned position embeddings, :data:`N_LAYERS` causal blocks, a final LayerNorm
    and a linear head to byte logits (N x T x 256). GPT-2's initialisation: normal(0, 0.02)
    weights, zero biases, so the initial loss is close to ln(256)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, D_MODEL)
        self.positions = nn.Embedding(T, D_MODEL)
        self.blocks = nn.Sequential(*(Block(D_MODEL, N_HEADS) for _ in range(N_LAYERS)))
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)
        h = self.blocks(self.tokens(x) + self.positions(positions))
        logits: torch.Tensor = self.head(self.norm(h))
        return logits


class ByteTransformer(Workload):
    name = "transformer"

    classes = True  # its labels are classes: has_accuracy needs no data
    # Adam: under SGD (momentum 0.9) it sits at the most frequent byte's accuracy for hundreds of steps
    # and its larger batches diverge at any learning rate that moves it. Evaluating costs tens of steps.
    sweep_defaults = SweepDefaults(8, "adam", 1e-3, 0.40, 2000, 1000, 10)

    def train_size(self) -> int:
        return N_TRAIN

    def load(self, seed: int, device: torch.device) -> Dataset:
        train_x, train_y, test_x, test_y = (
            torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in byte_split(seed)
        )
        return Dataset(train_x, train_y, test_x, test_y)

    def build_model(self) -> nn.Module:
        return TinyGPT()

    def loss(self, output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), labels.reshape(-1))


WORKLOAD = ByteTransformer()
