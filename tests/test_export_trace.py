"""``hetsim export-trace``: Chrome trace-event JSON of simulated runs (barrier, async, DDP buckets,
slowdowns and failures), a sweep's kept traces and a real validation run. The output is checked
against the format (required fields per ``ph``, microseconds, slices nested or apart on each
track, every process and track named) and read back with a reader written here from the format,
not from the exporter: per worker and step its slices give the trace's compute, wait and
all-reduce times to the microsecond. Bad input: tests/test_export_trace_bad_input.py."""

from __future__ import annotations

import gzip
import json
import shutil
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.cli.main import main
from hetsim.policies import Async, Dynamic, Equal
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, builtin_text
from hetsim.sweep.results import RunFolder
from hetsim.sweep.spec import load_sweep, point_scenario
from hetsim.traces import chrome
from hetsim.traces.chrome import ExportRun, lay_out
from hetsim.traces.timeline import no_overlap
from tests.helpers import scenario_dict
from tests.refusals import check_refused

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REQUIRED = {"X": ("name", "ph", "ts", "dur", "pid", "tid"), "C": ("name", "ph", "ts", "pid", "args"),
            "M": ("name", "ph", "pid", "tid", "args")}  # fmt: skip
PARTS = {"compute": "compute_s", "wait": "wait_s", "comm": "comm_s"}


def export(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Run export-trace (``-o`` is argv's last item) and return the document it wrote."""
    assert main(["export-trace", *argv]) == 0, capsys.readouterr().err
    out = Path(argv[-1])
    opener: Any = gzip.open if out.suffix == ".gz" else open
    with opener(out, "rt", encoding="utf-8") as f:
        return json.load(f)


def ns(us: float) -> int:
    return round(us * 1000)


def check_format(doc: dict[str, Any]) -> None:
    """The trace-event format: required fields per ``ph``, non-negative microseconds, slices on
    a track nested or apart, every pid and tid named by a metadata event."""
    assert doc["displayTimeUnit"] in ("ms", "ns")
    events = doc["traceEvents"]
    assert {e["ph"] for e in events} <= set(REQUIRED)
    for e in events:
        assert all(k in e for k in REQUIRED[e["ph"]]), e
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0 and e["dur"] >= 0, e
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
    processes = {e["pid"] for e in events if e["name"] == "process_name"}
    named = [(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"]
    threads = set(named)
    assert len(threads) == len(named), "a track named twice"
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in events if e["ph"] != "M"} <= processes
    assert {(e["pid"], e["tid"]) for e in slices} <= threads
    by_track = defaultdict(list)
    for e in slices:
        by_track[e["pid"], e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    for track in by_track.values():
        open_ends: list[int] = []
        for start, end in sorted(track, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()  # ended before this one begins
            assert not open_ends or end <= open_ends[-1], "a slice overlaps its neighbour without nesting"
            open_ends.append(end)


def names(doc: dict[str, Any], kind: str) -> dict[Any, str]:
    """pid (process_name) or (pid, tid) (thread_name) -> name."""
    key = (lambda e: e["pid"]) if kind == "process_name" else (lambda e: (e["pid"], e["tid"]))
    return {key(e): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == kind}


def read_back(doc: dict[str, Any], worker_names: list[str]) -> pd.DataFrame:
    """Per policy, worker and step: the compute, wait and comm seconds the slices add up to."""
    processes, threads = names(doc, "process_name"), names(doc, "thread_name")
    sums: dict[tuple[str, int, int], dict[str, float]] = defaultdict(lambda: dict.fromkeys(PARTS.values(), 0.0))
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] in PARTS:
            worker = worker_names.index(threads[e["pid"], e["tid"]])
            sums[processes[e["pid"]], worker, e["args"]["step"]][PARTS[e["cat"]]] += e["dur"] / 1e6
        elif e["ph"] == "X" and e["cat"] == "step":  # a step with no part of any length still counts
            sums[processes[e["pid"]], worker_names.index(threads[e["pid"], e["tid"]]), e["args"]["step"]]
    rows = [{"policy": p, "worker": w, "step": s, **v} for (p, w, s), v in sums.items()]
    return pd.DataFrame(rows)


def check_round_trip(doc: dict[str, Any], trace: pd.DataFrame, worker_names: list[str]) -> None:
    """Every row of ``trace`` comes back from the slices to the microsecond, and nothing else."""
    back = read_back(doc, worker_names)
    merged = trace.merge(back, on=["policy", "worker", "step"], how="outer", suffixes=("", "_back"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"].head()
    for column in PARTS.values():
        assert np.abs(merged[column] - merged[f"{column}_back"]).max() < 1e-6, column


def simulate_out(tmp_path: Path, raw: dict[str, Any], *policies: str) -> Path:
    (tmp_path / "s.toml").write_text(tomli_w.dumps(raw), encoding="utf-8")
    out = tmp_path / "sim"
    assert main(["simulate", str(tmp_path / "s.toml"), "--policy", ",".join(policies), "--out", str(out)]) == 0
    return out


def shared_cluster() -> dict[str, Any]:
    """The built-in shared cluster (slowdown episodes, a failing worker), 300 steps."""
    raw = tomllib.loads(builtin_text("shared-cluster"))
    raw["workload"]["epochs"] = 3
    return raw


# ----------------------------------------------------------------------------- simulated runs


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """``simulate --out`` of the shared cluster under four policies (a resplitting one, a first-k
    one whose worker fails, no barrier), and its worker names."""
    tmp = tmp_path_factory.mktemp("shared")
    raw = shared_cluster()
    return simulate_out(tmp, raw, "equal", "adaptive", "backup", "async"), [w.name for w in build_scenario(raw).workers]


@pytest.mark.slow
def test_a_simulated_run_with_episodes_and_failures_round_trips(shared_run, tmp_path, capsys):
    out, worker_names = shared_run
    doc = export([str(out), "-o", str(tmp_path / "run.json")], capsys)
    check_format(doc)
    trace = pd.read_parquet(out / "trace.parquet")
    check_round_trip(doc, trace, worker_names)
    assert list(names(doc, "process_name").values()) == ["equal", "adaptive", "backup", "async"]
    events = doc["traceEvents"]
    updates = [e for e in events if e["ph"] == "X" and e["name"].startswith("update ")]
    assert len(updates) == int((trace["policy"] == "async").sum())  # one slice per update
    assert {"failure", "slowdown"} <= {e.get("cat") for e in events}


@pytest.mark.slow
def test_the_batch_share_counter_follows_every_resplit(shared_run, tmp_path, capsys):
    out, worker_names = shared_run
    doc = export([str(out), "--policy", "adaptive", "-o", str(tmp_path / "run.json")], capsys)
    trace = pd.read_parquet(out / "trace.parquet").query("policy == 'adaptive'")
    split = trace.pivot(index="step", columns="worker", values="local_batch")
    starts = trace.groupby("step")["start_s"].first()
    changes = [s for k, s in enumerate(split.index) if k == 0 or (split.iloc[k] != split.iloc[k - 1]).any()]
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len(changes) > 1
    for e, step in zip(counters, changes):
        assert e["ts"] == pytest.approx(1e6 * starts[step], abs=0.01)
        batch = split.loc[step]
        assert e["args"] == pytest.approx({worker_names[w]: b / batch.sum() for w, b in batch.items()})


@pytest.mark.slow
def test_slowdown_spans_cover_exactly_the_steps_computed_slowed(shared_run, tmp_path, capsys):
    out, worker_names = shared_run
    doc = export([str(out), "--policy", "equal", "-o", str(tmp_path / "run.json")], capsys)
    trace = pd.read_parquet(out / "trace.parquet").query("policy == 'equal'")
    threads = names(doc, "thread_name")
    spans = defaultdict(list)
    steps = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "slowdown":
            spans[threads[e["pid"], e["tid"]].removesuffix(" slowdown")].append(
                (ns(e["ts"]), ns(e["ts"] + e["dur"]), e["args"]["factor"]))  # fmt: skip
        if e["ph"] == "X" and e["cat"] == "step":
            steps[threads[e["pid"], e["tid"]], e["args"]["step"]] = (ns(e["ts"]), ns(e["ts"] + e["dur"]))
    assert sum(map(len, spans.values())) > 0
    for row in trace.itertuples():
        name = worker_names[row.worker]
        start, end = steps[name, row.step]
        inside = [f for s, t, f in spans[name] if s <= start + 1 and end <= t + 1]
        overlapping = [f for s, t, f in spans[name] if s < end - 1 and start < t - 1]
        assert inside == ([row.slowdown] if row.slowdown != 1.0 else []), row
        assert overlapping == inside, row
    # a viewer that reads no sort index orders tracks by id: the ids follow the sort order, a
    # worker's slowdown track right after the worker's own
    order = {
        (e["pid"], e["tid"]): e["args"]["sort_index"] for e in doc["traceEvents"] if e["name"] == "thread_sort_index"
    }
    assert all(tid == 1 + index for (_, tid), index in order.items())
    by_tid = [threads[key] for key in sorted(order)]
    slowed = next(i for i, name in enumerate(by_tid) if name.endswith(" slowdown"))
    assert by_tid[slowed] == by_tid[slowed - 1] + " slowdown"


def two_workers_with_buckets() -> dict[str, Any]:
    """Two deterministic workers, 1 s and 2 s a step; a 4 MB gradient in four 1 MB buckets of
    0.1 s (a constant 0.4 s exchange) produced over the last half of the compute."""
    workers = [{"name": "fast", "overhead_s": 0.0, "per_sample_s": 1.0},
               {"name": "slow", "overhead_s": 0.0, "per_sample_s": 2.0}]  # fmt: skip
    network = {"kind": "constant", "time_s": 0.4, "buckets_mb": 1.0}
    raw = scenario_dict(workers, global_batch=2, steps_per_epoch=3, epochs=2, network=network, gradient_mb=4.0)
    raw["workload"]["backward_fraction"] = 0.5
    return raw


def test_ddp_buckets_overlap_the_backward_pass_where_the_recurrence_puts_them(tmp_path, capsys):
    out = simulate_out(tmp_path, two_workers_with_buckets(), "equal")
    doc = export([str(out), "-o", str(tmp_path / "run.json")], capsys)
    check_format(doc)
    check_round_trip(doc, pd.read_parquet(out / "trace.parquet"), ["fast", "slow"])
    # Bucket k is ready when the slow worker has 0.5 * (1 - (k+1)/4) of its 2 s left: 1.25, 1.5,
    # 1.75, 2.0 s into the step; each takes 0.1 s, so 0.1 s is exposed and a step lasts 2.1 s.
    buckets = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "bucket"]
    assert len(buckets) == 4 * 6
    for e in buckets:
        step_start = 2.1 * e["args"]["step"]
        assert e["ts"] == pytest.approx(1e6 * (step_start + 1.25 + 0.25 * e["args"]["bucket"]), abs=1e-3)
        assert e["dur"] == pytest.approx(1e5, abs=1e-3) and e["args"]["size_mb"] == 1.0
    exposed = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "comm"]
    assert {round(e["dur"], 3) for e in exposed} == {1e5} and all(e["args"]["exposed"] for e in exposed)
    threads = set(names(doc, "thread_name").values())
    assert threads == {"fast", "slow", "all-reduce buckets"}


@pytest.mark.slow
def test_the_event_count_is_what_is_written_and_a_too_large_trace_is_refused(shared_run, tmp_path, capsys,
                                                                              monkeypatch):  # fmt: skip
    out = shutil.copytree(shared_run[0], tmp_path / "sim")
    doc = export([str(out), "--steps", "10:60", "-o", str(tmp_path / "run.json.gz")], capsys)
    check_format(doc)
    steps = {e["args"]["step"] for e in doc["traceEvents"] if e["ph"] == "X" and "step" in e["args"]}
    assert steps == set(range(10, 60))
    from hetsim.traces.sources import load_source

    laid = [lay_out(r, chrome.select_steps(r.trace, 10, 60)) for r in load_source(out).runs]
    n = sum(x.count() for x in laid)
    assert n == len(doc["traceEvents"])
    monkeypatch.setattr(chrome, "MAX_EVENTS", n // 2)
    fit = int(0.95 * (n // 2) / (n / 50))  # 5% spared (chrome.check_size)
    check_refused(main, ["export-trace", "{tmp}/sim", "--steps", "10:60", "-o", "{tmp}/big.json"],
                  f"--steps: 10:60 make {n} trace events, more than the {n // 2} a viewer opens; pick fewer steps "
                  f"with --steps A:B (about {fit} fit, e.g. --steps 10:{10 + fit}) or one policy with --policy",
                  tmp_path, capsys)  # fmt: skip


def test_the_steps_a_refusal_suggests_fit_when_async_numbers_its_updates(tmp_path, capsys, monkeypatch):
    """async numbers its updates (n workers' worth a barrier step): the suggested range is taken
    from each run's events over its own steps, so exporting it is not refused again."""
    assert main(["simulate", "paper", "--policy", "equal,async", "--set", "workload.epochs=2", "--out",
                 str(tmp_path / "sim")]) == 0  # fmt: skip
    capsys.readouterr()
    monkeypatch.setattr(chrome, "MAX_EVENTS", 2000)
    assert main(["export-trace", str(tmp_path / "sim"), "-o", str(tmp_path / "a.json")]) == 2
    suggested = capsys.readouterr().err.split("e.g. --steps ")[1].split(")")[0]
    first, stop = (int(v) for v in suggested.split(":"))
    assert first == 0 and stop > 20
    doc = export([str(tmp_path / "sim"), "--steps", suggested, "-o", str(tmp_path / "b.json")], capsys)
    assert 0.85 * 2000 <= len(doc["traceEvents"]) <= 2000


# ----------------------------------------------------------------------------- sweeps, real runs, files


def test_a_sweep_folders_kept_trace_round_trips_in_the_plotted_cells_scenario(tmp_path, capsys):
    raw = {"name": "tiny", "seed": 3, "replications": 1, "policies": ["equal", "dynamic"],
           "base": two_workers_with_buckets(), "grid": {"workload.global_batch": [2, 4]}}  # fmt: skip
    spec = load_sweep(raw)
    folder = RunFolder.start(tmp_path / "runs", spec, {})
    scenario = point_scenario(spec, (1,))  # the plotted cell: the last value of each axis
    folder.write_traces("traces.parquet", [simulate(scenario, scenario.named_policy(p), seed=3) for p in spec.policies])
    doc = export([str(folder.path), "-o", str(tmp_path / "sweep.json")], capsys)
    check_format(doc)
    check_round_trip(doc, pd.read_parquet(folder.path / "traces.parquet"), ["fast", "slow"])
    labels = [e["args"]["labels"] for e in doc["traceEvents"] if e["name"] == "process_labels"]
    assert labels == [f"sweep {folder.path.name}: workload.global_batch=4"] * 2
    assert any(e["cat"] == "bucket" for e in doc["traceEvents"] if e["ph"] == "X")


def test_a_validation_run_round_trips_rank_by_rank(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "validation-ddp-run", run)
    doc = export([str(run), "-o", str(tmp_path / "real.json")], capsys)
    check_format(doc)
    trace = pd.read_parquet(run / "trace.parquet")
    check_round_trip(doc, trace, ["rank 0 (cpu)", "rank 1 (cpu)"])
    assert list(names(doc, "process_name").values()) == list(dict.fromkeys(trace["policy"]))


def test_a_trace_file_without_the_optional_columns_exports_one_policy(tmp_path, capsys):
    trace = simulate(build_scenario(two_workers_with_buckets()), Dynamic(), seed=1).to_frame()
    bare = trace[["step", "worker", "local_batch", "start_s", "compute_s", "wait_s", "comm_s"]]
    bare.to_csv(tmp_path / "t.csv", index=False)
    doc = export([str(tmp_path / "t.csv"), "-o", str(tmp_path / "t.json")], capsys)
    check_format(doc)
    check_round_trip(doc, bare.assign(policy="trace"), ["worker 0", "worker 1"])
    shares = [e["args"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert shares and all(sum(s.values()) == pytest.approx(1.0) for s in shares)


def test_an_async_trace_missing_a_workers_rows_keeps_every_track_apart(tmp_path, capsys):
    raw = two_workers_with_buckets()
    raw["workers"].append({"name": "third", "overhead_s": 0.0, "per_sample_s": 1.5})
    raw["workload"].update(global_batch=3, dataset_size=9)
    frame = simulate(build_scenario(raw), Async()).to_frame().query("worker != 1")
    frame = frame.assign(slowdown=np.where(frame["worker"] == 0, 2.0, 1.0), step=np.arange(len(frame)))
    frame.to_parquet(tmp_path / "a.parquet")
    doc = export([str(tmp_path / "a.parquet"), "-o", str(tmp_path / "a.json")], capsys)
    check_format(doc)
    check_round_trip(doc, frame, ["worker 0", "worker 1", "worker 2"])
    assert sorted(names(doc, "thread_name").values()) == ["worker 0", "worker 0 slowdown", "worker 2"]


def test_the_layout_moves_a_late_row_later_never_shortens_it():
    from hetsim.model.trace import Trace

    frame = simulate(build_scenario(two_workers_with_buckets()), Equal()).to_frame()
    frame.loc[frame["step"] == 3, "start_s"] -= 0.5  # rank 0's clock: the step begins before the last one ended
    trace = Trace.from_frame(frame)
    w = lay_out(ExportRun(trace), np.arange(len(frame))).workers
    assert (w.start_ns == np.rint(1e9 * 2.1 * trace.step[w.rows])).all()  # step 3 where step 2 ended: 6.3 s
    for part, dur in (("compute_s", w.compute_dur_ns), ("wait_s", w.wait_dur_ns), ("comm_s", w.comm_dur_ns)):
        assert np.abs(dur - 1e9 * getattr(trace, part)[w.rows]).max() <= 1.0, part


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=30),
)
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_no_overlap_shifts_each_slice_the_least_that_keeps_the_track_in_order(slices):
    start = np.cumsum([s for s, _ in slices]).astype(np.int64) - 2 * 10**5 * np.arange(len(slices))
    dur = np.array([d for _, d in slices], dtype=np.int64)
    shifted = start + no_overlap(start, dur)
    assert (shifted >= start).all()
    assert (shifted[1:] >= shifted[:-1] + dur[:-1]).all()  # none begins before the previous one ended
    tight = (shifted[1:] > start[1:]) & (shifted[1:] != shifted[:-1] + dur[:-1])
    assert not tight.any()  # a moved slice begins exactly where the previous one ends
