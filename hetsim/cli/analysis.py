"""Command-line wiring of the analysis commands: ``analyze`` and ``calibrate``.

:func:`add_subcommands` adds them to ``hetsim.cli.main``'s subparsers; :data:`COMMANDS` maps each
name to its handler. Handlers print what they compute (the library does not) and raise
:class:`~hetsim.core.errors.ConfigError` for any bad input, which ``hetsim.cli.main.main`` reports as one
line with exit status 2; files are written atomically, after every check has passed.

Adding the commands to a parser imports nothing heavy: each handler imports the modules it
works with (analytic, calibrate, logs, report: numpy, scipy, pandas, matplotlib), so that
``python -m hetsim --help``, or any other command, does not wait for them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hetsim.cli.calibrate import cmd_calibrate
from hetsim.cli.common import add_scenario_options, check_seed, say_unfitted, scenario_of, scenario_policies
from hetsim.core.console import path_argument
from hetsim.core.files import json_text

if TYPE_CHECKING:
    from hetsim.analysis.analytic import Prediction
    from hetsim.policies import Policy
    from hetsim.scenario.scenario import Scenario

CI_LEVEL = 0.95


def add_subcommands(sub: Any) -> None:
    """Add ``analyze`` and ``calibrate`` to an argparse subparsers object."""
    an = sub.add_parser("analyze", help="analytic prediction beside the simulated mean and its 95%% CI, per policy")
    add_scenario_options(an, "print the comparison as a JSON list")

    cal = sub.add_parser("calibrate", help="fit a scenario to a trace (CSV or Parquet)")
    cal.add_argument("trace", help="trace file with at least worker, local_batch, compute_s")
    cal.add_argument(
        "-o",
        "--out",
        type=path_argument,
        default=None,
        metavar="OUT.toml|OUT.json",
        help="write the scenario here (default: print it as TOML)",
    )
    cal.add_argument("--name", default=None, help="scenario name (default: calibrated-<trace stem>)")
    cal.add_argument(
        "--policy", default=None, metavar="NAME", help="fit this policy's rows (needed when the trace holds several)"
    )
    model = cal.add_argument(
        "--model",
        default="auto",
        metavar="MODEL",
        help="each worker's cost model; auto (the default): the one with the least error at batch sizes left out",
    )
    cal.defer_metavar(model, _model_choices)
    cal.add_argument(
        "--scheduled-split",
        action="store_true",
        help="the rows' split followed a schedule set before the run (validation's probe), not the measured times: "
        "no warning that a split reacting to persistent noise biases the fit",
    )
    cal.add_argument("--json", action="store_true", help="print the fit as one JSON object (the scenario inside)")


def _model_choices() -> str:
    """``auto|affine|...``: calibrate's choices, shown as ``--model``'s metavar when calibrate's
    usage or help is (resolved by :func:`hetsim.calibrate.model_named` as the command runs)."""
    from hetsim.calibrate import CHOICES  # imported here so that the command line starts without scipy

    return "|".join(CHOICES)


# ----------------------------------------------------------------------------- analyze


@dataclass(frozen=True)
class Comparison:
    """One policy's analytic prediction beside its simulation (times in seconds per step)."""

    policy: str
    predicted_step_s: float | None  # the closed form's mean step time; None without one
    simulated_step_s: float  # the simulated mean step time (over ``runs`` runs)
    ci_low_s: float | None  # the CI_LEVEL confidence interval of the expected mean; None from one step
    ci_high_s: float | None
    inside: bool | None  # the prediction inside that interval; None when either is missing
    relative_error: float | None  # predicted / simulated - 1
    no_closed_form: str | None  # why there is no prediction
    prediction: Prediction | None
    runs: int = 1  # the simulated runs (seeds) the mean and its CI are over

    def to_dict(self) -> dict[str, Any]:
        """The ``analyze --json`` object: these fields, ``prediction`` as its own dict."""
        return {
            "policy": self.policy,
            "predicted_step_s": self.predicted_step_s,
            "simulated_step_s": self.simulated_step_s,
            "ci_low_s": self.ci_low_s,
            "ci_high_s": self.ci_high_s,
            "inside": self.inside,
            "relative_error": self.relative_error,
            "no_closed_form": self.no_closed_form,
            "runs": self.runs,
            "prediction": None if self.prediction is None else self.prediction.to_dict(),
        }


def compare(scenario: Scenario, policy: Policy, seed: int | None = None) -> Comparison:
    """One policy's prediction beside its simulation: the simulated mean step time with the
    confidence interval of its expected value (:func:`hetsim.analysis.step_ci.simulated_mean`: one run,
    or replications where one run cannot show the spread) and whether the prediction falls
    inside."""
    from hetsim.analysis.analytic import NoClosedForm, predict
    from hetsim.analysis.step_ci import simulated_mean
    from hetsim.policies import fresh

    try:
        prediction: Prediction | None = predict(scenario, fresh(policy))
        reason = None
    except NoClosedForm as exc:
        prediction, reason = None, exc.reason
    simulated = simulated_mean(scenario, policy, seed, CI_LEVEL)
    ci = simulated.ci
    predicted = None if prediction is None else prediction.mean_step_s
    return Comparison(
        policy=policy.name,
        predicted_step_s=predicted,
        simulated_step_s=simulated.mean_s,
        ci_low_s=None if ci is None else ci.low,
        ci_high_s=None if ci is None else ci.high,
        inside=None if predicted is None or ci is None else ci.contains(predicted),
        relative_error=None if predicted is None else predicted / simulated.mean_s - 1.0,
        no_closed_form=reason,
        prediction=prediction,
        runs=simulated.runs,
    )


def cmd_analyze(args: argparse.Namespace) -> int:
    from hetsim.analysis.step_ci import replication_reason
    from hetsim.scenario.config import check_run_size

    scenario = scenario_of(args)
    notes: list[str] = []
    policies = scenario_policies(args.policy, scenario, notes)
    check_seed(args.seed)
    check_run_size(scenario)  # before any analysis: its simulations keep their traces
    say_unfitted(scenario.unfitted())
    print(*notes, sep="\n", file=sys.stderr, end="\n" if notes else "")  # once the input has passed
    rows = [compare(scenario, policy, args.seed) for policy in policies.values()]
    if args.json:
        print(json_text([r.to_dict() for r in rows]))
        return 0
    wl = scenario.workload
    print(
        f"{scenario.name}: {scenario.n_workers} workers, global batch {wl.global_batch}, "
        f"{wl.epochs} epochs x {wl.steps_per_epoch} steps, {CI_LEVEL:.0%} CI of the expected mean"
    )
    target = wl.efficiency is not None and wl.efficiency.target_steps is not None
    print(_table(rows, target))
    for row in rows:
        if row.runs > 1:
            why = replication_reason(scenario, policies[row.policy])
            print(f"{row.policy}: simulated mean and CI over {row.runs} runs, one per seed, because {why}")
        if row.no_closed_form:
            print(f"{row.policy}: no closed form because {row.no_closed_form}")
        if row.predicted_step_s is not None and not policies[row.policy].synchronous:
            print(
                f"{row.policy}: its closed form is the long-run rate of updates, without the run's start (each "
                "worker's first cycle): a run of few updates differs from it, and 'inside' tests the long-run rate"
            )
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.3f}"


def _table(rows: Sequence[Comparison], target: bool) -> str:
    """The comparison table; with a ``target`` (``target_steps``), the predicted time to it too."""
    from hetsim.core.console import text_table

    header = ("policy", "predicted ms", "simulated ms", "95% CI ms", "error", "inside")
    body = [
        (
            r.policy,
            _ms(r.predicted_step_s),
            _ms(r.simulated_step_s),
            "-" if r.ci_low_s is None or r.ci_high_s is None else f"{r.ci_low_s * 1e3:.3f}-{r.ci_high_s * 1e3:.3f}",
            "-" if r.relative_error is None else f"{r.relative_error:+.2%}",
            "-" if r.inside is None else ("yes" if r.inside else "no"),
            *([_to_target(r.prediction)] if target else []),
        )
        for r in rows
    ]
    return text_table((*header, *(["predicted to target s"] if target else [])), body)


def _to_target(prediction: Prediction | None) -> str:
    """The predicted time to the target ("-": no prediction of it; "not reached" in the run)."""
    if prediction is None or prediction.progress is None:
        return "-"
    return "not reached" if prediction.time_to_target_s is None else f"{prediction.time_to_target_s:.3f}"


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "analyze": cmd_analyze,
    "calibrate": cmd_calibrate,
}
