"""``python -m validation``: ``run`` (launch the ranks, print the per-policy summary),
``compare`` (simulator vs measurement), ``matrix``, ``profile`` (a workload's measured costs
as a scenario, :mod:`validation.profile`), ``batch-sweep`` (steps to a target across global
batches, :mod:`validation.batch_sweep`) and ``gpu-check``. It prints the launcher's output (each rank's own
status and errors come from ``validation.train``); bad input ends in one line on stderr
(``validation: error: <field>: <problem>``) and exit status 2.

Building the parser imports neither torch nor hetsim's simulator (numpy, scipy, pandas,
matplotlib): each command imports what it runs, so that ``--help`` or a mistyped option
answers at once.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hetsim.core.console import OneLineParser, path_argument, run_main, stop_signal
from hetsim.core.errors import ConfigError
from hetsim.core.files import LOCK_NAME, drop_bare_lock, exclusive, json_text, write_json
from hetsim.core.params import Param
from hetsim.core.provenance import COMMAND_ENV, command_line
from validation import batch_sweep_cli, gpu_check  # import neither torch nor pandas
from validation.backend import check_torch_version
from validation.options import add_run_options


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="validation",
        description="Real data-parallel training with torch.distributed under "
        "hetsim's policies, and how well the simulator predicts it.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    run = sub.add_parser("run", help="launch the ranks on this machine (no arguments: the embedded default run)")
    add_run_options(run)
    cmp = sub.add_parser(
        "compare", help="calibrate on part of a run, simulate its policies, print predicted vs measured"
    )
    cmp.add_argument("run_dir", type=path_argument)
    cmp.add_argument(
        "--calibrate-on", default="probe", metavar="POLICY", help="trace segment to calibrate on (default: probe)"
    )
    cmp.add_argument(
        "--tolerance",
        type=float,
        default=None,
        metavar="X",
        help="exit status 1 when any relative error (step or total time) exceeds X, e.g. 0.1",
    )
    cmp.add_argument(
        "--model",
        default="auto",
        metavar="MODEL",
        help="each rank's cost model, as hetsim calibrate --model takes it (auto, the default: the one with the "
        "least error at batch sizes left out; affine, hinge or table)",
    )
    cmp.add_argument("--json", action="store_true", help="print a JSON list of per-policy objects")
    cmp.add_argument(
        "--time-to-target",
        action="store_true",
        help="also predict each policy's time to the run's --target-accuracy (a validation run made with "
        "--target-accuracy and --noise-scale or --efficiency)",
    )
    mx = sub.add_parser("matrix", help="the fidelity benchmark: a fixed set of real runs, each compared with hetsim")
    mx.add_argument("--quick", action="store_true", help="the quick subset (a few minutes on two cores)")
    mx.add_argument("--gpu", action="store_true", help="add the GPU configurations (needs CUDA)")
    mx.add_argument(
        "--out",
        type=path_argument,
        default=None,
        metavar="DIR",
        help="results folder (default runs/matrix-<time>; an existing one resumes)",
    )
    mx.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="N",
        help="keep N extra busy processes running for the whole matrix (a loaded machine)",
    )
    mx.add_argument("--json", action="store_true", help="print results.json instead of the table")
    add_profile_parser(sub)
    batch_sweep_cli.add_parser(sub)
    gpu_check.add_parser(sub)
    return parser


def add_profile_parser(sub: Any) -> None:
    from validation.profile_config import add_profile_options

    pr = sub.add_parser(
        "profile", help="measure a workload's step time against the local batch on each device; write a scenario"
    )
    add_profile_options(pr)


def cmd_run(args: argparse.Namespace) -> int:
    from hetsim.core.console import text_table
    from validation.config import build_config
    from validation.launch import launch
    from validation.options import default_out
    from validation.summary_text import held_out

    config = build_config(args)
    check_local_devices(config.devices)
    out = (config.out or default_out()).resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a folder")
    argv = [a for a in sys.argv[2:]] if args.argv is None else list(args.argv)
    made = not out.exists()
    with exclusive(out, "--out"):  # a second run into the same folder is refused, not mixed in
        if any(p.name != LOCK_NAME for p in out.iterdir()):
            raise ConfigError("--out", f"{out} exists and is not an empty folder")
        try:
            result = launch(
                [*argv, "--out", str(out)],
                config.world_size,
                threads=config.threads,
                cpus=config.cpus,
                contention=config.contention,
            )
        except KeyboardInterrupt as stopped:  # Ctrl-C or SIGTERM: the ranks are stopped; say so in the folder
            record_end(out, "interrupted", f"stopped by {stop_signal(stopped).name}")
            raise
    if not result.ok:
        rank, _ = result.first_failure or (-1, -1)
        failure = f"rank {rank} failed first ({result.reason}); exit statuses by rank {list(result.exit_codes)}"
        written = record_end(out, "failed", failure)
        kept = f"what was written so far is in {out}" if written else "it failed before writing anything"
        if not written and made:  # the folder made for it holds only its lock: gone, as after a refusal
            drop_bare_lock(out, remove_folder=True)
        print(f"validation: error: {failure}; {kept}", file=sys.stderr)
        return 1
    summary = json.loads((out / "summary.json").read_text())
    rows = [
        [s["policy"], f"{1e3 * s['mean_step_s']:.2f}ms", f"{s['total_time_s']:.2f}s",
         "/".join(map(str, s["final_batches"])), held_out(s)]
        for s in summary["policies"]
    ]  # fmt: skip
    print(text_table(["policy", "mean step", "total", "final split", "held-out"], rows))
    print(f"wrote {out} in {result.wall_s:.1f} s; compare with: python -m validation compare {out}")
    return 0


def unfinished_note(meta: Mapping[str, Any], compared: Sequence[str]) -> str:
    """What a comparison of a run that did not complete leaves out ('' for a complete one)."""
    status = meta.get("status", "complete")  # a folder from before the status was written
    if status == "complete":
        return ""
    why = f": {meta['failure']}" if meta.get("failure") else ""
    planned = meta.get("policies", [])
    return (f"this run did not complete (status {status}{why}); compared {len(compared)} of its {len(planned)} "
            "policies, on the epochs they finished")  # fmt: skip


def record_end(out: Path, status: str, how: str) -> bool:
    """Mark the run folder's meta.json with how the run ended (``failed`` or ``interrupted``, and
    ``failure``: why); False where the run never got far enough to write one."""
    path = out / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict):
        return False
    write_json(path, {**meta, "status": status, "failure": how})
    return True


RANKS_PER_CPU = 4  # the launcher's CPU ranks: more than this many to a core and steps measure the scheduler


def check_local_devices(devices: Sequence[str]) -> None:
    """Every CUDA device asked for exists on this machine (the launcher's ranks all run here), and
    the CPU ranks are at most :data:`RANKS_PER_CPU` to each CPU this process may use."""
    from validation.placement import available_cpus

    cpu_ranks, cpus = sum(not d.startswith("cuda") for d in devices), len(available_cpus())
    if cpu_ranks > RANKS_PER_CPU * cpus:
        raise ConfigError("--world-size", f"{cpu_ranks} CPU ranks on {cpus} CPU(s): at most {RANKS_PER_CPU} to a CPU "
                                          "here (more would time-slice each core between them: the steps measured "
                                          "would be the scheduler's, and every rank holds its own torch)")  # fmt: skip
    wanted = [d for d in devices if d.startswith("cuda")]
    if not wanted:
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for rank, d in enumerate(devices):
        index = rank if d == "cuda" else int(d.partition(":")[2] or 0) if d.startswith("cuda") else None
        if index is not None and index >= count:
            raise ConfigError("--devices", f"rank {rank} wants {d} but this machine has {count} CUDA device(s)")


def cmd_compare(args: argparse.Namespace) -> int:
    from hetsim.calibrate import model_named
    from validation.compare import compare_run, format_table, worst_error
    from validation.run_folder import load_run
    from validation.time_to_target import predict_time_to_target

    if args.tolerance is not None:
        Param("--tolerance", low=0.0).check(args.tolerance)
    model = model_named(args.model, "--model")
    run = load_run(args.run_dir)
    comparisons, calibration = compare_run(run, args.calibrate_on, model)
    if not comparisons:  # a tolerance must never pass on nothing
        raise ConfigError("run_dir", f"{args.run_dir} has no policy with a finished epoch to compare")
    unfinished = unfinished_note(run.meta, [c.policy for c in comparisons])
    if unfinished:
        print(f"validation: note: {unfinished}", file=sys.stderr)
    targets = predict_time_to_target(run, calibration) if args.time_to_target else []
    if args.json:
        rows = [c.to_dict() for c in comparisons]
        for row, t in zip(rows, targets):
            row.update(measured_time_to_target_s=t.measured_s, predicted_time_to_target_s=t.predicted_s,
                       time_to_target_error=t.error)  # fmt: skip
        print(json_text(rows))
    else:
        print(format_table(comparisons, calibration, args.calibrate_on))
        for t in targets:
            measured = "not reached" if t.measured_s is None else f"{t.measured_s:.3f}s"
            predicted = "not reached" if t.predicted_s is None else f"{t.predicted_s:.3f}s"
            error = "" if t.error is None else f" ({100 * t.error:+.1f}%)"
            print(f"time to target, {t.policy}: measured {measured}, predicted {predicted}{error}")
    if args.tolerance is not None and unfinished:  # nor on part of a run
        print("validation: a run that did not complete passes no tolerance", file=sys.stderr)
        return 1
    if args.tolerance is not None and worst_error(comparisons) > args.tolerance:
        print(
            f"validation: an error of {100 * worst_error(comparisons):.1f}% exceeds the tolerance of "
            f"{100 * args.tolerance:.1f}%",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    import time

    busy = int(Param("--busy", "integer", low=0, high=64).check(args.busy))
    from validation.matrix import check_matrix_folder, run_matrix, select

    runs, cross = select(args.quick, cuda_devices() if args.gpu else 0)
    if args.gpu and not any(r.gpus for r in runs):
        raise ConfigError("--gpu", "no CUDA device on this machine")
    out = (args.out or Path("runs") / time.strftime("matrix-%Y%m%d-%H%M%S")).resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a folder")
    check_matrix_folder(out)
    from validation import matrix_report  # its plots: imported once the input is known good
    from validation.contention import Neighbours

    def echo(line: str) -> None:
        print(f"validation: {line}", file=sys.stderr, flush=True)

    with exclusive(out, "--out"), Neighbours({k: 1.0 for k in range(busy)}, {}):
        found, failed, load = run_matrix(out, runs, cross, echo)
        data = matrix_report.results(runs, found, failed, load, busy)
        matrix_report.write(out, data, found, load)
    print(json_text(data) if args.json else matrix_report.table(found, data["statistics"]))
    for name in failed:
        print(f"validation: error: {name} failed (see {out / 'runs' / name}.log); its predictions are missing",
              file=sys.stderr)  # fmt: skip
    print(f"wrote {out}", file=sys.stderr)
    return 1 if failed else 0


def cmd_profile(args: argparse.Namespace) -> int:
    from validation.profile import ProfileFailed, profile_and_write, profile_warnings, summary_lines
    from validation.profile_config import build_profile_config
    from validation.workloads import resolve_workload

    config = build_profile_config(args)
    check_local_devices(config.devices)
    try:
        info = profile_and_write(config, resolve_workload(config.workload).name)
    except ProfileFailed as exc:
        print(f"validation: error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summary_lines(info, config.out)))
    for line in profile_warnings(info, os.getloadavg()[0], os.cpu_count() or 1):
        print(f"validation: warning: {line}", file=sys.stderr)
    return 0


def cuda_devices() -> int:
    """CUDA devices on this machine (0 without torch's CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


COMMANDS = {"run": cmd_run, "compare": cmd_compare, "matrix": cmd_matrix, "profile": cmd_profile,
            "gpu-check": gpu_check.cmd_gpu_check, "batch-sweep": batch_sweep_cli.cmd_batch_sweep}  # fmt: skip


LAUNCHING = ("run", "matrix", "profile", "gpu-check")  # the commands that start ranks


def main(argv: Sequence[str] | None = None) -> int:
    def run() -> int:
        args = build_parser().parse_args(argv)
        args.argv = list(argv)[1:] if argv is not None else None
        typed = ["python", "-m", "validation", *argv] if argv is not None else command_line()
        os.environ[COMMAND_ENV] = shlex.join(typed)  # what every rank's meta.json records as the command
        if args.command in LAUNCHING:
            check_torch_version()
        return COMMANDS[args.command](args)

    before = os.environ.get(COMMAND_ENV)
    try:
        return run_main("validation", run)
    finally:  # called in-process, it leaves the environment as it was: a later run records its own command
        if before is None:
            os.environ.pop(COMMAND_ENV, None)
        else:
            os.environ[COMMAND_ENV] = before
