"""Recovery after slowdown onsets: ``recovery_steps`` and ``recovered_share`` of a Summary.

An onset is a run of steps whose slowdown factors rise above the run's before. From there, the
steps until the split in use is within 5% of the optimum for the new speeds and the workers
then up (judged on expected, noise-free times) are its recovery. A policy that never re-splits
does not recover while the episode lasts; an onset closed by the speeds changing again (the
episode's end, or a new onset), or still open when the run ends, is not recovered from. So a
Summary gives two figures: the mean steps over the onsets recovered from (None where none was)
and the share of onsets recovered from (None without onsets). Counting the steps an unrecovered
onset lasted instead mixed episode lengths into the mean: a static split read as recovering in
about an episode's length, sooner than a policy that does recover, from longer episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from hetsim.model.partition import min_max_split, slowest_expected_s
from hetsim.policies.base import WorkerHint


class Run(NamedTuple):
    """Consecutive steps with the same slowdown factors, workers up and split, from ``first`` on."""

    first: int
    factors: np.ndarray
    up: np.ndarray
    batches: np.ndarray


class Recovered(NamedTuple):
    """The figures of a run's onsets: the mean steps to recover over those recovered from (None:
    none was) and their share of all onsets (None: no onset)."""

    steps: float | None
    share: float | None


class Recovery:
    """The onsets and their recovery, run by run (:class:`Run`s in order), in constant memory:
    at most one onset is open at a time, closed when the split recovers or when the factors or
    the workers up change (which a new onset does)."""

    def __init__(self, hints: Sequence[WorkerHint], within: float = 0.05) -> None:
        self.hints, self.within = hints, within
        self.previous: Run | None = None
        self.open: tuple[Run, list[WorkerHint], float] | None = None  # the onset, its speeds, its best step
        self.recovered: list[int] = []  # steps to recover, per onset recovered from
        self.onsets = 0  # onsets opened

    def add(self, run: Run) -> None:
        if self.open is not None:
            onset = self.open[0]
            if not (np.array_equal(run.factors, onset.factors) and np.array_equal(run.up, onset.up)):
                self.open = None  # conditions changed before the split recovered
            else:
                self._close_if_recovered(run)
        previous, self.previous = self.previous, run
        if previous is None or not (run.factors > previous.factors).any():
            return
        slowed = [replace(h, noise_mean=h.noise_mean * f) for h, f in zip(self.hints, run.factors)]  # its speeds
        caps = [h.max_batch if u else 0 for h, u in zip(self.hints, run.up)]
        global_batch = int(run.batches.sum())  # the onset's (a policy that varies_batch changes it)
        if sum(caps) >= global_batch:  # else no split of the workers up holds the batch: not counted
            self.onsets += 1
            self.open = (run, slowed, slowest_expected_s(slowed, min_max_split(slowed, global_batch, caps)))
            self._close_if_recovered(run)

    def _close_if_recovered(self, run: Run) -> None:
        assert self.open is not None
        onset, slowed, best = self.open
        if slowest_expected_s(slowed, run.batches) <= (1 + self.within) * best:
            self.recovered.append(run.first - onset.first)
            self.open = None

    def figures(self) -> Recovered:
        """The mean steps to recover and the share of onsets recovered from (:class:`Recovered`)."""
        steps = float(np.mean(self.recovered)) if self.recovered else None
        return Recovered(steps, len(self.recovered) / self.onsets if self.onsets else None)


def recovery(runs: Sequence[Run], hints: Sequence[WorkerHint], within: float = 0.05) -> Recovered:
    """After each slowdown onset among ``runs``, the steps until the split in use is within
    ``within`` of the optimum for the new speeds and the workers then up, while those last
    (module docstring)."""
    found = Recovery(hints, within)
    for run in runs:
        found.add(run)
    return found.figures()
