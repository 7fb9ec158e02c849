"""Every worker's random numbers of each step: its noise factor and its delay.

Counter-based, so that a whole cluster's draws are a few NumPy calls whatever its size. Each
purpose (noise, delay, a shared group's noise) has one generator,
``PCG64(SeedSequence(seed, spawn_key=(purpose,)))``, whose ``random()`` sequence (one 64-bit
output per uniform) is cut into tiles of :data:`TILE_STEPS` (``T``) steps: the uniform of slot
``i`` at step ``t`` is number ``(t // T) T S + i T + t % T``, ``S`` = :data:`SLOTS`, reached
with ``PCG64.advance``. Worker ``i`` owns slot ``i``; a shared-noise group draws from its first
member's slot. So a worker's uniform of step ``t`` depends on (seed, purpose, worker, t) only:
not on the cluster's size, the split, the policy, the engine, or how steps are grouped into
blocks; and the uniforms of every worker for a tile are one call.

Each uniform becomes a draw through the distribution's quantile function
(:meth:`~hetsim.model.distributions.Distribution.ppf`), a group of workers with the same law at a
time, many tiles in one call. A persistent lognormal factor (``persistence`` rho,
:mod:`hetsim.model.workers`) takes ``ndtri(u)`` as its innovation: ``Z_0 = sigma eps_0`` (the
stationary start), then ``Z_t = rho Z_{t-1} + sigma sqrt(1 - rho^2) eps_t`` element by element,
in order, its state carried from one batch of tiles to the next (tiles are made in order), and
``X_t = exp(-sigma^2/2 + Z_t)``. A member of a shared group multiplies its own factor by the
group's of the same step.

Under ``async`` a worker's "step" is its update count: its n-th compute takes its n-th draws,
and every member of a shared group its group's n-th factor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from hetsim.core.errors import ConfigError
from hetsim.model.distributions import Distribution
from hetsim.model.nonnegative import first_invalid
from hetsim.model.workers import DELAY_PURPOSE, NOISE_PURPOSE, SHARED_PURPOSE, WorkerSpec, index_groups

TILE_STEPS = 16  # steps per tile: every worker's uniforms of a tile are one stretch of the sequence
SLOTS = 1 << 40  # slots per tile in the sequence: more than any cluster has workers
CHUNK_ELEMENTS = 1 << 20  # rows() hands out about this many worker-steps per buffer


class Uniforms:
    """One purpose's uniforms, read forward: tile by tile, each for some slots."""

    def __init__(self, seed: int, purpose: int) -> None:
        self.bits = np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(purpose,)))
        self.generator = np.random.Generator(self.bits)
        self.position = 0  # the number of the next uniform in the sequence

    def tiles(self, first_tile: int, count: int, slots: np.ndarray) -> np.ndarray:
        """Tiles ``first_tile`` to ``first_tile + count - 1`` for ``slots`` (increasing, not
        before any slot already read in the first), as (count T x slots)."""
        low, width = int(slots[0]), int(slots[-1]) + 1
        out = np.empty((count, width - low, TILE_STEPS))
        for k in range(count):
            start = ((first_tile + k) * SLOTS + low) * TILE_STEPS
            if start < self.position:
                raise ValueError(f"uniforms are read forward: {start} is behind {self.position}")
            self.bits.advance(start - self.position)  # one 64-bit output per uniform: skip to the slot
            self.generator.random(out=out[k].reshape(-1))
            self.position = start + out[k].size
        if width - low != len(slots):
            out = out[:, slots - low]
        return np.ascontiguousarray(out.transpose(0, 2, 1)).reshape(count * TILE_STEPS, len(slots))


class _Law:
    """One distribution (and persistence) for some columns: its draws from their uniforms."""

    def __init__(self, dist: Distribution, persistence: float, columns: np.ndarray) -> None:
        self.dist, self.rho, self.columns = dist, persistence, columns
        self.sigma = dist.log_normal_sigma() or 0.0
        self.state: np.ndarray | None = None  # Z of the last step made, per column

    def take(self, u: np.ndarray) -> np.ndarray:
        if self.rho == 0:
            return self.dist.ppf(u)
        eps = special.ndtri(u)
        z = eps * (self.sigma * math.sqrt(1.0 - self.rho * self.rho))
        if self.state is None:
            z[0] = self.sigma * eps[0]  # the stationary start
        else:
            z[0] += self.rho * self.state
        for t in range(1, len(z)):  # in order: each step's Z from the one before
            z[t] += self.rho * z[t - 1]
        self.state = z[-1].copy()
        z -= 0.5 * self.sigma * self.sigma
        return np.exp(z, out=z)


class _Purpose:
    """One purpose's draws for some slots: their uniforms through the slots' laws."""

    def __init__(self, seed: int, purpose: int, slots: np.ndarray, dists: Sequence[Distribution],
                 persistence: np.ndarray) -> None:  # fmt: skip
        self.uniforms, self.slots = Uniforms(seed, purpose), slots
        self.laws = [
            _Law(dist, float(rho), columns[persistence[columns] == rho])
            for dist, columns in index_groups(dists)
            for rho in np.unique(persistence[columns])
        ]
        self.random = any(not law.dist.is_constant for law in self.laws)

    def tiles(self, first_tile: int, count: int) -> np.ndarray:
        """The draws of ``count`` tiles from ``first_tile``, as (count T x slots)."""
        shape = (count * TILE_STEPS, len(self.slots))
        u = self.uniforms.tiles(first_tile, count, self.slots) if self.random else np.zeros(shape)
        if len(self.laws) == 1:
            return self.laws[0].take(u)
        out = np.empty(shape)
        for law in self.laws:
            out[:, law.columns] = law.take(u[:, law.columns])
        return out


class StepDraws:
    """Every worker's noise factor and delay, by step, made a batch of tiles at a time, in order.

    ``rows`` serves a reader that moves forward (the barrier engines), ``take`` an exact count
    of rows, ``at`` one worker's draws of any step made so far or later (the async event loop,
    whose workers move at their own pace; it keeps every tile it made)."""

    def __init__(self, seed: int, workers: Sequence[WorkerSpec], steps: int | None = None) -> None:
        self.n, self.steps = len(workers), steps  # steps: the run's, when known (a forward reader's buffers reach it)
        self.names = [w.name for w in workers]
        everyone = np.arange(self.n)
        persistence = np.array([w.persistence for w in workers])
        self.noise = _Purpose(seed, NOISE_PURPOSE, everyone, [w.noise for w in workers], persistence)
        self.delay = _Purpose(seed, DELAY_PURPOSE, everyone, [w.delay for w in workers], np.zeros(self.n))
        groups: dict[str, list[int]] = {}
        for i, w in enumerate(workers):
            if w.shares_noise:
                assert w.shared_noise is not None
                groups.setdefault(w.shared_noise.group, []).append(i)
        self.members = np.array([i for m in groups.values() for i in m], dtype=np.intp)
        self.group_of = np.repeat(np.arange(len(groups)), [len(m) for m in groups.values()])
        firsts = np.array([m[0] for m in groups.values()], dtype=np.intp)
        shared = [s for s in (workers[f].shared_noise for f in firsts) if s is not None]
        self.shared = None
        if shared:
            rho = np.array([s.persistence for s in shared])
            self.shared = _Purpose(seed, SHARED_PURPOSE, firsts, [s.dist for s in shared], rho)
        self.made = 0  # tiles made
        self.kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # tiles made by at()
        self.first, self.buffer = 0, (np.empty((0, self.n)), np.empty((0, self.n)))

    def _make(self, first_tile: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Tiles ``first_tile`` to ``first_tile + count - 1``, as (count T x workers); the tiles
        before them are made first if they were not (a persistent factor runs through them)."""
        if first_tile > self.made:
            self._make(self.made, first_tile - self.made)
        noise = self.noise.tiles(first_tile, count)
        if self.shared is not None:
            noise[:, self.members] *= self.shared.tiles(first_tile, count)[:, self.group_of]
        self.made = first_tile + count
        delay = self.delay.tiles(first_tile, count)
        _check_drawn(noise, "noise factor", self.names)
        _check_drawn(delay, "delay", self.names)
        return noise, delay

    def rows(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(noise, delay) of steps ``first``, ``first + 1``, ..., at least one and at most
        ``count`` rows, as (rows x workers) views; ``first`` never below the last asked. A new
        buffer holds up to about :data:`CHUNK_ELEMENTS` numbers: the tiles up to the run's last
        step when it is known (a few large calls instead of many small ones), else those of the
        ``count`` rows."""
        if first >= self.first + len(self.buffer[0]):
            j = first // TILE_STEPS
            end = first + count if self.steps is None else max(first + count, self.steps)  # the last row + 1
            wanted = -(-end // TILE_STEPS) - j
            self.first = j * TILE_STEPS
            self.buffer = self._make(j, max(1, min(wanted, CHUNK_ELEMENTS // (self.n * TILE_STEPS))))
        lo = first - self.first
        hi = min(lo + count, len(self.buffer[0]))
        return self.buffer[0][lo:hi], self.buffer[1][lo:hi]

    def take(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Exactly ``count`` rows from ``first`` (a forward reader, as for :meth:`rows`), views
        where they lie in one buffer."""
        parts = []
        while count > 0:
            part = self.rows(first, count)
            parts.append(part)
            first, count = first + len(part[0]), count - len(part[0])
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def at(self, worker: int, step: int) -> tuple[float, float]:
        """Worker ``worker``'s (noise, delay) of step ``step``."""
        j = step // TILE_STEPS
        while self.made <= j:
            tile = self.made
            self.kept[tile] = self._make(tile, 1)
        noise, delay = self.kept[j]
        row = step % TILE_STEPS
        return float(noise[row, worker]), float(delay[row, worker])


def _check_drawn(drawn: np.ndarray, what: str, names: Sequence[str]) -> None:
    """Refuse draws that are not finite numbers >= 0 (a plug-in distribution's ``ppf``): a time of
    nan or below zero cannot be ordered, and a clock of nan stood the vector engine still."""
    found = first_invalid(drawn)
    if found is None:
        return
    row, column = found
    raise ConfigError(
        what, f"worker {names[column]} drew {float(drawn[row, column])!r}: a {what} must be a finite number >= 0 "
        "(its distribution's ppf)"
    )  # fmt: skip
