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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsim.cli.common import add_scenario_options, check_out_file, check_seed, scenario_of, scenario_policies
from hetsim.core.console import path_argument
from hetsim.core.errors import ConfigError
from hetsim.core.files import atomic_write, check_new_file, json_text

if TYPE_CHECKING:
    from hetsim.analysis.analytic import Prediction
    from hetsim.calibrate import Calibration
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
    print(_table(rows))
    for row in rows:
        if row.runs > 1:
            why = replication_reason(scenario, policies[row.policy])
            print(f"{row.policy}: simulated mean and CI over {row.runs} runs, one per seed, because {why}")
        if row.no_closed_form:
            print(f"{row.policy}: no closed form because {row.no_closed_form}")
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.3f}"


def _table(rows: Sequence[Comparison]) -> str:
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
        )
        for r in rows
    ]
    return text_table(header, body)


# ----------------------------------------------------------------------------- calibrate


def _with_se(value: float, se: float | None, scale: float, digits: int) -> str:
    text = f"{value * scale:.{digits}f}"
    return text if se is None else f"{text} ± {se * scale:.{digits}f}"


COST_CELLS = (("overhead_s", 4), ("per_sample_s", 5), ("floor_s", 4))  # the table's columns: a parameter, its digits


def _cost_cells(row: Mapping[str, Any]) -> list[str]:
    """The overhead, per-sample and floor cells, in ms, of the parameters the chosen curve has
    ("-" where it has none; a curve of other parameters lists them below the table)."""
    params, se = row["params"], row["se"]
    return ["-" if key not in params else _with_se(params[key], se.get(key), 1e3, d) for key, d in COST_CELLS]


def _other_params(row: Mapping[str, Any]) -> str | None:
    """A line of the chosen curve's parameters that have no column (a table's times at each
    batch, ``t@b``), in ms; None where it has none."""
    other = {k: v for k, v in row["params"].items() if k not in dict(COST_CELLS)}
    if not other:
        return None
    points = ", ".join(f"{key} {_with_se(value, row['se'].get(key), 1e3, 3)}" for key, value in other.items())
    return f"w{row['worker']} {row['model']} (ms): {points}"


def fit_table(calibration: Calibration) -> str:
    """The fit as text: per worker the chosen curve with standard errors, noise and fit quality;
    the held-out errors of every model; the noise's structure, the network and the workload."""
    from hetsim.calibrate import worker_table
    from hetsim.core.console import text_table

    rows = worker_table(calibration.workers)
    lag = calibration.noise.persistence
    header = (
        "worker",
        "model",
        "overhead ms",
        "per-sample ms",
        "floor ms",
        "noise sigma",
        "lag-1",
        "R^2",
        "residual CV",
        "rows",
        "sizes",
    )
    body = [
        (
            f"w{r['worker']}",
            r["model"],
            *_cost_cells(r),
            f"{r['noise_sigma']:.4f}",
            "-" if i >= len(lag) or lag[i] is None else f"{lag[i]:.2f}",
            "-" if r["r2"] is None else f"{r['r2']:.3f}",
            f"{r['residual_cv']:.4f}",
            str(r["rows"]),
            str(r["batch_sizes"]),
        )
        for i, r in enumerate(rows)
    ]
    lines = [text_table(header, body)]
    lines.extend(line for line in map(_other_params, rows) if line is not None)
    lines.extend(_held_out_lines(rows))
    lines.extend(_noise_network_workload(calibration))
    return "\n".join(lines)


def _held_out_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    from hetsim.calibrate import FITTED
    from hetsim.core.console import text_table

    if all(v is None for r in rows for v in r["held_out_error"].values()):
        return []
    body = [
        (
            f"w{r['worker']}",
            *(
                "-" if v is None else f"{v:.2%}" + ("*" if m == r["model"] else "")
                for m, v in r["held_out_error"].items()
            ),
        )
        for r in rows
    ]
    header = ("worker", *(f"{form.name} held-out" for form in FITTED))
    return [
        "error at batch sizes left out of the fit (rms of predicted / measured mean - 1; * chosen):",
        text_table(header, body),
    ]


UNITS = (("_s", "ms", 1e3), ("_gbps", "Gbit/s", 1.0), ("_mb", "MB", 1.0))  # a name's unit suffix, its text, scale


def _quantity(key: str, value: float) -> str:
    """A plug-in's parameter in words, its unit read off its name (``time_s`` 0.002: "time 2 ms")."""
    for suffix, unit, scale in UNITS:
        if key.endswith(suffix):
            return f"{key.removesuffix(suffix)} {value * scale:.4g} {unit}"
    return f"{key} {value:.4g}"


def _noise_network_workload(calibration: Calibration) -> list[str]:
    noise = calibration.noise
    shared = "-" if noise.shared is None else f"{noise.shared:.3f}"
    if noise.shared_sigma:
        shared += f" (a common log factor of sigma {noise.shared_sigma:.3f})"
    lag = noise.mean_persistence
    persistence = "-" if lag is None else f"{lag:.3f}"
    net = calibration.network
    network = (
        f"network: {net.name}, "
        + ", ".join(_quantity(key, value) for key, value in net.param_values().items() if value is not None)
        + " (an exchange: a step's all-reduce, an async update's push and pull)"
    )
    workload = (
        f"workload: global batch {calibration.global_batch}, {calibration.epochs} epochs x "
        f"{calibration.steps_per_epoch} steps" + (f" (policy {calibration.policy})" if calibration.policy else "")
    )
    return [
        f"noise: share common to the workers of a step {shared} (over {noise.shared_steps} steps), lag-1 "
        f"persistence {persistence} (mean of the workers'); the written scenario draws independent noise"
        + (f"; workers not fitted: {', '.join(str(i.worker) for i in calibration.idle)}" if calibration.idle else ""),
        network,
        workload,
    ]


def cmd_calibrate(args: argparse.Namespace) -> int:
    from hetsim.calibrate import calibrate, model_named
    from hetsim.core.provenance import provenance
    from hetsim.model.trace import read_trace_table
    from hetsim.scenario.config import build_scenario

    kind = None if args.out is None else check_out_file(args.out, {".toml": "toml", ".json": "json"}, "--out")
    if args.name is not None and not args.name.strip():
        raise ConfigError("--name", "empty: name the scenario, or leave --name out for calibrated-<trace file>")
    model = model_named(args.model, "--model")
    frame = read_trace_table(args.trace)
    if args.out is not None:
        check_new_file(args.out, "--out")  # before the fit (its warnings would come first), making no folder yet
    name = args.name or f"calibrated-{Path(args.trace).stem}"
    try:
        calibration = calibrate(frame, name=name, policy=args.policy, model=model, scheduled_split=args.scheduled_split)
    except ConfigError as error:  # the library names its arguments; here they are options
        if error.field in ("policy", "model"):
            raise ConfigError(f"--{error.field}", error.problem) from None
        raise
    record = provenance()
    made_by = frame.attrs.get("provenance")  # an imported Parquet trace's (write_imported); else None
    if isinstance(made_by, dict):
        record["trace_provenance"] = made_by
    scenario = _with_provenance(calibration.scenario, args.trace, record)
    build_scenario(scenario)  # the written file must load
    for warning in calibration.warnings:
        print(f"hetsim: warning: {warning}", file=sys.stderr)
    if kind is not None:
        text = _dump(scenario, kind, record, calibration.warnings)
        atomic_write(args.out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    if args.json:
        print(json_text({**record, **calibration.to_dict(), "scenario": scenario}))
    elif kind is None:
        comment = "\n".join(f"# {line}" for line in fit_table(calibration).splitlines())
        print(f"{comment}\n{_dump(scenario, 'toml', record, calibration.warnings)}", end="")
    else:
        print(fit_table(calibration))
        print(f"wrote {args.out}")
    return 0


def _with_provenance(scenario: dict[str, Any], trace: Path, record: Mapping[str, Any]) -> dict[str, Any]:
    """The calibrated scenario, its description naming the trace and what fitted it (a scenario
    file has no other place for it: the loader refuses unknown keys)."""
    made = f"hetsim {record['hetsim_version']}" + (f", commit {record['git_commit']}" if record["git_commit"] else "")
    return {**scenario, "description": f"{scenario.get('description', '')}; the trace: {trace} ({made})".lstrip("; ")}


def _dump(scenario: dict[str, Any], kind: str, record: Mapping[str, Any], warnings: Sequence[str] = ()) -> str:
    """The scenario as JSON (which has no comments: its description carries the provenance, see
    :func:`_with_provenance`) or as TOML, headed by ``record``'s command, version, commit and date
    in comments, by what made the trace where the trace file says (``trace_provenance``), and by
    the fit's ``warnings`` (said once on stderr; the file outlives them)."""
    if kind == "json":
        return json_text(scenario) + "\n"
    import tomli_w

    from hetsim.core.provenance import comment_header, trace_line

    made_by = record.get("trace_provenance")
    said = "".join(f"# warning: {' '.join(w.split())}\n" for w in warnings)
    return comment_header(record) + (trace_line(made_by) if made_by else "") + said + tomli_w.dumps(scenario)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "analyze": cmd_analyze,
    "calibrate": cmd_calibrate,
}
