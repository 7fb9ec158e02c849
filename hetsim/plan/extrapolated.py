"""Which splits of a plan put a worker outside the batches its cost curve was measured at
(:func:`extrapolated_costs`). A table or profile curve is flat below its first point and
follows its last segment beyond its last point, so a time read there is a guess. ``costs``
marks such times with ``~``. A fitted table (calibrate's, on a worker that an adaptive split
kept in a narrow range) can put a whole split there, and the plan's figures then rest on that
guess."""

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
            more = f" and {len(outside) - NAMED} more" if len(outside) > NAMED else ""
            lines.append(
                f"{row.policy}'s split gives {', '.join(outside[:NAMED])}{more}: the times there are the cost "
                "curves' extrapolation, and so are its figures"
            )
    return tuple(lines)
