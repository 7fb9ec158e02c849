"""``torch.profiler`` traces of a few training steps: :class:`StepProfiler`, the hook behind
``validation run --profile STEPS`` and any script's ``run_steps(..., profiler=...)``.

One :class:`StepProfiler` records one segment (a policy) on one rank: the Kineto JSON trace of
its next ``steps`` steps, with ``record_shapes=True`` (so the local batch can be read from the
operators' input shapes) and ``ProfilerStep#N`` marking each step, as ``profiler.step()`` marks
a user's training loop. The trace is written, gzipped, to ``path`` (e.g.
``RUN/profiler/<policy>-rank<R>.json.gz``) when the last step ends, and is what ``python -m
hetsim import-trace --format torch-profiler`` reads.

The schedule is one warm-up step (Kineto's start-up cost stays out of the recorded steps) and
then ``steps`` recorded ones: ``ProfilerStep#1`` .. ``ProfilerStep#<steps>``. The step marker
opens when a step starts and closes when the next one starts (``profiler.step()`` after each
step): the few microseconds of the loop between two steps land in the later one. The trace's
top level also carries ``hetsim_segment`` (the importer names the trace's policy after it) and
``hetsim_first_step`` (the segment's step counter at ``ProfilerStep#0``: ``validation run``
starts each policy's profiler at its step 0, so ``ProfilerStep#N`` is the policy's step N).

:meth:`StepProfiler.close` ends a profiler whose block of steps ran out first (the trace of the
steps it recorded); :func:`segment_profilers` makes one per policy for ``validation run``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

WARMUP_STEPS = 1  # steps profiled but not recorded before the recorded ones


def profile_path(folder: str | Path, segment: str, rank: int) -> Path:
    """``folder/<segment>-rank<R>.json.gz``: one trace per segment per rank."""
    return Path(folder) / f"{segment}-rank{rank}.json.gz"


class StepProfiler:
    """The next ``steps`` steps of one segment on this rank, profiled (see the module's docstring).

    Use :meth:`step` around each step (``run_steps`` does when given one); steps after the
    recorded ones run unprofiled. ``first_step``: the segment's step counter when profiling
    starts (written into the trace as ``hetsim_first_step``)."""

    def __init__(self, path: str | Path, steps: int, segment: str = "", first_step: int = 0) -> None:
        if steps < 1:
            raise ValueError(f"steps: profile at least 1 step, got {steps}")
        self.path, self.steps, self.segment, self.first_step = Path(path), steps, segment, first_step
        self.seen = 0  # steps run inside this profiler so far (warm-up included)
        self.done = False
        self._prof: profile | None = None

    def _start(self) -> profile:
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        prof = profile(
            activities=activities,
            record_shapes=True,
            schedule=schedule(wait=0, warmup=WARMUP_STEPS, active=self.steps, repeat=1),
            on_trace_ready=self._write,
        )
        prof.start()  # metadata only after the start: Kineto drops what comes before
        prof.add_metadata_json("hetsim_segment", json.dumps(self.segment))
        prof.add_metadata_json("hetsim_first_step", json.dumps(self.first_step))
        return prof

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step: profiled while the profiler has steps left; the trace written after the last."""
        if self.done:
            yield
            return
        if self._prof is None:
            self._prof = self._start()
        try:
            yield
        finally:
            self.seen += 1
            self._prof.step()  # closes ProfilerStep#(seen-1); after the last recorded one, writes the trace
            if self.seen >= WARMUP_STEPS + self.steps:
                self._prof.stop()
                self._prof, self.done = None, True

    def _write(self, prof: profile) -> None:
        """The trace, gzipped (torch gzips a ``.gz`` name), written to a temporary file and renamed."""
        if self.seen <= WARMUP_STEPS:
            return  # stopped in the warm-up step: nothing recorded
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".json.gz", dir=self.path.parent)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 is not what a written file gets
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def close(self) -> None:
        """Stop a profiler whose steps ran out before its recorded ones did: the trace of the
        steps it has (none written when it never recorded one)."""
        if self._prof is not None:
            prof, self._prof, self.done = self._prof, None, True
            prof.stop()  # writes the trace (torch calls on_trace_ready when it stops a recording)


def segment_profilers(folder: str | Path, segments: list[str], rank: int, steps: int) -> dict[str, StepProfiler]:
    """One profiler per segment for this rank (``steps`` = 0: none), writing ``folder/<segment>-rank<R>.json.gz``."""
    if steps <= 0:
        return {}
    return {name: StepProfiler(profile_path(folder, name, rank), steps, name) for name in segments}
