"""Command-line wiring of ``calibrate-efficiency``: batch-sweep results folders
(``python -m validation batch-sweep``) -> the ``[workload.efficiency]`` table a scenario takes,
with the fit's standard errors and the batch range it measured (:mod:`hetsim.calibrate.efficiency_runs`).

Adding the command imports nothing heavy; the handler imports the fit (NumPy, SciPy) when it runs.
The table is printed, and written atomically with ``-o``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hetsim.core.console import parse_counts, path_argument
from hetsim.core.errors import ConfigError


def add_subcommands(sub: Any) -> None:
    """Add ``calibrate-efficiency`` to an argparse subparsers object."""
    ce = sub.add_parser(
        "calibrate-efficiency", help="batch-sweep results -> [workload.efficiency] (noise scale, batch dependence)"
    )
    ce.add_argument("runs", nargs="+", type=path_argument, metavar="RUN", help="batch-sweep results folder(s)")
    ce.add_argument("--batches", default=None, metavar="B,...",
                    help="fit on the runs at these global batches only, e.g. 16,32 (samples, not batch-sweep's "
                    "multiples; default: every batch)")  # fmt: skip
    ce.add_argument("--schedule", action="store_true",
                    help="a noise scale over progress, the base runs' measured shape (default: one value)")  # fmt: skip
    ce.add_argument("--no-exponent", action="store_true", help="keep the noise scale independent of the batch")
    ce.add_argument(
        "-o", "--out", type=path_argument, default=None, metavar="FILE.toml", help="also write the table here"
    )


def _batches(text: str | None) -> list[int] | None:
    if text is None:
        return None
    return list(parse_counts(text, "--batches"))


def cmd_calibrate_efficiency(args: argparse.Namespace) -> int:
    import tomli_w

    from hetsim.calibrate.efficiency_runs import fitted_model, load_sweeps, reached
    from hetsim.cli.common import check_out_file
    from hetsim.core.files import atomic_write, check_new_file
    from hetsim.core.provenance import comment_header, provenance

    batches = _batches(args.batches)
    if args.out is not None:
        check_out_file(args.out, {".toml": "toml"}, "--out")
        check_new_file(args.out, "--out")
    sweep = load_sweeps(args.runs)
    have = sorted({p.batch for p in sweep.points})
    absent = [b for b in batches or () if b not in have]
    if absent and len(absent) < len(batches or ()):  # fitted on the others, it says nothing of this one (all: below)
        raise ConfigError(
            "--batches", f"{absent[0]} is not a global batch of the sweep (it has {', '.join(map(str, have))})"
        )
    result = fitted_model(sweep, batches, args.schedule, not args.no_exponent)
    fitted = sorted({p.batch for p in reached(sweep, batches)})  # fit_batches' range: a batch all cut is not in it
    # the rate and optimizer the sweep ran with: the table holds for them alone (plan.json passes the rate on)
    table = replace(result.efficiency, lr=sweep.lr, optimizer=sweep.optimizer, measured_on=sweep.workload).to_dict()
    cut, left = missed_runs(sweep, batches, censored=result.censored > 0)
    if cut:  # their steps exceed the ones they ran: censored, so the slow seeds still count
        print(f"note: {cut} did not reach the target: fitted as censored (more steps than they ran)", file=sys.stderr)
    if left:  # results that do not say how long they ran: the steps the fit sees there are the fast seeds' only
        print(f"warning: {left} left out (they did not reach the target, and their steps run are not recorded or "
              "too few runs reached it to fit them as censored; the fit at those batches is of the seeds that did)",
              file=sys.stderr)  # fmt: skip
    for line in [*interval_warnings(result), *exponent_warnings(result.efficiency)]:
        print(f"warning: {line}", file=sys.stderr)
    said = (f"; {cut} censored, not reached" if cut else "") + (f"; {left} left out, not reached" if left else "")
    header = comment_header(provenance())  # the command, version, commit and date: the table is copied elsewhere
    text = header + f"# fitted by hetsim calibrate-efficiency on {len(args.runs)} sweep(s) of {sweep.workload}, " \
        f"target accuracy {sweep.target:g}; free: {', '.join(result.free)}; residual sd of ln(steps) " \
        f"{result.residual_sd:.3f}" + said + "\n" + "".join(f"# {line}\n" for line in predicted_steps(result, fitted)) \
        + tomli_w.dumps({"workload": {"efficiency": table}})  # fmt: skip
    if args.out is not None:
        atomic_write(args.out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    print(text, end="")
    return 0


def predicted_steps(result: Any, fitted: list[int]) -> list[str]:
    """The fit's steps to the target at each batch in ``fitted`` (those it was fitted on) and at
    twice the largest, with 95% intervals: the fitted parameters' uncertainty alone, and a single
    run's (the runs' scatter about the fit added), each where known."""
    from hetsim.model.efficiency_fit import bands

    top = max(fitted)
    out = ["steps to the target (95%: the fit's interval; one run's, the runs' scatter added):"]
    for batch in [*fitted, 2 * top]:
        centre, found = bands(result.efficiency, batch)
        parts = [f"{prefix}{found[f'{key}low']:.0f}-{found[f'{key}high']:.0f}"
                 for prefix, key in (("", ""), ("one run ", "one_run_")) if f"{key}low" in found]  # fmt: skip
        said = f" ({'; '.join(parts)})" if parts else ""
        out.append(f"  batch {batch}: {centre:.0f}{said}" + (", beyond the batches fitted" if batch > top else ""))
    return out


def interval_warnings(result: Any) -> list[str]:
    """Where the fit gives no interval, why: as many runs as free parameters leave no scatter
    to measure; a parameter the runs do not determine has no standard error (None in the table)."""
    import math

    eff, n = result.efficiency, len(result.free)
    if not math.isfinite(result.residual_sd):
        return [f"{n} parameter{'s' * (n > 1)} fitted to as many runs: no scatter is measured, so neither this table "
                "nor plan gives the steps an interval; run more seeds"]  # fmt: skip
    if eff.run_sd is None and eff.fitted == result.free:
        return [f"the runs scatter by more than a factor of e^50 about the fit (residual sd of ln steps "
                f"{result.residual_sd:.3g}): no interval for the steps"]  # fmt: skip
    unknown = [k for k in result.free if k not in eff.fitted]
    if unknown:
        hint = ", or fit with --no-exponent" if "batch_exponent" in result.free else ""
        return [f"the runs do not determine {', '.join(unknown)}: no interval for the steps (run more batches or "
                f"seeds{hint})"]  # fmt: skip
    return []


def exponent_warnings(efficiency: Any) -> list[str]:
    """What a fitted batch exponent says of itself: at its bound the runs do not determine it
    (its standard error is the bound's curvature, not an error); a negative one shrinks the noise
    scale with the batch until the gain falls back toward 1, so the model predicts more steps past
    some batch, which the form it extends does not (said where that batch is within 8x the
    largest fitted one)."""
    import numpy as np

    from hetsim.model.efficiency import EXPONENT_BOUND

    alpha = efficiency.batch_exponent
    if alpha is None:
        return []
    out = []
    if abs(alpha) >= EXPONENT_BOUND - 1e-3:  # the optimiser stops within about 1e-4 of a bound it rests on
        out.append(f"the batch exponent sits at its bound ({alpha:g}): the runs do not determine it, and its "
                   "standard error means nothing; fit with --no-exponent, or add runs at other batches")  # fmt: skip
    top = 8 * (efficiency.fit_batches[1] if efficiency.fit_batches else efficiency.base_batch)
    grid = np.geomspace(efficiency.base_batch, top, 200)
    steps = np.array([efficiency.steps_to_target(b) for b in grid])
    rising = np.flatnonzero(np.diff(steps) > 0)
    if rising.size:
        turn = f"{grid[rising[0]]:.0f}"
        out.append(f"with a batch exponent of {alpha:.2f} the model predicts more steps past a batch of about "
                   f"{turn} (its gain falls again), which goodput and plan believe; check runs there")  # fmt: skip
    return out


def missed_runs(sweep: Any, batches: list[int] | None, censored: bool) -> tuple[str, str]:
    """``runs 2 of 5 at 128, ...`` for the batches fitted on where some run missed the target: those
    the fit took as ``censored`` (their steps run recorded), and those left out ('' where none)."""
    from hetsim.calibrate.efficiency_runs import missed

    def said(runs: list[Any]) -> str:
        per_batch = {b: sum(p.batch == b for p in runs) for b in sorted({p.batch for p in runs})}
        of = {b: sum(p.batch == b for p in sweep.points) for b in per_batch}
        return f"runs {', '.join(f'{m} of {of[b]} at {b}' for b, m in per_batch.items())}" if runs else ""

    runs = missed(sweep, batches)
    cut = [p for p in runs if censored and p.steps_run]
    return said(cut), said([p for p in runs if p not in cut])


COMMANDS = {"calibrate-efficiency": cmd_calibrate_efficiency}
