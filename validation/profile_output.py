"""What ``validation profile`` makes of its ranks' measurements: the scenario, the table of every
measurement and the meta data, checked by hetsim and written atomically.

* ``scenario.toml``: one ``[[workers]]`` per rank, named ``rank<R>-<device>``, with a ``table``
  cost through the median step time at each measured batch (made non-decreasing by isotonic
  regression weighted by the samples, as hetsim's ``profile`` costs are: a table's times must
  not fall), the rank's ``max_batch``, and a mean-1 lognormal ``noise`` whose ``sigma`` is the
  spread of its compute in the trainer's steps (below; else of the repeats around their
  medians), 1.4826 x the median absolute deviation of the log times, robust to the odd
  pause (:func:`rank_noise_sigma`); ``[workload]`` with the workload's training-set size, the
  global batch and the measured ``gradient_mb``; ``[network]``: the communication of the
  trainer's own steps, else the fit to the all-reduce timing (below).
* ``profile.csv``: one row per timed step (``kind`` fit, warmup or step), all-reduce, and
  trainer step (``trainer_comm``: its communication time, as the trainer records it).
* ``meta.json``: the configuration, each rank's curve with its confidence intervals, the
  network's fit against its measurement at the gradient's size, versions, commit and date.

**The network.** The all-reduce of ``x`` MB among ``n`` ranks is fitted as hetsim's ``ring``,
``2(n-1) latency + 2(n-1)/n x 8e-3 / bandwidth_gbps``: a line ``alpha + beta x`` through the
medians at each size by non-negative least squares on relative errors (the one-element
all-reduce pins the latency, the gradient-sized ones the bandwidth). When the fit finds no
bandwidth term (``beta`` adds under 1% at the largest size: the times do not grow with it), the network is ``constant``
at the median time at the gradient's size.

What a step pays for the all-reduce is not always what the all-reduce costs alone: on a shared
machine it competes with the ranks' compute threads for the cores, and gloo's threads with both.
And the trainer that will run the plan exchanges more than the gradient (the split's broadcast,
the barrier that shares the ranks' times). So the ranks also run some of that trainer's steps
(``in_step``, :func:`validation.profile_rank.trainer_steps`, with ``--comm``; as many as a tenth
of the budget holds, 60 at most) at the split that balances the ranks' tables
(:func:`balanced_split`): what a step exposes of the exchange depends on how the ranks arrive
at it (at an uneven split the fast rank's side of it overlaps its wait), and the balanced split
is the one a throughput plan runs. The mean of their communication time as the trainer records
it (over steps and ranks) is the scenario's network, ``constant`` (the cluster's ranks are the
ones measured); the mean, not the median: the scenario predicts a mean step, and an exchange's
odd slow step (a thread of gloo that the scheduler runs late) is part of it. The fit to the
all-reduce alone stays in ``meta.json`` beside it. Without those steps (one rank), the fit is
the network.

The scenario is built by ``hetsim.scenario.config.build_scenario`` before anything is written, so a
scenario that hetsim would refuse is never written.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression, nnls

from hetsim.model.costs import Table
from hetsim.model.partition import min_max_split
from hetsim.policies import WorkerHint
from validation.profile_config import ProfileConfig
from validation.profile_grid import median_ci

EPOCHS = 10  # validation run's default
MIN_SIGMA = 1e-4  # below this the noise is left out
MIN_IN_STEP = 5  # the trainer's steps a rank needs for its noise to be read from them


def curve(samples: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Per measured batch, in order: its median, 95% CI and sample count."""
    out = []
    for batch in sorted(samples, key=int):
        mid, lo, hi = median_ci(samples[batch])
        out.append({"batch": int(batch), "median_s": mid, "ci_low_s": lo, "ci_high_s": hi, "n": len(samples[batch])})
    return out


def table_points(points: list[dict[str, Any]]) -> list[list[float]]:
    """``[[batch, seconds], ...]`` through the medians, non-decreasing (weighted isotonic fit)."""
    medians = np.array([p["median_s"] for p in points])
    fitted = isotonic_regression(medians, weights=np.array([float(p["n"]) for p in points])).x
    return [[int(p["batch"]), float(f"{t:.6g}")] for p, t in zip(points, fitted)]


def balanced_split(tables: list[list[list[float]]], total: int, caps: list[int]) -> tuple[int, ...]:
    """The split of ``total`` samples that minimises the slowest rank's time on the ranks' tables
    (``table_points``; hetsim's ``min_max_split``): the split a throughput plan runs, where the
    ranks finish their compute together."""
    hints = [WorkerHint(max_batch=cap, cost=Table(points=[(int(b), float(t)) for b, t in table]))
             for table, cap in zip(tables, caps, strict=True)]  # fmt: skip
    return min_max_split(hints, total, caps)


def noise_sigma(samples: dict[str, list[float]]) -> float:
    """The lognormal sigma of the repeats around their batch's median (robust: 1.4826 MAD)."""
    residuals = [math.log(t / statistics.median(ts)) for ts in samples.values() for t in ts if len(ts) >= 3]
    return 1.4826 * statistics.median(abs(r) for r in residuals) if residuals else 0.0


def rank_noise_sigma(result: dict[str, Any]) -> float:
    """A rank's noise: that of its compute in the trainer's steps (at its local batch of the
    balanced split, in the trainer's own conditions) when it ran at least ``MIN_IN_STEP`` of
    them with samples, else that of every batch's repeats pooled. Relative noise shrinks as the
    batch grows (a fixed jitter over a longer step), so the pooled repeats, half of them at small
    batches, overstate it where a plan runs, and with it the expected slowest of the ranks."""
    in_step = result.get("in_step") or {}
    compute = in_step.get("compute_s") or []
    if in_step.get("batch") and len(compute) >= MIN_IN_STEP:
        return noise_sigma({"in_step": compute})
    return noise_sigma(result["samples"])


def fit_network(allreduce: dict[str, list[float]], world: int, gradient_mb: float) -> dict[str, Any]:
    """The ``[network]`` table fitted to the all-reduce medians (see the module's docstring)."""
    sizes_mb = np.array([4 * int(k) / 1e6 for k in allreduce])
    medians = np.array([statistics.median(v) for v in allreduce.values()])
    if world < 2 or sizes_mb.size == 0:
        return {"kind": "constant", "time_s": 0.0}
    design = np.column_stack([np.ones_like(sizes_mb), sizes_mb]) / medians[:, None]
    (alpha, beta), _ = nnls(design, np.ones_like(medians))
    if beta * sizes_mb.max() <= 0.01 * alpha:  # no size term worth the name: a flat exchange
        return {"kind": "constant", "time_s": float(medians[np.argmax(sizes_mb)])}
    return {
        "kind": "ring",
        "latency_s": float(f"{alpha / (2 * (world - 1)):.6g}"),
        "bandwidth_gbps": float(f"{2 * (world - 1) / world * 8e-3 / beta:.6g}"),
    }


def exposed_comm_s(results: list[dict[str, Any]]) -> float | None:
    """The mean communication time of the trainer's steps over steps and ranks (see the module's
    docstring); None without such steps."""
    times = [t for r in results for t in (r.get("in_step") or {}).get("comm_s", [])]
    if len(results) < 2 or not times:
        return None
    return max(0.0, statistics.fmean(times))


def trainer_compute_ratio(result: dict[str, Any]) -> float | None:
    """A rank's median compute in the trainer's steps over its table's time at that batch: how far
    the profile's back-to-back steps of the bare model are from the trainer's (DDP's hooks and
    bucket copies inside the backward, a machine busier in training). Said, not corrected: the
    trainer's steps are a second or two, and a table scaled by them carried every disturbance of
    those seconds into the plan (``benchmarks/own_job.py``: a worse prediction, not a better one)."""
    in_step = result.get("in_step") or {}
    if not in_step.get("compute_s") or not in_step.get("batch"):
        return None
    points = table_points(curve(result["samples"]))
    table_s = float(np.interp(in_step["batch"], [b for b, _ in points], [t for _, t in points]))
    return statistics.median(in_step["compute_s"]) / table_s if table_s > 0 else None


def network_table(results: list[dict[str, Any]], gradient_mb: float) -> dict[str, Any]:
    """The scenario's ``[network]``: the exposed all-reduce of the synchronous steps when measured,
    else the fit to the all-reduce alone."""
    exposed = exposed_comm_s(results)
    if exposed is not None:
        return {"kind": "constant", "time_s": float(f"{exposed:.6g}")}
    return fit_network(merged_allreduce(results), len(results), gradient_mb)


def merged_allreduce(results: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per size, each repetition's slowest rank (an all-reduce ends when the last rank has it)."""
    sizes = results[0]["allreduce"]
    return {k: [max(r["allreduce"][k][i] for r in results) for i in range(len(sizes[k]))] for k in sizes}


def build(config: ProfileConfig, results: list[dict[str, Any]], workload_name: str) -> dict[str, Any]:
    """The scenario's raw tables (see the module's docstring)."""
    gradient_mb = float(results[0]["gradient_mb"])
    workers = []
    for r in results:
        worker: dict[str, Any] = {
            "name": f"rank{r['rank']}-{r['device'].replace(':', '')}",
            "cost": {"model": "table", "points": table_points(curve(r["samples"]))},
            "max_batch": int(r["max_batch"]),
        }
        sigma = rank_noise_sigma(r)
        if sigma > MIN_SIGMA:
            worker["noise"] = {"dist": "lognormal", "sigma": round(sigma, 6)}
        workers.append(worker)
    capacity = sum(int(r["max_batch"]) for r in results)
    return {
        "name": f"profile-{workload_name}",
        "description": f"measured by python -m validation profile: {workload_name} on {','.join(config.devices)}",
        "seed": config.seed,
        "workload": {
            "global_batch": min(config.global_batch, capacity),
            "dataset_size": config.dataset_size,
            "epochs": EPOCHS,
            "gradient_mb": gradient_mb,
        },
        "network": network_table(results, gradient_mb),
        "workers": workers,
    }


def rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``profile.csv``'s rows: every step and every all-reduce, each rank's."""
    out = []
    for r in results:
        out += [{**row, "device": r["device"]} for row in r["rows"]]
        for size, times in r["allreduce"].items():
            out += [{"rank": r["rank"], "device": r["device"], "kind": "allreduce", "batch": 0,
                     "size_mb": 4 * int(size) / 1e6, "repeat": k, "seconds": t, "fits": True}
                    for k, t in enumerate(times)]  # fmt: skip
        in_step = r.get("in_step") or {}
        out += [{"rank": r["rank"], "device": r["device"], "kind": "trainer_comm", "batch": in_step["batch"],
                 "size_mb": float("nan"), "repeat": k, "seconds": t, "fits": True}
                for k, t in enumerate(in_step.get("comm_s", []))]  # fmt: skip
    return out


def meta(
    config: ProfileConfig, results: list[dict[str, Any]], scenario: dict[str, Any], wall_s: float
) -> dict[str, Any]:
    """``meta.json``: what was asked, what each rank measured, how well the network fits."""
    import torch

    from hetsim.core.registry import NETWORKS
    from hetsim.scenario.raw_tables import make_plugin
    from hetsim.sweep.results import provenance

    allreduce = merged_allreduce(results)
    gradient_mb, world = scenario["workload"]["gradient_mb"], len(results)
    bare = make_plugin(NETWORKS, fit_network(allreduce, world, gradient_mb), "network", "kind")
    largest = max(allreduce, key=int) if allreduce else None
    return {
        "config": config.to_dict(),
        "seed": config.seed,
        **provenance(),
        "torch": torch.__version__,
        "wall_s": wall_s,
        "parameters": results[0]["parameters"],
        "gradient_mb": gradient_mb,
        "ranks": [
            {
                "rank": r["rank"],
                "device": r["device"],
                "max_batch": r["max_batch"],
                "placement": r["placement"],
                "noise_sigma": rank_noise_sigma(r),
                "noise_sigma_repeats": noise_sigma(r["samples"]),
                "curve": curve(r["samples"]),
            }
            for r in results
        ],  # fmt: skip
        "allreduce": {
            "measured_s": {str(4 * int(k) / 1e6): statistics.median(v) for k, v in allreduce.items()},
            "at_gradient_measured_s": statistics.median(allreduce[largest]) if largest else 0.0,
            "at_gradient_fitted_s": float(bare.allreduce_s(world, gradient_mb)),
            "in_step_s": exposed_comm_s(results),
            "in_step_batches": [(r.get("in_step") or {}).get("batch", 0) for r in results],
        },
        "trainer_compute_over_table": [trainer_compute_ratio(r) for r in results],
    }


def write(out: Path, scenario: dict[str, Any], table: list[dict[str, Any]], info: dict[str, Any]) -> None:
    """The three files into ``out``, all or none (hetsim's atomic folder), after hetsim has
    accepted the scenario."""
    import pandas as pd

    from hetsim.core.files import atomic_folder, write_frame, write_json
    from hetsim.scenario.config import build_scenario

    build_scenario(scenario)
    text = scenario_toml(scenario)
    with atomic_folder(out, "--out") as tmp:
        (tmp / "scenario.toml").write_text(text, encoding="utf-8")
        write_frame(tmp / "profile.csv", pd.DataFrame(table))
        write_json(tmp / "meta.json", info)


def scenario_toml(scenario: dict[str, Any]) -> str:
    """The scenario as TOML, each worker's tables inline (``cost = { model = "table", points =
    [[1.0, 0.0021], ...] }``: tomli_w alone writes every pair of a table over four lines)."""
    import tomllib

    import tomli_w

    parts = [tomli_w.dumps({k: v for k, v in scenario.items() if k != "workers"})]
    for worker in scenario["workers"]:
        lines = ["[[workers]]"]
        for key, value in worker.items():
            lines.append(f"{key} = {_inline(value)}")
        parts.append("\n".join(lines) + "\n")
    text = "\n".join(parts)
    if tomllib.loads(text) != scenario:  # what is written must read back as it is
        raise AssertionError("the scenario's TOML does not read back as the scenario")
    return text


def _inline(value: Any) -> str:
    """A TOML value on one line: scalars as tomli_w writes them, tables and arrays inline."""
    import tomli_w

    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).partition("=")[2].strip()
