"""Command-line wiring of ``calibrate-efficiency``: batch-sweep results folders
(``python -m validation batch-sweep``) -> the ``[workload.efficiency]`` table a scenario takes,
with the fit's standard errors and the batch range it measured (:mod:`hetsim.calibrate.efficiency_runs`).

Adding the command imports nothing heavy; the handler imports the fit (NumPy, SciPy) when it runs.
The table is printed, and written atomically with ``-o``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hetsim.core.errors import ConfigError


def add_subcommands(sub: Any) -> None:
    """Add ``calibrate-efficiency`` to an argparse subparsers object."""
    ce = sub.add_parser(
        "calibrate-efficiency", help="batch-sweep results -> [workload.efficiency] (noise scale, batch dependence)"
    )
    ce.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="batch-sweep results folder(s)")
    ce.add_argument("--batches", default=None, metavar="B,...",
                    help="fit on the runs at these global batches only, e.g. 16,32 (samples, not batch-sweep's "
                    "multiples; default: every batch)")  # fmt: skip
    ce.add_argument("--schedule", action="store_true",
                    help="a noise scale over progress, the base runs' measured shape (default: one value)")  # fmt: skip
    ce.add_argument("--no-exponent", action="store_true", help="keep the noise scale independent of the batch")
    ce.add_argument("-o", "--out", type=Path, default=None, metavar="FILE.toml", help="also write the table here")


def _batches(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        out = [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError("--batches", f"expected whole numbers separated by commas, got {text!r}") from None
    if not out or min(out) < 1:
        raise ConfigError("--batches", f"every batch must be >= 1, got {text!r}")
    return out


def cmd_calibrate_efficiency(args: argparse.Namespace) -> int:
    import tomli_w

    from hetsim.calibrate.efficiency_runs import fitted_model, load_sweeps
    from hetsim.cli.common import check_out_file
    from hetsim.core.files import atomic_write, check_writable

    batches = _batches(args.batches)
    if args.out is not None:
        check_out_file(args.out, {".toml": "toml"}, "--out")
        check_writable(args.out)
    sweep = load_sweeps(args.runs)
    result = fitted_model(sweep, batches, args.schedule, not args.no_exponent)
    table = result.efficiency.to_dict()
    missed = missed_runs(sweep, batches)
    if missed:  # left out of the fit: the steps it sees at those batches are the fast seeds' only
        print(f"warning: {missed} left out (they did not reach the target; the fit at those batches is of the "
              "seeds that did)", file=sys.stderr)  # fmt: skip
    text = "# " + f"fitted by hetsim calibrate-efficiency on {len(args.runs)} sweep(s) of {sweep.workload}, " \
        f"target accuracy {sweep.target:g}; free: {', '.join(result.free)}; residual sd of ln(steps) " \
        f"{result.residual_sd:.3f}" + (f"; {missed} left out, not reached" if missed else "") + "\n" \
        + tomli_w.dumps({"workload": {"efficiency": table}})  # fmt: skip
    if args.out is not None:
        atomic_write(args.out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    print(text, end="")
    return 0


def missed_runs(sweep: Any, batches: list[int] | None) -> str:
    """``runs at 128: 2 of 5, ...`` for the batches fitted on where some run missed the target ('' if none)."""
    counts: dict[int, list[int]] = {}
    for p in sweep.points:
        if batches is None or p.batch in batches:
            counts.setdefault(p.batch, [0, 0])[p.steps is None] += 1
    missed = [f"{m} of {r + m} at {b}" for b, (r, m) in sorted(counts.items()) if m]
    return f"runs {', '.join(missed)}" if missed else ""


COMMANDS = {"calibrate-efficiency": cmd_calibrate_efficiency}
