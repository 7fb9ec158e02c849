"""Steps to a target accuracy at 2x, 4x and 8x the base global batch, predicted from runs at the
base batch (and 2x or 4x), against real runs: issue 28's benchmark.

    python benchmarks/batch_scaling.py --quick --jobs 2 --seeds 8 --out runs/batch-scaling
    python benchmarks/batch_scaling.py --reuse runs/bs-digits runs/bs-transformer   # sweeps already run

For each workload (digits-cnn, transformer) one ``python -m validation batch-sweep --batches
1,2,4,8 --seeds N`` (digits-cnn at ``--lr 0.03``: at the sweep's default 0.05 its 8x runs
oscillate; ``--lr WORKLOAD=LR`` to choose; a folder that already holds results.json is reused).
``--reuse`` takes sweeps already run instead: each a batch-sweep folder or a folder of WORKLOAD/
sweeps, several sets of seeds of one workload pooled. Two measures, each per model:

* ``per_run``: every run that reached the target at 2x, 4x or 8x is one prediction, each model
  fitted on the other seeds' runs at the base batch (and 2x or 4x) alone (leave-one-seed-out,
  so a seed's own noise never predicts itself). One run is one draw of the seed-to-seed scatter,
  so these errors have a floor, which ``same_batch`` shows: not a model but the median of the
  other seeds' measured steps at the run's own batch (itself an estimate of the typical run from
  one batch's runs, so a fit that pools two batches' can read a little below it).
* ``typical``: what the models predict, expected steps (the exponential of the mean log steps,
  which the efficiency fit models), against the seeds' own: per set of seeds (one sweep folder)
  and batch, the models fitted on that set's base (and 2x) runs against the geometric mean of
  its runs at the batch, with that mean's standard error (the sd of log steps over the root of the
  seeds); a seed that missed the target there enters as censored at the steps it ran (the same
  Tobit fit, at one batch), and a batch where fewer than two seeds reached it is left out.

The models: ``plain``, today's model, one noise scale (the base runs' median whole-run estimate);
``schedule``, the measured noise scale over progress (its shape over the base runs), one run's
information, no other batch; ``fit_1x_2x`` and ``fit_1x_4x``, ``hetsim.model.efficiency_fit.fit``
on the base runs and those at 2x (4x), target steps and noise scale free. The fitted form is a
line in ``1 / B`` (``S = S_min + S_min B_noise / B``), so the second batch decides how far the
line is carried: through 1x and 2x, ``S(8x) = 1.75 S(2x) - 0.75 S(1x)``; through 1x and 4x,
``S(8x) = (7 S(4x) - S(1x)) / 6``, which carries the runs' scatter 2.6 times less (in variance).

Prints one JSON object: per measure, model and workload, every prediction's relative error
``(predicted - measured) / measured``, and the mean, median and p90 of ``|error|``: overall
(``all``), at the batches the model was not fitted on (``not_fitted``: a fit's own second batch
is predicted for a seed left out, which no other batch tests) and at 4x and 8x alone
(``extrapolated_4x_8x``), and pooled over the workloads; for the fitted models also
``covered_95``, the share of predictions whose 95% interval holds the measurement (per run: the
fitted parameters' uncertainty and one run's scatter, the fit's residual sd of ln steps; typical:
the parameters' uncertainty and the typical run's own standard error; each interval the fit's
t quantile wide, :func:`~hetsim.model.efficiency_fit.quantile`, as calibrate-efficiency and plan
print them).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import Parser, checked_seed, count, entry, out_path, refuse, stats

from hetsim.calibrate.efficiency_runs import Sweep, fitted_model, load_sweeps, plain_model, reached
from hetsim.core.errors import ConfigError
from hetsim.core.files import json_text
from hetsim.model.efficiency import Efficiency
from hetsim.model.efficiency_fit import fit, quantile, steps_log_sd
from validation.batch_sweep_cli import MAX_FIRST_SEED

WORKLOADS = ("digits-cnn", "transformer")
MULTIPLES = (1, 2, 4, 8)
FITTED = {"plain": (1,), "schedule": (1,), "fit_1x_2x": (1, 2), "fit_1x_4x": (1, 4)}  # the multiples each model sees

PROG = "batch_scaling"  # bad input: "batch_scaling: error: ..."


def error_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many ``rows``, the mean, median and p90 of their absolute errors (None when none), and
    where they have z's, the share within their interval's quantile (the 95% interval's coverage)."""
    if not rows:
        return {"n": 0, "mean": None, "median": None, "p90": None}
    out: dict[str, Any] = {"n": len(rows), **stats(abs(r["error"]) for r in rows)}
    z = [(r["z"], r["z_limit"]) for r in rows if math.isfinite(r.get("z", math.nan))]
    if z:
        out["covered_95"] = sum(abs(v) <= limit for v, limit in z) / len(z)
    return out


def models(train: Sweep) -> dict[str, Efficiency]:
    """The models fitted on ``train`` (runs of the other seeds), each on the multiples of
    :data:`FITTED` (``plain`` is not fitted: it has no uncertainty)."""
    base = train.base_batch
    return {
        "plain": plain_model(train),
        **{
            name: fitted_model(train, [k * base for k in FITTED[name]], schedule=name == "schedule",
                               exponent=False).efficiency
            for name in ("schedule", "fit_1x_2x", "fit_1x_4x")
        },
    }  # fmt: skip


Guess = tuple[float, float | None, float]  # steps predicted, the sd of their log (None: none), its 95% quantile


def guess(model: Efficiency, batch: int, run_scatter: bool) -> Guess:
    """``model``'s steps to the target at ``batch``, the sd of their log: the fitted parameters'
    (delta method), with ``run_scatter`` one run's scatter about the typical run added (the fit's
    residual sd); None for a model without uncertainty (:func:`~hetsim.model.efficiency_fit.steps_log_sd`);
    and how many of those sds its 95% interval spans."""
    centre, fit_sd, run_sd = steps_log_sd(model, batch)
    return centre, run_sd if run_scatter else fit_sd, quantile(model)


def scored(given: Guess, measured: float, measured_log_se: float = 0.0) -> dict[str, Any]:
    """A prediction's row: its relative error and, where it has an sd, its z (the log error over
    the prediction's and the measurement's sds together) and the z its interval reaches."""
    predicted, log_sd, limit = given
    row: dict[str, Any] = {"predicted": predicted, "error": (predicted - measured) / measured}
    if log_sd is not None:
        row["z"] = math.log(predicted / measured) / math.hypot(log_sd, measured_log_se)
        row["z_limit"] = limit
    return row


def predictions(sweep: Sweep) -> dict[str, list[dict[str, Any]]]:
    """Every model's prediction of every run at 2x, 4x, 8x, leaving the run's seed out of the fit;
    and the reference for the noise floor, ``same_batch``: the median of the other seeds' steps at
    the run's own batch (one run being one draw of the seed-to-seed scatter)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for seed in sorted({p.seed for p in sweep.points}):
        train = replace(sweep, points=tuple(p for p in sweep.points if p.seed != seed))
        fitted = models(train)
        for point in reached(sweep, [k * sweep.base_batch for k in MULTIPLES[1:]]):
            if point.seed != seed:
                continue
            measured = float(point.steps or 0)
            guesses = {name: guess(m, point.batch, run_scatter=True) for name, m in fitted.items()}
            others = [float(p.steps or 0) for p in reached(train, [point.batch])]
            if others:
                guesses["same_batch"] = (float(np.median(others)), None, math.nan)
            for name, given in guesses.items():
                row = {"batch": point.batch, "multiple": point.batch // sweep.base_batch, "seed": seed,
                       "measured": measured, **scored(given, measured)}  # fmt: skip
                out.setdefault(name, []).append(row)
    return out


def typical_steps(sweep: Sweep) -> dict[int, dict[str, Any]]:
    """Per multiple (2x, 4x, 8x) where two or more seeds reached the target: the seeds' typical
    steps, exp of the mean of ln steps (the quantity the efficiency fit models), a seed that missed
    the target taken as censored at the steps it ran (the same Tobit fit, at one batch), and the
    standard error of its log."""
    out = {}
    for k in MULTIPLES[1:]:
        batch = k * sweep.base_batch
        runs = [p for p in sweep.points if p.batch == batch]
        done = [float(p.steps) for p in runs if p.steps is not None]
        cut = [(float(batch), float(p.steps_run)) for p in runs if p.steps is None and p.steps_run]
        if len(done) < 2:
            continue
        found = fit([float(batch)] * len(done), done, batch, 1.0, censored=cut)
        se = math.sqrt(found.covariance[0, 0])
        out[k] = {"batch": batch, "seeds": len(runs), "missed": len(runs) - len(done),
                  "measured": found.efficiency.target_steps, "measured_log_se": se}  # fmt: skip
    return out


def typical(sets: list[Sweep]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every model fitted on each set's base (and 2x) runs against each set's typical steps at 2x,
    4x and 8x: ``same_set`` (its own seeds: the fit and the truth share them, and a seed's luck
    runs across batches) and ``other_set`` (another set's seeds, disjoint from the fit's)."""
    fitted, truths = [models(s) for s in sets], [typical_steps(s) for s in sets]
    out: dict[str, dict[str, list[dict[str, Any]]]] = {"same_set": {}, "other_set": {}}
    for i, by_model in enumerate(fitted):
        for j, truth in enumerate(truths):
            for k, t in truth.items():
                for name, model in by_model.items():
                    row = {"fitted_on": i, "measured_on": j, "multiple": k, **t,
                           **scored(guess(model, t["batch"], run_scatter=False), t["measured"],
                                    t["measured_log_se"])}  # fmt: skip
                    out["same_set" if i == j else "other_set"].setdefault(name, []).append(row)
    return out


def unfitted(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of model ``name`` at batches it was not fitted on (``same_batch``'s: every row)."""
    return [r for r in rows if r["multiple"] not in FITTED.get(name, ())]


def summarised(rows_by_model: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each model's rows with their error statistics: overall, at the batches it was not fitted
    on, and at 4x and 8x alone."""
    return {name: {"predictions": rows, "all": error_stats(rows), "not_fitted": error_stats(unfitted(name, rows)),
                   "extrapolated_4x_8x": error_stats([r for r in rows if r["multiple"] >= 4])}
            for name, rows in rows_by_model.items()}  # fmt: skip


def sweep_folder(workload: str, args: argparse.Namespace) -> Path:
    """``args.out/WORKLOAD``, its sweep run first unless it holds one (of the learning rate and
    seeds asked for: another is refused, not reported as this one)."""
    folder = args.out / workload
    if (folder / "results.json").exists():
        held = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        asked = {"lr": args.lr.get(workload, held.get("lr")), "seeds": args.seeds, "first_seed": args.first_seed}
        for key, value in asked.items():
            if held.get(key, 0 if key == "first_seed" else None) != value:
                refuse(
                    PROG, f"--out: {folder} holds a sweep of {key} {held.get(key)!r}, not {value!r}: give another --out"
                )
    else:
        command = [sys.executable, "-m", "validation", "batch-sweep", "--workload", workload, "--batches",
                   ",".join(map(str, MULTIPLES)), "--seeds", str(args.seeds), "--first-seed", str(args.first_seed),
                   "--jobs", str(args.jobs), "--out", str(folder)]  # fmt: skip
        command += ["--lr", str(args.lr[workload])] if workload in args.lr else []
        command += ["--quick"] if args.quick else []
        subprocess.run(command, check=True)
    return folder


def reused_sets(folders: list[Path]) -> dict[str, dict[Path, Sweep]]:
    """The sweeps under ``folders`` (each a sweep or a folder of sweeps), by workload and folder
    (a folder named twice counts once)."""
    found: dict[str, dict[Path, Sweep]] = {}
    for folder in folders:
        inside = sorted(f.parent for f in folder.glob("*/results.json"))
        sweeps = [folder] if (folder / "results.json").exists() else inside
        if not sweeps:
            refuse(PROG, f"--reuse: no batch-sweep results under {folder}")
        for path in sweeps:
            sweep = load_sweeps([path])
            found.setdefault(sweep.workload, {}).setdefault(path.resolve(), sweep)
    return found


def learning_rates(text: str) -> dict[str, float]:
    """``--lr``'s WORKLOAD=LR,... as a mapping."""
    try:
        pairs = [item.split("=", 1) for item in text.split(",") if item]
        return {name: float(value) for name, value in pairs}
    except ValueError:
        refuse(PROG, f"--lr: expected WORKLOAD=LR,..., got {text!r}")


def parse_args() -> argparse.Namespace:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=out_path, default="runs/batch-scaling", help="sweeps' folder")
    parser.add_argument("--reuse", type=Path, nargs="+", default=None,
                        help="sweeps already run: batch-sweep folders, or folders of WORKLOAD/ sweeps")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the sweeps' --quick")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--jobs", type=count, default=1, help="the sweeps' --jobs (runs at once)")
    parser.add_argument("--seeds", type=count, default=3, help="the sweeps' --seeds")
    parser.add_argument("--first-seed", type=int, default=0, help="the sweeps' --first-seed")
    parser.add_argument("--lr", type=learning_rates, default="digits-cnn=0.03", metavar="WORKLOAD=LR,...",
                        help="the sweeps' --lr per workload (default digits-cnn=0.03)")  # fmt: skip
    parser.add_argument("--resamples", type=count, default=200, help="draws of the seeds for the typical intervals")
    parser.add_argument("--seed", type=int, default=0, help="the resampling's seed")
    args = parser.parse_args()
    checked_seed(PROG, args.seed)
    checked_seed(PROG, args.first_seed, "--first-seed", MAX_FIRST_SEED)  # the batch-sweeps' bound
    return args


def resampled(sets: list[Sweep], rng: np.random.Generator) -> list[Sweep]:
    """Each set with its seeds drawn with replacement (a seed's runs at every batch kept together)."""
    out = []
    for sweep in sets:
        seeds = sorted({p.seed for p in sweep.points})
        drawn = rng.choice(seeds, size=len(seeds), replace=True)
        out.append(replace(sweep, points=tuple(p for seed in drawn for p in sweep.points if p.seed == seed)))
    return out


def pooled_far(rows_by_model: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each model's error statistics over its rows at batches it was not fitted on."""
    return {name: error_stats(unfitted(name, rows)) for name, rows in rows_by_model.items()}


def resample_intervals(sets: dict[str, list[Sweep]], resamples: int, seed: int) -> dict[str, Any]:
    """The 5th and 95th percentiles, over ``resamples`` draws of the seeds, of the typical measures'
    pooled median and p90 at the batches each model was not fitted on: how far another set of
    seeds could move them (a draw that a model cannot be fitted on is skipped, and counted)."""
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(resamples)]
    draws: dict[str, dict[str, list[tuple[float, float]]]] = {}
    skipped = 0
    for rng in rngs:
        pooled: dict[str, dict[str, list[dict[str, Any]]]] = {}
        try:
            for workload_sets in sets.values():
                for measure, by_model in typical(resampled(workload_sets, rng)).items():
                    for name, rows in by_model.items():
                        pooled.setdefault(measure, {}).setdefault(name, []).extend(rows)
        except ConfigError:  # a draw a model cannot be fitted on (e.g. no base run with a schedule)
            skipped += 1
            continue
        for measure, by_model in pooled.items():
            for name, st in pooled_far(by_model).items():
                if st["n"]:
                    draws.setdefault(measure, {}).setdefault(name, []).append((st["median"], st["p90"]))
    return {"skipped_draws": skipped,
            **{measure: {name: {"median_5_95": [float(q) for q in np.percentile([d[0] for d in v], [5, 95])],
                                "p90_5_95": [float(q) for q in np.percentile([d[1] for d in v], [5, 95])]}
                         for name, v in by_model.items()}
               for measure, by_model in draws.items()}}  # fmt: skip


def main() -> None:
    args = parse_args()
    if args.reuse:
        loaded = reused_sets(args.reuse)
    else:
        made = {workload: sweep_folder(workload, args) for workload in args.workloads.split(",")}
        loaded = {workload: {folder: load_sweeps([folder])} for workload, folder in made.items()}
    folders = {workload: list(by_folder) for workload, by_folder in loaded.items()}
    sets = {workload: list(by_folder.values()) for workload, by_folder in loaded.items()}
    measures = ("per_run", "typical_same_set", "typical_other_set")
    result: dict[str, Any] = {"command": " ".join(sys.argv), "not_reached": {},
                              "sets": {w: [str(f) for f in fs] for w, fs in folders.items()},
                              **{m: {"workloads": {}} for m in measures}}  # fmt: skip
    pooled: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in measures}
    for workload, workload_sets in sets.items():
        sweep = load_sweeps(folders[workload])
        result["not_reached"][workload] = [f"{p.batch}/{p.seed}" for p in sweep.points if p.steps is None]
        found = {"per_run": predictions(sweep), **{f"typical_{k}": v for k, v in typical(workload_sets).items()}}
        for measure, by_model in found.items():
            result[measure]["workloads"][workload] = summarised(by_model)
            for name, rows in by_model.items():
                pooled[measure].setdefault(name, []).extend(rows)
    for measure, by_model in pooled.items():
        result[measure]["pooled"] = {name: {k: v for k, v in entry.items() if k != "predictions"}
                                     for name, entry in summarised(by_model).items()}  # fmt: skip
    if args.resamples:
        result["resampled"] = {"resamples": args.resamples, "seed": args.seed,
                               **resample_intervals(sets, args.resamples, args.seed)}  # fmt: skip
    print(json_text(result))


if __name__ == "__main__":
    entry(main, "batch_scaling")
