"""The calibration probe: its plan of splits, when its rounds run, and the costs fitted from it.

In each round, for each fraction f of the global batch and each rank r, rank r gets f of the
batch and the others share the rest: every rank sees several local batch sizes (so its
overhead and per-sample cost are identifiable) while every step processes one global batch,
as the policies' steps do. The rounds are spread evenly over the run (at least one at the
start), so the calibration sees the same drift in machine load as the policies do.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from hetsim.calibrate import fit_worker
from hetsim.costs import Affine
from hetsim.partition import split_by_shares
from hetsim.policies import WorkerHint

PROBE = "probe"  # the probe's segment name in the trace


def probe_round(global_batch: int, world: int, fractions: Sequence[float]) -> list[tuple[int, ...]]:
    """One round's splits (see the module's docstring)."""
    plan = []
    for f in fractions:
        for focus in range(world):
            b = min(global_batch, max(1, int(round(f * global_batch)))) if world > 1 else global_batch
            rest = list(split_by_shares([1.0] * (world - 1), global_batch - b)) if world > 1 else []
            plan.append(tuple(rest[:focus] + [b] + rest[focus:]))
    return plan


def probe_schedule(rounds: int, blocks: int) -> list[int]:
    """Probe rounds to run at the start (index 0) and after each of the run's ``blocks`` (a
    policy's epoch; index k + 1): spread as evenly as they go over those ``blocks + 1`` places,
    so that the calibration sees the machine as the policies do; at least one at the start
    (whose costs the policies that need them get)."""
    if rounds <= 0:
        return [0] * (blocks + 1)
    slots = min(blocks + 1, rounds)
    out = [0] * (blocks + 1)
    for j in range(rounds):
        out[((j % slots) * (blocks + 1)) // slots] += 1
    return out


def fit_probe(frame: pd.DataFrame, world: int) -> tuple[WorkerHint, ...] | None:
    """Each rank's affine cost from the probe's rows so far, for policies that need costs
    (proportional, optimal); None when there are none (on ranks other than 0, whose writer
    keeps no trace and which hold no policies)."""
    frame = frame[frame["policy"] == PROBE]
    if frame.empty:
        return None
    hints = []
    for r in range(world):
        rows = frame[frame["worker"] == r]
        fit, _ = fit_worker(r, rows["local_batch"].to_numpy(), rows["compute_s"].to_numpy(), model="affine")
        hints.append(WorkerHint(cost=Affine(fit.overhead_s, fit.per_sample_s)))
    return tuple(hints)
