"""Which splits of a plan rest on a guess of a worker's cost: samples outside the batches its
cost curve was measured at (:func:`extrapolated_costs`), or samples for a worker whose cost
was never fitted (:func:`unfitted_costs`).

A table or profile curve is flat below its first point and follows its last segment beyond its
last point, so a time read there is a guess. ``costs`` marks such times with ``~``. A fitted
table (calibrate's, on a worker that an adaptive split kept in a narrow range) can put a whole
split there, and the plan's figures then rest on that guess. A worker a trace left idle is
kept by calibrate at a flat cost of what the trace showed, a lower bound (its ``unfitted``
key): a split giving it samples is predicted optimistically, and can win on that alone."""

from __future__ import annotations

from collections.abc import Sequence

from hetsim.plan.rows import PolicyRow
from hetsim.scenario.scenario import Scenario

NAMED = 4  # workers named in a line; the rest are counted


def extrapolated_costs(scenario: Scenario, rows: Sequence[PolicyRow]) -> tuple[str, ...]:
    """A line for each of ``rows`` whose split gives a worker samples outside its curve's
    measured batches (a curve that is a formula has none)."""
    lines = []
    for row in rows:
        outside = []
        for worker, b in zip(scenario.workers, row.split):
            side, measured = worker.cost.extrapolated(b), worker.cost.measured()
            if b > 0 and side is not None and measured is not None:
                outside.append(f"{worker.name} {b} samples ({side} its measured {measured[0]:g}-{measured[1]:g})")
        if outside:
            lines.append(
                f"{row.policy}'s split gives {_listed(outside)}: the times there are the cost curves' extrapolation, "
                "and so are its figures"
            )
    return tuple(lines)


def unfitted_costs(scenario: Scenario, rows: Sequence[PolicyRow]) -> tuple[str, ...]:
    """A line for each of ``rows`` whose split gives samples to a worker whose cost is a guess
    (its ``unfitted`` key)."""
    lines = []
    for row in rows:
        guessed = [w.name for w, b in zip(scenario.workers, row.split) if b > 0 and w.unfitted]
        if guessed:
            lines.append(
                f"{row.policy}'s split gives samples to {_listed(guessed)}, whose cost is a guess (unfitted: a lower "
                "bound), so its figures are optimistic"
            )
    return tuple(lines)


def _listed(items: Sequence[str]) -> str:
    """The first :data:`NAMED` of ``items``, the rest counted."""
    more = f" and {len(items) - NAMED} more" if len(items) > NAMED else ""
    return f"{', '.join(items[:NAMED])}{more}"
