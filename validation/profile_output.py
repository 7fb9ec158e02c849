"""What ``validation profile`` makes of its ranks' measurements: the scenario, the table of every
measurement and the meta data, checked by hetsim and written atomically.

* ``scenario.toml``: one ``[[workers]]`` per rank, named ``rank<R>-<device>``, with a ``table``
  cost through the mean step time at each measured batch (the median, scaled by the rank's
  mean over median: :func:`rank_table`; made non-decreasing by isotonic regression weighted by
  the samples, as hetsim's ``profile`` costs are: a table's times must not fall), the rank's
  ``max_batch``, and a mean-1 lognormal ``noise`` whose ``sigma`` is the spread of its compute
  in the trainer's steps (below; else of the repeats around their medians), 1.4826 x the median
  absolute deviation of the log times, robust to the odd pause (:func:`rank_noise_sigma`);
  ``[workload]`` with the workload's training-set size, the global batch and the measured
  ``gradient_mb``; ``[network]``: what the trainer's own steps took beyond the slowest compute
  the tables expect, else the fit to the all-reduce timing (below).
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
The trainer that will run the plan exchanges more than the gradient (the split's broadcast, the
barrier that shares the ranks' times), computes inside DDP's hooks, and its ranks meet at every
step, so the slowest of them sets it. So the ranks also run that trainer's steps (``in_step``,
:class:`validation.profile_rank.TrainerSteps`, with ``--comm``; as many as a fifth of the budget
holds, 250 at most, in blocks between the repeats) at the split that balances the ranks' tables
as the first block finds them (:func:`balanced_split`, the split a throughput plan runs), and
the scenario's network, ``constant``, is what their mean step (as a run's trace counts it) took
beyond the slowest rank's compute that the scenario's tables and noise expect at that split
(:func:`step_overhead_s`, at least 0): the exchange, and what the trainer adds to the compute
that the profile's back-to-back steps of the bare model do not see. At that split the scenario
predicts the trainer's measured mean step; elsewhere the tables carry it. Their communication
alone, the fit to the all-reduce alone and their compute over the tables stay in ``meta.json``
beside it. Without those steps (one rank), the fit is the network.

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


def table_points(points: list[dict[str, Any]], scale: float = 1.0) -> list[list[float]]:
    """``[[batch, seconds], ...]`` through the medians times ``scale``, non-decreasing (weighted
    isotonic fit)."""
    medians = np.array([p["median_s"] for p in points]) * scale
    fitted = isotonic_regression(medians, weights=np.array([float(p["n"]) for p in points])).x
    return [[int(p["batch"]), float(f"{t:.6g}")] for p, t in zip(points, fitted)]


def mean_over_median(samples: dict[str, list[float]]) -> float:
    """How much a rank's mean step exceeds its median: the time of every repeat over the time
    their batches' medians would have taken (batches of at least 3 repeats; 1 without any).
    Step times are skewed to the right (the odd step the scheduler interrupts), so the mean,
    which a run pays, lies above the median, which the table is read from robustly; pooled over
    the batches and weighted by time, since interruptions come at a rate in time."""
    pairs = [(sum(ts), len(ts) * statistics.median(ts)) for ts in samples.values() if len(ts) >= 3]
    total_s, median_s = sum(t for t, _ in pairs), sum(m for _, m in pairs)
    return total_s / median_s if median_s > 0 else 1.0


def rank_table(samples: dict[str, list[float]]) -> list[list[float]]:
    """A rank's scenario table: its mean step time at each measured batch, read as the batch's
    median times the rank's :func:`mean_over_median` (the scenario's noise has mean 1, so its
    table is a mean; a mean per batch would carry its few repeats' pauses into the curve)."""
    return table_points(curve(samples), mean_over_median(samples))


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


def trainer_compute_ratio(result: dict[str, Any], points: list[list[float]]) -> float | None:
    """A rank's mean compute in the trainer's steps over its table (``points``, as the scenario
    holds it: :func:`rank_table`) at that batch: how far the profile's back-to-back steps of the
    bare model are from the trainer's (DDP's hooks and bucket copies inside the backward, a
    machine busier in training, a step after a wait). Said; the tables are not
    scaled by it (a few seconds of steps at one batch carry their disturbances into every batch:
    docs/guide/own-job.md), and at the trainer's split the network takes it in
    (:func:`step_overhead_s`)."""
    in_step = result.get("in_step") or {}
    if not in_step.get("compute_s") or not in_step.get("batch"):
        return None
    table_s = float(np.interp(in_step["batch"], [b for b, _ in points], [t for _, t in points]))
    return statistics.fmean(in_step["compute_s"]) / table_s if table_s > 0 else None


def step_overhead_s(results: list[dict[str, Any]], raw: dict[str, Any]) -> float | None:
    """What the trainer's steps took beyond the slowest rank's compute that the scenario ``raw``
    (its tables and noise, without a network) expects at their split: the scenario's network (see
    the module's docstring; below 0 where the noise overstates the slowest rank, and the network
    is then 0); None without those steps."""
    in_step = results[0].get("in_step") or {}
    if len(results) < 2 or not in_step.get("mean_step_s"):
        return None
    from hetsim.analysis.orderstats import barrier_parts, expected_max
    from hetsim.scenario.config import build_scenario

    scenario = build_scenario({**raw, "network": {"kind": "constant", "time_s": 0.0}})
    compute_s = expected_max(barrier_parts(scenario.workers, in_step["split"]))
    return float(in_step["mean_step_s"]) - compute_s


def network_table(results: list[dict[str, Any]], raw: dict[str, Any]) -> dict[str, Any]:
    """The scenario's ``[network]``: the trainer's steps' time beyond the expected slowest compute
    when they ran, else the fit to the all-reduce alone."""
    overhead = step_overhead_s(results, raw)
    if overhead is not None:
        return {"kind": "constant", "time_s": float(f"{max(0.0, overhead):.6g}")}
    return fit_network(merged_allreduce(results), len(results), raw["workload"]["gradient_mb"])


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
            "cost": {"model": "table", "points": rank_table(r["samples"])},
            "max_batch": int(r["max_batch"]),
        }
        sigma = rank_noise_sigma(r)
        if sigma > MIN_SIGMA:
            worker["noise"] = {"dist": "lognormal", "sigma": round(sigma, 6)}
        workers.append(worker)
    capacity = sum(int(r["max_batch"]) for r in results)
    raw = {
        "name": f"profile-{workload_name}",
        "description": f"measured by python -m validation profile: {workload_name} on {','.join(config.devices)}",
        "seed": config.seed,
        "workload": {
            "global_batch": min(config.global_batch, capacity),
            "dataset_size": config.dataset_size,
            "epochs": EPOCHS,
            "gradient_mb": gradient_mb,
        },
    }
    return {**raw, "network": network_table(results, {**raw, "workers": workers}), "workers": workers}


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
                "mean_over_median": mean_over_median(r["samples"]),
                "curve": curve(r["samples"]),
            }
            for r in results
        ],  # fmt: skip
        "allreduce": {
            "measured_s": {str(4 * int(k) / 1e6): statistics.median(v) for k, v in allreduce.items()},
            "at_gradient_measured_s": statistics.median(allreduce[largest]) if largest else 0.0,
            "at_gradient_fitted_s": float(bare.allreduce_s(world, gradient_mb)),
            "in_step_s": exposed_comm_s(results),
            "trainer_step_s": (results[0].get("in_step") or {}).get("mean_step_s"),
            "step_overhead_s": step_overhead_s(results, {k: v for k, v in scenario.items() if k != "network"}),
            "in_step_batches": [(r.get("in_step") or {}).get("batch", 0) for r in results],
        },
        "trainer_compute_over_table": [
            trainer_compute_ratio(r, w["cost"]["points"]) for r, w in zip(results, scenario["workers"])
        ],
    }


def write(out: Path, scenario: dict[str, Any], table: list[dict[str, Any]], info: dict[str, Any]) -> None:
    """The three files into ``out``, all or none (hetsim's atomic folder), after hetsim has
    accepted the scenario."""
    import pandas as pd

    from hetsim.core.files import atomic_folder, write_frame, write_json
    from hetsim.core.provenance import comment_header
    from hetsim.scenario.config import build_scenario

    build_scenario(scenario)
    text = comment_header(info) + scenario_toml(scenario)  # the file a user copies out: it says what made it
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
