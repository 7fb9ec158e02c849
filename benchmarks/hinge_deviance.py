"""Is a forced hinge's likelihood over kinks calibrated, and why does one floor read wide?

    python benchmarks/hinge_deviance.py [--seeds 300] [--jobs N] [--control 100] [--quick]

On ``benchmarks/calibration_coverage.py``'s idle-worker cluster with hinge costs (``adaptive``
on 4 workers, one left idle; the same seeds as its rounds together), per seed and fitted worker:

* ``truth_deviance``: the true curve's sum of squared relative residuals over the fitted one's,
  in units of the fitted one's residual variance (the deviance by which
  :func:`hetsim.calibrate.hinge.least_squares_kinks` weighs kinks). Where it is calibrated it is
  chi-square with three degrees of freedom (the truth fixes all three parameters): mean 3,
  median 2.37, 90th percentile 6.25. Summarised over seeds as mean, median, p90.
* for ``--param`` (default ``w1.floor_s``, the floor docs/benchmarks.md examines): the seeds
  that report it (the rest leave it unknown: a line through the rows fits about as well), its
  root mean square reported error over the spread of its estimates (``se_ratio``), the 95%
  bootstrap interval of that ratio over the seeds, ``p_if_honest`` (how often a ratio at least
  this far from 1 would arise if each seed's estimate were drawn from a normal with the truth
  as mean and its reported error as sd), and the sd of (estimate - truth) / se.
* ``truth_centred`` (``--control B`` row sets a seed, 0: none): what the same figures read when
  each reporting seed's error is the exact spread of the whole fit at that seed's own batch
  sizes, with nothing estimated: B sets of rows drawn about the true curve with the case's
  noise, fitted as ``calibrate`` fits them (the kink, the kinks allowed, whether the parameter
  is reported at all), the sd of the parameter over the sets that report it. No per-seed error
  does better than this on either figure: where its ``se_ratio`` reads far from 1 while its
  ``z_sd`` is about 1, the ratio over the few seeds that report a parameter is not a test an
  honest error can pass. Also the share of the sets that report the parameter (how often a run
  at those batch sizes tells it).

Prints JSON.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from bench_common import Parser, count, entry, stats
from calibration_coverage import IDLE_SIGMA, case_seed, cases, ratio_interval, rms

from hetsim.calibrate import calibrate, fit_worker
from hetsim.calibrate.curves import HingeCurve
from hetsim.core.errors import ConfigError
from hetsim.model.costs import Hinge

CASE, MODEL, STEPS = "adaptive-idle", "hinge", 500
RESAMPLES = 20000


def one_seed(seed: int) -> dict[str, Any]:
    """One seed's fits: every worker's truth deviance, reported (estimate, se) per parameter, and
    its batch sizes (``--control`` draws its rows at them)."""
    make, truth, _ = cases(True)[CASE]
    frame = make(case_seed(f"{CASE}/{MODEL}", seed), STEPS)
    cal = calibrate(frame, model=Hinge)
    out: dict[str, Any] = {"deviance": {}, "params": {}, "batches": {}}
    for fit in cal.workers:
        rows = frame[(frame["worker"] == fit.worker) & frame["included"]]
        b, y = rows["local_batch"].to_numpy(float), rows["compute_s"].to_numpy(float)
        t = truth[fit.worker]
        true = HingeCurve(np.array([t["floor_s"], t["overhead_s"], t["per_sample_s"]]))
        p = fit.cost_curve().params()
        scale = HingeCurve(np.array([p["floor_s"], p["overhead_s"], p["per_sample_s"]])).time_s(b)
        fitted = float((((y - scale) / scale) ** 2).sum())
        at_truth = float((((y - true.time_s(b)) / scale) ** 2).sum())
        out["deviance"][fit.worker] = (at_truth - fitted) / (fitted / (y.size - 4))
        out["batches"][fit.worker] = b[b > 0]  # the rows a fit takes
        for key, value in p.items():
            se = fit.se.get(key)
            out["params"][f"w{fit.worker}.{key}"] = (value, math.nan if se is None else se, t[key])
    return out


def control(job: tuple[int, int, np.ndarray, np.ndarray, str, int]) -> tuple[float, float]:
    """Seed ``seed``'s truth-centred spread of ``worker``'s parameter ``key`` over ``draws`` row
    sets at its batch sizes ``b``, drawn about the true hinge ``true`` (module docstring): the sd
    over the sets that report it (nan where fewer than 3 do), and the share that do."""
    seed, worker, b, true, key, draws = job
    true_s = HingeCurve(true).time_s(b)
    rng = np.random.default_rng([seed, worker, draws])
    values = []
    for _ in range(draws):
        y = true_s * np.exp(IDLE_SIGMA * rng.standard_normal(b.size) - IDLE_SIGMA**2 / 2)  # mean-1 lognormal
        try:
            fit, _ = fit_worker(worker, b, y, None, model=Hinge)
        except ConfigError:  # no hinge fits these rows: not reported
            continue
        if fit.se.get(key) is not None:
            values.append(fit.cost_curve().params()[key])
    return float(np.std(values, ddof=1)) if len(values) >= 3 else math.nan, len(values) / draws


def control_summary(rows: list[tuple[float, float, float]], spread: list[tuple[float, float]]) -> dict[str, Any]:
    """:func:`param_summary`'s ratio and sd of z, each seed's error its truth-centred spread."""
    est, sd = np.array([r[0] for r in rows]), np.array([s for s, _ in spread])
    known = np.isfinite(sd)
    z = (est[known] - rows[0][2]) / sd[known]
    return {
        "seeds": int(known.sum()), "se_ratio": float(rms(sd[known]) / est[known].std(ddof=1)),
        "z_sd": float(z.std(ddof=1)), "z_mean": float(z.mean()), "reported_share": stats(s for _, s in spread),
    }  # fmt: skip


def param_summary(rows: list[tuple[float, float, float]], rng: np.random.Generator) -> dict[str, Any]:
    """``rows`` (estimate, se, truth) of the seeds that report the parameter: see the docstring."""
    est, se = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    truth = rows[0][2]
    observed = float(rms(se) / est.std(ddof=1))
    interval = ratio_interval(est, se, rng, RESAMPLES)
    honest = truth + se * rng.standard_normal((RESAMPLES, est.size))  # each estimate drawn with its own error
    far = abs(math.log(observed))
    return {
        "seeds": int(est.size), "truth": truth, "mean": float(est.mean()), "se_ratio": observed,
        "se_ratio_ci": interval,
        "p_if_honest": float(np.mean(np.abs(np.log(rms(se) / honest.std(axis=1, ddof=1))) >= far)),
        "z_sd": float(((est - truth) / se).std(ddof=1)),
    }  # fmt: skip


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=count, default=300, help="seeds (calibration_coverage's rounds together)")
    parser.add_argument("--param", default="w1.floor_s", help="the parameter to examine")
    parser.add_argument("--jobs", type=count, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--control", type=int, default=100, help="row sets a reporting seed (0: no control)")
    parser.add_argument("--quick", action="store_true", help="30 seeds (a smoke run)")
    args = parser.parse_args()
    seeds = range(30 if args.quick else args.seeds)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        done = list(pool.map(one_seed, seeds, chunksize=10))
        worker, key = int(args.param[1 : args.param.index(".")]), args.param.split(".", 1)[1]
        told = [(s, d) for s, d in zip(seeds, done) if math.isfinite(d["params"].get(args.param, (0, math.nan))[1])]
        true = np.array([cases(True)[CASE][1][worker][k] for k in ("floor_s", "overhead_s", "per_sample_s")])
        jobs = [(s, worker, d["batches"][worker], true, key, args.control) for s, d in told] if args.control else []
        spread = list(pool.map(control, jobs))
    workers = sorted({w for d in done for w in d["deviance"]})
    reported = [d["params"][args.param] for _, d in told]
    result = {
        "case": f"{CASE}/{MODEL}", "seeds": len(seeds),
        "truth_deviance": {f"w{w}": stats(d["deviance"][w] for d in done if w in d["deviance"]) for w in workers},
        "chi2_3": {"mean": 3.0, "median": 2.366, "p90": 6.251},
        args.param: param_summary(reported, np.random.default_rng(0)) if len(reported) >= 3 else None,
        "truth_centred": control_summary(reported, spread) if len(spread) >= 3 else None,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    entry(main, "hinge_deviance")
