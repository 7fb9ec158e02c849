"""What ``simulate`` shows and leaves on disk for one run: the per-policy summary table and its
output files (trace.parquet, trace.csv, summary.json). Kept apart from :mod:`hetsim.report.build`
(a sweep's report) so that ``simulate`` imports neither pandas' sweep tables nor the plots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hetsim.core.console import text_table
from hetsim.core.files import atomic_folder, write_json
from hetsim.model.trace import Trace, write_trace_table
from hetsim.run.metrics import Summary


def format_table(summaries: Sequence[Summary], has_target: bool = False) -> str:
    """One row per policy; straggler columns appear when some policy has them, learning ones
    (progress, goodput, and with ``has_target`` the time to target) when the runs measured them."""
    columns: list[tuple[str, Callable[[Summary], str]]] = [
        ("policy", lambda s: s.policy),
        ("mean step", lambda s: f"{s.mean_step_s * 1e3:.1f} ms"),
        ("total time", lambda s: f"{s.total_time_s:.1f} s"),
        ("throughput", lambda s: f"{s.throughput_sps:.0f} /s"),
        ("utilization", lambda s: f"{s.mean_utilization:.1%}"),
        ("vs equal", lambda s: "-" if s.speedup_vs_equal is None else f"{s.speedup_vs_equal:.3f}x"),
    ]
    if any(s.dropped_samples for s in summaries):
        columns.append(("dropped", lambda s: f"{s.dropped_samples / s.steps:.0f} /step" if s.dropped_samples else "-"))
    if any(s.staleness_mean is not None for s in summaries):
        columns.append(
            (
                "staleness",
                lambda s: "-" if s.staleness_mean is None else f"{s.staleness_mean:.1f} (p95 {s.staleness_p95:.0f})",
            )
        )
    if any(s.recovered_share is not None for s in summaries):
        columns.append(("recovery", _recovery))
    columns.extend(learning_columns(summaries, has_target))
    columns.append(("final split", lambda s: "/".join(map(str, s.final_batches))))
    rows = [[fmt(s) for _, fmt in columns] for s in summaries]
    return text_table([name for name, _ in columns], rows, left={0, len(columns) - 1})


def learning_columns(summaries: Sequence[Summary], has_target: bool) -> list[tuple[str, Callable[[Summary], str]]]:
    """With ``[workload.efficiency]``: progress (steps at the base batch), goodput, and the time
    to the target when the scenario sets ``target_steps`` (``has_target``; "not reached" when a run
    falls short)."""
    if all(s.progress is None for s in summaries):
        return []
    columns: list[tuple[str, Callable[[Summary], str]]] = [
        ("progress", lambda s: "-" if s.progress is None else f"{s.progress:.1f} steps"),
        ("goodput", lambda s: "-" if s.goodput_sps is None else f"{s.goodput_sps:.0f} /s"),
    ]
    if has_target:
        columns.append(
            ("to target", lambda s: "not reached" if s.time_to_target_s is None else f"{s.time_to_target_s:.1f} s")
        )
    return columns


def write_outputs(
    directory: Path, traces: Sequence[Trace], summaries: Sequence[Summary], record: Mapping[str, object]
) -> None:
    """``simulate --out``: trace.parquet, trace.csv (when there are ``traces``: not with ``--trace
    none``) and summary.json in ``directory``, all or none (written in a temporary folder, then
    moved in). summary.json is one object: ``record`` (what made it: the scenario, seed, command,
    versions, :func:`hetsim.core.provenance.run_record`) and ``policies``, one Summary each."""
    with atomic_folder(directory, "--out") as tmp:
        if traces:
            write_trace_table(traces, tmp / "trace.parquet", tmp / "trace.csv")
        write_json(tmp / "summary.json", {**record, "policies": [s.to_dict() for s in summaries]})


def _recovery(s: Summary) -> str:
    """Steps to recover from a slowdown, and the share of onsets recovered from ("never": none)."""
    if s.recovered_share is None:
        return "-"
    return "never" if s.recovery_steps is None else f"{s.recovery_steps:.1f} steps ({s.recovered_share:.0%})"
