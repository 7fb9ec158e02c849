"""Command-line wiring of the trace commands, traces in and out: ``import-trace`` (other tools'
traces as hetsim's: ``--format torch-profiler``, a data-parallel job's ``torch.profiler`` traces,
:mod:`hetsim.traces.torch_profiler`; ``--format reference-logs``, what ``import-logs`` reads),
``import-logs`` (a reference
implementation's run folder as hetsim's trace; :mod:`hetsim.traces.reference_logs`) and ``export-trace`` (a run or
a trace as Chrome trace-event JSON, for Perfetto and chrome://tracing; :mod:`hetsim.traces`).

Adding the command to a parser imports nothing heavy: the handler imports the trace modules
(NumPy, pandas) when it runs. Bad input is one :class:`~hetsim.core.errors.ConfigError` before
anything is written; the output is written atomically.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsim.cli.common import check_out_file
from hetsim.core.console import path_argument
from hetsim.core.errors import ConfigError

if TYPE_CHECKING:
    from hetsim.traces.chrome import ExportRun

FORMATS = ("chrome",)
IMPORT_FORMATS = ("torch-profiler", "reference-logs")  # import-trace --format
STEPS = re.compile(r"\s*(\d*)\s*:\s*(\d*)\s*")


def add_subcommands(sub: Any) -> None:
    """Add ``import-trace``, ``import-logs`` and ``export-trace`` to an argparse subparsers object."""
    it = sub.add_parser("import-trace", help="another tool's traces (torch.profiler, reference logs) -> hetsim trace")
    it.add_argument("paths", nargs="+", type=path_argument, metavar="PATH",
                    help="torch-profiler: one Kineto JSON trace per rank (plain or .gz), or a folder of them "
                         "(RUN/profiler); reference-logs: the run folder(s)")  # fmt: skip
    it.add_argument("--format", choices=IMPORT_FORMATS, required=True, help="what the PATHs are")
    it.add_argument("--batch", default=None, metavar="RANK=B,...",
                    help="each rank's local batch, for traces recorded without record_shapes; where given, "
                    "it wins over the input shapes")  # fmt: skip
    it.add_argument("--policy", default=None, help="a folder of several segments' traces: import this one")
    it.add_argument("-o", "--out", type=path_argument, default=Path("trace.csv"), metavar="TRACE.csv|TRACE.parquet",
                    help="trace file to write (default trace.csv)")  # fmt: skip
    imp = sub.add_parser("import-logs", help="a reference-implementation run folder -> trace")
    imp.add_argument("run_dir", nargs="+", type=path_argument,
                     help="run folder (several: the nodes of one run, in rank order)")  # fmt: skip
    imp.add_argument(
        "-o", "--out", type=path_argument, required=True, metavar="TRACE.csv|TRACE.parquet", help="trace file to write"
    )

    ex = sub.add_parser(
        "export-trace", help="a run or trace as Chrome trace-event JSON, to open in Perfetto or chrome://tracing"
    )
    ex.add_argument("source", type=path_argument, metavar="RUN_OR_TRACE",
                    help="a simulate --out folder, a sweep results folder, a validation run folder, or a trace "
                         "file (CSV or Parquet)")  # fmt: skip
    ex.add_argument("--format", choices=FORMATS, default="chrome", help="chrome: trace-event JSON (the default)")
    ex.add_argument("--policy", default=None, help="export this policy only (default: every policy, a process each)")
    ex.add_argument("--steps", default=None, metavar="A:B", help="steps A to B-1 only (A: or :B leave a side open)")
    ex.add_argument("-o", "--out", type=path_argument, default=None, metavar="FILE",
                    help="output (.json, or .json.gz gzipped; default: trace.json in the folder, or the trace "
                         "file's name with .json)")  # fmt: skip


def parse_steps(text: str | None) -> tuple[int | None, int | None]:
    """``A:B`` -> (A, B), either None where left open; ConfigError on ``--steps`` otherwise."""
    if text is None:
        return None, None
    match = STEPS.fullmatch(text)
    if match is None:
        negative = "-" in text and STEPS.fullmatch(text.replace("-", "")) is not None
        why = ": steps count from 0" if negative else ""
        raise ConfigError("--steps", f"{text!r} is not A:B (steps A to B-1, e.g. 0:100){why}")
    first, stop = (int(g) if g else None for g in match.groups())
    if first is not None and stop is not None and stop <= first:
        raise ConfigError("--steps", f"{text} is an empty step range (B must be larger than A)")
    return first, stop


def check_steps(runs: Sequence[ExportRun], first: int | None, stop: int | None, text: str) -> None:
    """A range that reaches past the traces' steps is refused (so is one holding none of them)."""
    last = max(int(r.trace.step.max()) for r in runs)
    if first is not None and first > last:
        raise ConfigError("--steps", f"{text} starts after the last step, {last}")
    if stop is not None and stop > last + 1:
        raise ConfigError("--steps", f"{text} ends beyond the last step, {last} (use {first or 0}:{last + 1})")


def default_out(source: Path) -> Path:
    return source / "trace.json" if source.is_dir() else source.with_suffix(".json")


def cmd_export_trace(args: argparse.Namespace) -> int:
    from hetsim.core.files import check_new_file
    from hetsim.core.provenance import provenance
    from hetsim.traces.chrome import check_size, lay_out, select_steps, write_chrome
    from hetsim.traces.sources import describe, load_source

    first, stop = parse_steps(args.steps)
    own = default_out(args.source)  # an earlier export may be written again; the folder's own records not
    out = args.out if args.out is not None else own
    target, given = out.resolve(), args.source.resolve()
    if target == given or out.is_dir():
        raise ConfigError("--out", f"{out} is the input or a folder: name a file to write")
    if given.is_dir() and out.exists() and target.is_relative_to(given) and target != own.resolve():
        raise ConfigError("--out", f"{out} is a file of the folder being exported: name another (default {own})")
    if not out.name.endswith((".json", ".json.gz")):
        raise ConfigError("--out", f"{out}: unknown file type (use .json, or .json.gz gzipped)")
    source = load_source(args.source, args.policy)
    check_steps(source.runs, first, stop, args.steps)
    laid = []
    for run in source.runs:
        rows = select_steps(run.trace, first, stop)
        if len(rows):
            laid.append(lay_out(run, rows))
        else:
            source.notes.append(f"policy {run.trace.policy} has no step in {args.steps}: left out")
    if not laid:
        raise ConfigError("--steps", f"{args.steps} is an empty step range: no step of the trace lies in it")
    chosen = args.steps or "all steps"
    events = check_size(laid, chosen)
    check_new_file(out, "--out")
    for laid_run in laid:
        drawn = laid_run.buckets
        if drawn is not None and drawn.steps_drawn < drawn.steps:
            policy = laid_run.run.trace.policy
            source.notes.append(f"policy {policy}: buckets drawn in {drawn.steps_drawn} of {drawn.steps} steps "
                                "(the others' all-reduce does not match the scenario's plan)")  # fmt: skip
    other = {"source": str(args.source), "kind": source.kind, "steps": chosen, **provenance()}
    write_chrome(out, laid, other)
    for note in source.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {out}: {describe([x.run for x in laid])}, {chosen}, {events} events")
    print("open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing")
    return 0


def cmd_import_logs(args: argparse.Namespace) -> int:
    from hetsim.model.trace import TRACE_FORMATS
    from hetsim.report.build import resplits
    from hetsim.traces.reference_logs import import_run

    check_out_file(args.out, TRACE_FORMATS, "--out")
    trace = import_run(args.run_dir if len(args.run_dir) > 1 else args.run_dir[0])
    write_imported(trace, args.out, args.run_dir, "reference-logs")
    rows_per = "epoch" if trace.n_steps == int(trace.epoch.max()) + 1 else "step"
    print(
        f"wrote {len(trace.step)} rows ({trace.n_workers} workers x {trace.n_steps} {rows_per}s, "
        f"policy {trace.policy}) to {args.out}"
    )
    if resplits(trace.policy):
        print("local batches are a reconstruction: the DP rule replayed on the logged epoch means")
    return 0


def write_imported(trace: Any, out: Path, sources: Sequence[Any], kind: str) -> None:
    """An imported ``trace`` written to ``out``, a Parquet file recording what made it (the
    command, the files read and their format, hetsim's version and commit, the date) as the
    table's ``provenance`` attribute, which pandas keeps in the file's metadata and ``calibrate``
    carries into its scenario's header; a CSV file has no place for it."""
    from hetsim.core.provenance import provenance
    from hetsim.model.trace import trace_table, write_trace_table

    frame = trace_table(trace)
    frame.attrs["provenance"] = {**provenance(), "format": kind, "sources": [str(s) for s in sources]}
    write_trace_table(frame, out)


def parse_batch(text: str | None) -> dict[int, int] | None:
    """``0=64,1=32`` -> {0: 64, 1: 32}; ConfigError on ``--batch`` otherwise (a rank named twice, a
    batch beyond :data:`~hetsim.core.params.MAX_COUNT`). Whether the ranks are the job's, and that
    some step has samples, is checked against its traces (:func:`hetsim.traces.torch_profiler.import_traces`)."""
    from hetsim.core.params import MAX_COUNT

    if text is None:
        return None
    out: dict[int, int] = {}
    for part in text.split(","):
        rank, sep, value = part.partition("=")
        if not (sep and rank.strip().isdigit() and value.strip().isdigit()):
            raise ConfigError("--batch", f"{part.strip()!r} is not RANK=B (e.g. 0=64,1=32)")
        if int(rank) in out:
            raise ConfigError("--batch", f"rank {int(rank)} is given twice")
        if int(value) > MAX_COUNT:
            raise ConfigError("--batch", f"rank {int(rank)}'s batch {int(value)} is beyond {MAX_COUNT}")
        out[int(rank)] = int(value)
    return out


def cmd_import_trace(args: argparse.Namespace) -> int:
    if args.format == "reference-logs":
        for option, value, what in (("--batch", args.batch, "the batches"), ("--policy", args.policy, "the policy")):
            if value is not None:
                raise ConfigError(option, f"only for --format torch-profiler (reference logs record {what})")
        return cmd_import_logs(argparse.Namespace(run_dir=[str(p) for p in args.paths], out=args.out))
    from hetsim.model.trace import TRACE_FORMATS
    from hetsim.traces.profiler_files import rank_files
    from hetsim.traces.torch_profiler import import_traces, offsets_line

    check_out_file(args.out, TRACE_FORMATS, "--out")
    batch = parse_batch(args.batch)
    files, segment = rank_files(args.paths, args.policy)
    imported = import_traces(files, batch, args.policy, segment)
    trace = imported.trace
    write_imported(trace, args.out, files, "torch-profiler")
    print(f"wrote {len(trace.step)} rows ({trace.n_workers} ranks x {trace.n_steps} steps, policy {trace.policy}, "
          f"{imported.collectives} collectives per rank) to {args.out}")  # fmt: skip
    print(offsets_line(imported.offsets_s, imported.same_clock))
    print(f"local batches from {imported.batch_from}")
    if imported.untimed:
        print(f"note: steps {', '.join(map(str, imported.untimed))} left out: they hold a hetsim.untimed range (work "
              "the loop kept out of its steps' time, such as validation's warm-up of a new batch size)",
              file=sys.stderr)  # fmt: skip
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "import-trace": cmd_import_trace,
    "import-logs": cmd_import_logs,
    "export-trace": cmd_export_trace,
}
