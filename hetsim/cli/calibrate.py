"""Command-line output of ``calibrate``: :func:`cmd_calibrate` (the fit, its table, the scenario
written with its provenance and the fit's warnings) and :func:`fit_table`. Its parser is
``hetsim.cli.analysis``'s; the library's errors name its arguments, here they are options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsim.cli.common import check_out_file
from hetsim.core.errors import ConfigError
from hetsim.core.files import atomic_write, check_new_file, json_text

if TYPE_CHECKING:
    from hetsim.calibrate import Calibration


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
    read = {Path(args.trace).resolve(), (Path(args.trace).parent / "summary.json").resolve()}  # the run's record too
    if args.out is not None and Path(args.out).resolve() in read:
        raise ConfigError("--out", f"{args.out} is a file calibrate reads: name another to write")
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
    scenario, said = _as_run(_with_provenance(calibration.scenario, args.trace, record), Path(args.trace))
    build_scenario(scenario)  # the written file must load
    warnings = [*calibration.warnings, *said]
    for warning in warnings:
        print(f"hetsim: warning: {warning}", file=sys.stderr)
    if kind is not None:
        text = _dump(scenario, kind, record, warnings)
        atomic_write(args.out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    if args.json:
        print(json_text({**record, **calibration.to_dict(), "warnings": warnings, "scenario": scenario}))
    elif kind is None:
        comment = "\n".join(f"# {line}" for line in fit_table(calibration).splitlines())
        print(f"{comment}\n{_dump(scenario, 'toml', record, warnings)}", end="")
    else:
        print(fit_table(calibration))
        print(f"wrote {args.out}")
    return 0


def _as_run(scenario: dict[str, Any], trace: Path) -> tuple[dict[str, Any], list[str]]:
    """``scenario`` with the workers' names and ``max_batch`` of the run whose folder holds
    ``trace`` (a ``simulate --out`` folder records its scenario), and a line saying so: a cap is
    configuration, not fitted, and without it a plan splits past what the run's workers took."""
    from hetsim.traces.sources import run_scenario

    found = run_scenario(trace)
    if found is None:
        return scenario, []
    run, where = found
    if run.n_workers != len(scenario["workers"]):
        return scenario, [f"trace: {where} records {run.n_workers} workers where the trace has "
                          f"{len(scenario['workers'])}: the workers are numbered and no caps are kept"]  # fmt: skip
    workers = [
        {**entry, "name": w.name, **({"max_batch": w.max_batch} if w.max_batch is not None else {})}
        for entry, w in zip(scenario["workers"], run.workers)
    ]
    return {**scenario, "workers": workers}, [f"trace: the workers' names and max_batch are the run's ({where})"]


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
