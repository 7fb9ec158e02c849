"""How a finished run's summary reads on the terminal, without torch (``validation run``'s table
in the parent process, each rank's closing lines): a policy's final held-out figure."""

from __future__ import annotations

import math
from typing import Any


def held_out(entry: dict[str, Any]) -> str:
    """A policy's final held-out figure (an entry of summary.json's ``policies``): its accuracy,
    or its loss where it has none (a regression's accuracy is nan, which summary.json's strict
    JSON holds as null)."""
    accuracy, loss = entry.get("final_test_accuracy"), entry.get("final_test_loss")
    if accuracy is not None and math.isfinite(accuracy):
        return f"accuracy {accuracy:.3f}"
    return "loss -" if loss is None else f"loss {loss:.4g}"
