"""Calibrated workers moved from one run's injected delays to another's (:func:`reinjected`), for
``matrix``'s cross-run predictions: a run that differs from the calibrated one in its injection
only is predicted on the calibrated costs with the injected part replaced.

A rank's measured compute is its real compute ``r(b)``, stretched by its slowdown factor ``s``,
plus its injected delay per step ``d`` and per sample ``p``: ``c(b) = s r(b) + d + p b``. The
calibrated curve stands for ``c``, so the target's is ``(c(b) - d_a - p_a b) s_b / s_a + d_b +
p_b b``. An affine curve stays affine (its overhead and per-sample cost move); any other (a hinge,
a table) becomes a table with a point at every batch from 1 to the largest a step of the target
can give one rank (its global batch, or its ``--max-batch``), which is that formula exactly at
every batch a policy can hand out, except that it is held level where it would fall (a
hinge's flat floor, fitted on times that hold a per-sample delay, falls when the target injects
less per sample than the source: a cost table must not fall).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.registry import COSTS
from hetsim.scenario.raw_tables import make_plugin
from validation.inject import parse_delay_spec


def reinjected(
    workers: Sequence[dict[str, Any]], source: Mapping[str, Any], target: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The calibrated workers of ``source`` (meta.json) moved to ``target``'s injected delays:
    each rank's injected delay per step and per sample replaced by the target's, its real compute
    scaled by the ratio of slowdown factors (module docstring); its noise kept."""
    out = []
    for rank, worker in enumerate(workers):
        delay_a, per_a, slow_a = _injected(source, rank)
        delay_b, per_b, slow_b = _injected(target, rank)
        ratio = slow_b / slow_a
        if "overhead_s" in worker:
            out.append(
                {
                    **worker,
                    "overhead_s": (worker["overhead_s"] - delay_a) * ratio + delay_b,
                    "per_sample_s": (worker["per_sample_s"] - per_a) * ratio + per_b,
                }
            )
            continue
        if "cost" not in worker:
            raise ConfigError(f"workers.{rank}", "a calibrated worker without a cost to move to the other run")
        cost = make_plugin(COSTS, worker["cost"], f"workers.{rank}.cost", "model")
        batch = np.arange(1, _largest_batch(target) + 1, dtype=float)
        real = (np.asarray(cost.time_s(batch), dtype=float) - delay_a - per_a * batch) * ratio
        times = np.maximum.accumulate(real + delay_b + per_b * batch)
        points = [[float(b), float(t)] for b, t in zip(batch, times)]
        out.append({**worker, "cost": {"model": "table", "points": points}})
    return out


def _largest_batch(meta: Mapping[str, Any]) -> int:
    """The most samples one rank of the run can get in a step: its global batch or ``--max-batch``."""
    config = meta.get("config", {})
    largest = max(int(meta.get("global_batch", 1)), int(config.get("max_batch") or 0))
    return max(largest, 2)  # a table needs two points


def _injected(meta: Mapping[str, Any], rank: int) -> tuple[float, float, float]:
    """A run's injection on ``rank``: mean per-step delay (s), per-sample delay (s), slowdown factor."""
    injection = meta.get("injection", {})
    key = str(rank)
    delay = injection.get("delay", {}).get(key)
    return (
        parse_delay_spec(delay).mean() if delay is not None else 0.0,
        float(injection.get("per_sample_delay", {}).get(key, 0.0)),
        float(injection.get("slowdown", {}).get(key, 1.0)),
    )
