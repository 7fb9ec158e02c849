"""``python -m validation profile``: measure a workload's step time against the local batch on
each device, the largest local batch each holds, the gradient's size and the all-reduce between
the ranks, and write a scenario every hetsim command accepts.

Owns the launcher's side: it starts one rank per device (:mod:`validation.profile_rank`, through
:func:`validation.launch.launch`, so the ranks listen on loopback only and the noisy neighbours
of ``--contention`` live exactly as long as they do) with the checked configuration in a
temporary folder, reads back their results, or the bad input a rank found (one line, exit status
2), and writes ``--out`` (:mod:`validation.profile_output`). Nothing is written to ``--out``
before every rank has finished; the temporary folder is removed whatever happens.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hetsim.core.errors import ConfigError
from hetsim.core.files import write_json
from validation.profile_config import ProfileConfig


class ProfileFailed(RuntimeError):
    """A rank failed for a reason other than bad input (its last log line says why)."""


def run_profile(config: ProfileConfig) -> list[dict[str, Any]]:
    """Every rank's results, rank by rank (see :mod:`validation.profile_rank`)."""
    from validation.launch import launch

    folder = Path(tempfile.mkdtemp(prefix="hetsim-profile-"))
    try:
        write_json(folder / "config.json", config.to_dict())
        result = launch(
            [str(folder / "config.json"), str(folder)],
            config.world_size,
            threads=config.threads,
            cpus=config.cpus,
            contention=config.contention,
            module="validation.profile_rank",
        )
        first = result.first_failure[0] if result.first_failure else 0
        errors = sorted(folder.glob("error-*.json"), key=lambda p: (p.name != f"error-{first}.json", p.name))
        if errors:
            found = json.loads(errors[0].read_text(encoding="utf-8"))
            raise ConfigError(found["field"], found["problem"])
        if not result.ok or not (folder / "result.json").is_file():
            raise ProfileFailed(
                f"rank {first} failed first ({result.reason}): {_last_line(folder / f'rank-{first}.log')}"
            )
        results: list[dict[str, Any]] = json.loads((folder / "result.json").read_text(encoding="utf-8"))
        return results
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no log"


def profile_and_write(config: ProfileConfig, workload_name: str) -> dict[str, Any]:
    """Profile, then write ``config.out`` (all three files or none); returns the scenario."""
    from validation import profile_output

    t0 = time.monotonic()
    results = run_profile(config)
    scenario = profile_output.build(config, results, workload_name)
    info = profile_output.meta(config, results, scenario, time.monotonic() - t0)
    profile_output.write(config.out, scenario, profile_output.rows(results), info)
    return info


def summary_lines(info: dict[str, Any], out: Path) -> list[str]:
    """What the command prints: each rank's curve in brief, the network, where the files are."""
    lines = []
    for r in info["ranks"]:
        first, last = r["curve"][0], r["curve"][-1]
        lines.append(
            f"rank {r['rank']} ({r['device']}): {len(r['curve'])} batch sizes, max batch {r['max_batch']}, "
            f"step {1e3 * first['median_s']:.2f} ms at {first['batch']} .. {1e3 * last['median_s']:.2f} ms at "
            f"{last['batch']}, noise sigma {r['noise_sigma']:.3f}"
        )
    a = info["allreduce"]
    lines.append(
        f"gradient {info['gradient_mb']:.3f} MB; all-reduce {1e3 * a['at_gradient_measured_s']:.2f} ms measured, "
        f"{1e3 * a['at_gradient_fitted_s']:.2f} ms fitted"
        + ("" if a["in_step_s"] is None else f", {1e3 * a['in_step_s']:.2f} ms in the trainer's steps")
    )
    ratios = [r for r in info["trainer_compute_over_table"] if r is not None]
    if ratios and a.get("trainer_step_s"):
        lines.append(
            f"trainer's steps: {1e3 * a['trainer_step_s']:.2f} ms a step at "
            f"{'/'.join(map(str, a['in_step_batches']))}, "
            f"{1e3 * a['step_overhead_s']:.2f} ms beyond the slowest compute the tables expect (the network); "
            "compute " + ", ".join(f"{r:.2f}x" for r in ratios) + " the table at their batch (rank order)"
        )
    lines.append(
        f"wrote {out}/scenario.toml, profile.csv, meta.json; "
        f"next: python -m hetsim plan {out}/scenario.toml --wait-for-all --out {out}/plan.json"
    )
    return lines


SKEWED = 1.25  # a rank's mean step over its median above this: long interruptions (quiet: 1.02-1.10)
NOISY_SIGMA = 0.3  # a rank's noise sigma above this: its steps were disturbed (quiet ranks here: 0.03-0.25)


def profile_warnings(info: dict[str, Any], load_average: float, cpus: int) -> list[str]:
    """What makes a profile doubtful, each a line: a network set to 0 because the trainer's steps
    ran faster than the tables and their noise expect (the machine's speed moved during the
    profile), a rank whose steps spread widely, a load above the CPUs the ranks shared."""
    out = []
    overhead = info["allreduce"].get("step_overhead_s")
    if overhead is not None and overhead < 0:
        out.append(
            f"the trainer's steps took {-1e3 * overhead:.2f} ms less than the slowest compute the tables and their "
            "noise expect at their split, so the scenario's network is 0: the machine's speed moved while it "
            "profiled, and a plan's predictions are off by about that much; profile again when it is quieter"
        )
    for r in info["ranks"]:
        if r.get("mean_over_median", 1.0) > SKEWED:
            out.append(
                f"rank {r['rank']}'s mean step is {r['mean_over_median']:.2f}x its median (above {SKEWED}): some "
                "steps were interrupted for long, and its table (means) is that much above the medians printed"
            )
        if r["noise_sigma"] > NOISY_SIGMA:
            out.append(
                f"rank {r['rank']}'s steps spread widely (noise sigma {r['noise_sigma']:.2f}, above {NOISY_SIGMA}): "
                "something else ran beside it; its table is noisy and the plan's split less sure"
            )
    if load_average > cpus:
        out.append(f"the load average is {load_average:.1f} on {cpus} CPUs: other work shared the ranks' cores")
    return out
