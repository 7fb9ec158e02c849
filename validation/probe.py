"""The calibration probe: its plan of splits, when its rounds run, and the costs fitted from it.

In each round, for each local batch size and each rank r, rank r gets that size and the others
share the rest: every rank sees several local batch sizes (so its overhead and per-sample cost
are identifiable) while every step processes one global batch, as the policies' steps do. The
sizes are the given fractions of the global batch and, always, :data:`SMALL_SIZES` (1 and 2
samples): whether a slow rank is worth keeping at all (``optimal`` leaving it out) turns on its
cost at the few samples it would be left, which a fit from 8 samples up only extrapolates. When
a policy may choose a larger global batch (``goodput``), every round also runs its fractions of
that largest batch and the whole of it (one rank alone, as when a slow one is left out): a cost
fitted on local batches up to the global batch, extrapolated to several times that, can be far
off (a CPU or GPU does a larger batch at a lower cost a sample).

The rounds are spread evenly over the run, so the calibration sees the same drift in machine
load as the policies do; the first :data:`START_ROUNDS` run at the start, before any policy,
because the policies that need or use costs (``proportional``, ``optimal``, ``goodput``) are
told the costs fitted on those (:func:`fit_probe`), and one round is one noisy time per size (on a rank beside a busy
neighbour its times need not even grow with the batch).

:func:`fit_probe` fits as ``validation compare`` and ``hetsim calibrate --model auto`` do
(:func:`hetsim.calibrate.calibrate`: each rank's cost curve, affine, hinge or table, chosen by
held-out error), so the real policies and the simulated ones in ``compare`` start from the same
kind of knowledge; ``compare`` tells its simulated policies exactly these costs
(:func:`first_block_hints`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hetsim.core.errors import ConfigError
from hetsim.model.partition import split_by_shares
from hetsim.policies import WorkerHint, policy_class

if TYPE_CHECKING:
    import pandas as pd

PROBE = "probe"  # the probe's segment name in the trace
SMALL_SIZES = (1, 2)  # local batches every round includes besides its fractions (the module's docstring)
START_ROUNDS = 3  # rounds before the first policy: the costs the policies are told come from these


def probe_sizes(global_batch: int, world: int, fractions: Sequence[float]) -> list[int]:
    """The focus rank's local batches in one round: :data:`SMALL_SIZES` below the global batch
    (those the fractions do not give already), then each fraction's, in the given order. One
    rank takes the whole batch at every fraction."""
    if world <= 1:
        return [global_batch] * len(fractions)
    sized = fraction_sizes(global_batch, fractions)
    return [b for b in SMALL_SIZES if b < global_batch and b not in sized] + sized


def fraction_sizes(global_batch: int, fractions: Sequence[float]) -> list[int]:
    """Each fraction of ``global_batch`` as a local batch: rounded, at least 1, at most all of it."""
    return [min(global_batch, max(1, int(round(f * global_batch)))) for f in fractions]


def probe_round(
    global_batch: int, world: int, fractions: Sequence[float], largest: int | None = None
) -> list[tuple[int, ...]]:
    """One round's splits (see the module's docstring); with ``largest`` above the global batch
    (the largest a policy that varies the batch may choose), the fractions and the whole once
    more as steps of ``largest`` samples, so that the costs told to that policy are measured up
    to the local batches it may give rather than extrapolated from the global batch's."""
    plan = _round_at(global_batch, world, probe_sizes(global_batch, world, fractions))
    if largest is not None and largest > global_batch and world > 1:
        plan += _round_at(largest, world, list(dict.fromkeys([*fraction_sizes(largest, fractions), largest])))
    return plan


def _round_at(global_batch: int, world: int, sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """For each size and each rank, the step of ``global_batch`` samples in which that rank has
    that size and the others share the rest."""
    plan: list[tuple[int, ...]] = []
    for b in sizes:
        rest = list(split_by_shares([1.0] * (world - 1), global_batch - b)) if world > 1 else []
        plan.extend(tuple(rest[:focus] + [b] + rest[focus:]) for focus in range(world))
    return plan


def probe_schedule(rounds: int, blocks: int, first: int = 1) -> list[int]:
    """Probe rounds to run at the start (index 0) and after each of the run's ``blocks`` (a
    policy's epoch; index k + 1): ``first`` of them (at least one, at most ``rounds``) at the
    start, whose costs the policies that need them get; the others, and one more, spread as
    evenly as they go over those ``blocks + 1`` places (that one on the start), so that the
    calibration sees the machine as the policies do."""
    if rounds <= 0:
        return [0] * (blocks + 1)
    extra = min(max(first, 1), rounds) - 1
    spread = rounds - extra
    slots = min(blocks + 1, spread)
    out = [0] * (blocks + 1)
    for j in range(spread):
        out[((j % slots) * (blocks + 1)) // slots] += 1
    out[0] += extra
    return out


def told_costs(policies: Sequence[str]) -> bool:
    """Whether a run of ``policies`` tells them the probe's costs (:func:`fit_probe`): one of them
    reads costs (``Policy.reads_costs``). The trainer fits only then, and ``compare`` tells its
    twins only then."""
    return any(policy_class(p).reads_costs() for p in policies)


def fit_probe(frame: pd.DataFrame, world: int) -> tuple[WorkerHint, ...] | None:
    """Each rank's cost curve fitted on the probe's rows of ``frame`` (a run's trace so far) as
    ``compare`` fits them (the module's docstring), for the policies that need costs; None when
    there are none (on ranks other than 0, whose writer keeps no trace and which hold no
    policies). Rows that cannot be fitted (a rank with fewer than two complete computes) are a
    ConfigError, as in ``compare``."""
    frame = frame[frame["policy"] == PROBE]
    if frame.empty:
        return None
    from hetsim.calibrate import calibrate  # scipy's fits, slow to import: paid by rank 0 alone

    calibration = calibrate(frame.drop(columns=["policy"]), name=PROBE, scheduled_split=True)  # each curve chosen
    fits = {f.worker: f for f in calibration.workers}
    missing = [r for r in range(world) if r not in fits]
    if missing:
        raise ConfigError("probe", f"rank {missing[0]} never had samples in the probe: no cost to tell the policies")
    return tuple(WorkerHint(cost=fits[r].cost_curve().cost_model()) for r in range(world))


def first_block_hints(trace: pd.DataFrame, world: int) -> tuple[WorkerHint, ...] | None:
    """The costs a run's cost-aware policies were told: :func:`fit_probe` on the probe's rows of
    its first block (the lowest epoch among them; the trainer runs its :data:`START_ROUNDS`
    there and the policies start after them, as ``examples/train_your_model.py`` does). None
    when the trace has no probe rows."""
    probe = trace[trace["policy"] == PROBE]
    if probe.empty:
        return None
    return fit_probe(probe[probe["epoch"] == probe["epoch"].min()], world)
