"""Shared test helpers: small scenarios built from plain dicts."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def scenario_dict(workers: list[dict[str, Any]], *, global_batch: int = 256, steps_per_epoch: int = 20,
                  epochs: int = 3, network: dict[str, Any] | None = None, seed: int = 0, gradient_mb: float = 0.0) -> dict[str, Any]:
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
