"""Shared test helpers, imported as ``from tests.helpers import ...`` (tests/ is a package).

Plain functions rather than fixtures, so that hypothesis strategies and module-level
parametrisation can use them too.
"""

from __future__ import annotations

from typing import Any


def scenario_dict(
    workers: list[dict[str, Any]],
    *,
    global_batch: int = 256,
    steps_per_epoch: int = 20,
    epochs: int = 3,
    network: dict[str, Any] | None = None,
    seed: int = 0,
    gradient_mb: float = 0.0,
) -> dict[str, Any]:
    """A raw scenario (the dict a scenario file holds) around ``workers``: dataset = global_batch * steps_per_epoch."""
    return {
        "name": "test",
        "seed": seed,
        "workload": {
            "global_batch": global_batch,
            "dataset_size": global_batch * steps_per_epoch,
            "epochs": epochs,
            "gradient_mb": gradient_mb,
        },
        "network": network or {"kind": "constant", "time_s": 0.0},
        "workers": workers,
    }
