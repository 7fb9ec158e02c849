"""``hetsim import-trace --format torch-profiler``: exact cases on synthetic Kineto traces
(tests/kineto_builder.py), properties (the ranks' clocks, gzip), and the traces recorded by
``validation.uneven``'s profiler in tests/fixtures/torch_profiler/ against the ranks' own timings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsim.cli.main import main
from hetsim.traces.kineto import UNTIMED
from hetsim.traces.torch_profiler import import_traces
from tests.kineto_builder import COMM_US, STEP_US, job, rank_events, trace, write

FIXTURES = Path(__file__).parent / "fixtures" / "torch_profiler"
RECORDED = sorted(p for p in FIXTURES.iterdir() if p.is_dir())

computes = st.lists(st.floats(400.0, 15_000.0), min_size=2, max_size=4)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(computes, min_size=1, max_size=4).filter(lambda s: len({len(c) for c in s}) == 1),
       shift_us=st.floats(-5e6, 5e6), data=st.data())  # fmt: skip
def test_exact_times_and_offsets(tmp_path_factory: pytest.TempPathFactory, steps: list[list[float]], shift_us: float,
                                 data: st.DataObject) -> None:  # fmt: skip
    """Each rank's compute is its time to its issue, its wait the last rank's lead, the rest
    communication; every rank's clock may be off by anything: the offsets are found exactly."""
    world = len(steps[0])
    batches = data.draw(st.lists(st.integers(1, 512), min_size=world, max_size=world))
    shifts = [0.0] + [shift_us * (r % 2 or -1) for r in range(1, world)]
    imported = import_traces(job(tmp_path_factory.mktemp("job"), steps, batches, shifts), policy="equal")
    frame = imported.trace.to_frame()
    c = np.array(steps) * 1e-6  # (steps, ranks), seconds
    assert np.allclose(frame["compute_s"].to_numpy(), c.ravel(), atol=1e-9)
    assert np.allclose(frame["wait_s"].to_numpy(), (c.max(axis=1, keepdims=True) - c).ravel(), atol=1e-9)
    assert np.allclose(frame["comm_s"].to_numpy(), (STEP_US * 1e-6 - c.max(axis=1, keepdims=True) + 0 * c).ravel(),
                       atol=1e-9)  # fmt: skip
    assert frame["local_batch"].tolist() == batches * len(steps)
    assert frame["step"].tolist() == [k + 1 for k in range(len(steps)) for _ in range(world)]
    assert np.allclose(frame["start_s"].to_numpy()[::world], np.arange(len(steps)) * STEP_US * 1e-6, atol=1e-9)
    assert np.allclose(imported.offsets_s, np.array(shifts) * 1e-6, atol=1e-9)
    assert imported.trace.policy == "equal" and imported.collectives == len(steps)


def test_plain_and_gzipped_read_alike(tmp_path: Path) -> None:
    steps, batches = [[3000.0, 7000.0], [6000.0, 2000.0]], [64, 64]
    plain = import_traces(job(tmp_path / "plain", steps, batches, gz=False)).trace
    packed = import_traces(job(tmp_path / "gz", steps, batches)).trace
    assert plain == packed


def test_batch_from_the_option_where_it_names_the_rank_else_the_shapes(tmp_path: Path) -> None:
    steps = [[3000.0, 7000.0]]
    files = [write(tmp_path / f"r{r}.json", trace(r, 2, rank_events(r, steps, [48, 80], shapes=False)))
             for r in range(2)]  # fmt: skip
    assert import_traces(files, {0: 48, 1: 80}).trace.local_batch.tolist() == [48, 80]
    with_shapes = job(tmp_path / "shapes", steps, [48, 80])
    assert import_traces(with_shapes).trace.local_batch.tolist() == [48, 80]
    assert import_traces(with_shapes, {1: 0}).trace.local_batch.tolist() == [48, 0]  # the option wins where given


def test_steps_start_where_rank_0s_start_and_their_rows_add_up_when_a_peer_leads(tmp_path: Path) -> None:
    """Rank 1 enters the first step 3 ms before rank 0 on the same clock (its ProfilerStep begins
    earlier; its operators and collectives are where they were). The rows start where rank 0's
    steps start, so one step ends where the next begins; a step whose slowest compute (rank 1's
    18 ms and its 3 ms lead) outlasts rank 0's 20 ms span lasts that compute, and every row adds up."""
    steps = [[5000.0, 18000.0], [5000.0, 9000.0]]
    events = rank_events(1, steps, [32, 32])
    for e in events:
        if e["name"] == "ProfilerStep#1":
            e["ts"] -= 3000.0
    files = [write(tmp_path / "r0.json", trace(0, 2, rank_events(0, steps, [32, 32]))),
             write(tmp_path / "r1.json", trace(1, 2, events))]  # fmt: skip
    frame = import_traces(files).trace.to_frame()
    assert np.allclose(frame["start_s"].to_numpy()[::2], [0.0, STEP_US * 1e-6], atol=1e-9)  # rank 0's, not rank 1's
    compute = frame["compute_s"].to_numpy().reshape(2, 2)
    assert compute[0, 1] > compute[0, 0] and compute[0, 1] >= 0.018  # rank 1 slowest in step 1, with part of its lead
    total = (frame["compute_s"] + frame["wait_s"] + frame["comm_s"]).to_numpy().reshape(2, 2)
    assert np.allclose(total, np.maximum(STEP_US * 1e-6, compute.max(axis=1, keepdims=True)), atol=1e-9)
    assert (frame[["wait_s", "comm_s"]].to_numpy() >= 0).all()


@pytest.mark.slow
def test_the_command_writes_a_trace_calibrate_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = [[3000.0, 9000.0], [4000.0, 9500.0], [2000.0, 8000.0]]
    job(tmp_path / "profiler", steps, [32, 96], [0.0, 2500.0])
    out = tmp_path / "trace.csv"
    assert main(["import-trace", "--format", "torch-profiler", str(tmp_path / "profiler"), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "rank 1 +2.500 ms" in said and "2 ranks x 3 steps, policy equal" in said
    frame = pd.read_csv(out)
    assert frame["compute_s"].round(9).tolist() == [c * 1e-6 for s in steps for c in s]
    assert main(["calibrate", str(out), "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["scenario"]["workload"]["global_batch"] == 128


@pytest.mark.slow
def test_reference_logs_format_is_import_logs(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "success.txt").write_text("batch_size : 64\nnum_epochs : 2\n")
    timer = {"batch.process": {"average_duration": 0.1, "n_events": 99, "total_time": 10.0},
             "batch.reduce": {"average_duration": 0.01, "n_events": 99, "total_time": 1.0},
             "mean_batch_process_times": [0.1, 0.12]}  # fmt: skip
    for rank in range(2):
        (folder / f"timer_summary_{rank}.json").write_text(json.dumps(timer))
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert main(["import-logs", str(folder), "-o", str(a)]) == 0
    assert main(["import-trace", "--format", "reference-logs", str(folder), "-o", str(b)]) == 0
    assert a.read_text() == b.read_text()


def _step_spans_us(path: Path) -> dict[int, float]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return {
        int(e["name"].split("#")[1]): e["dur"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
    }


@pytest.mark.slow
@pytest.mark.parametrize("folder", RECORDED, ids=[p.name for p in RECORDED])
def test_recorded_traces_against_the_ranks_own_timing(folder: Path) -> None:
    """Real traces (flat and DDP, 2 and 3 gloo ranks, rank 1 slowed by 5 ms a step): the local
    batches exactly, each row adding up to the step (rank 0's ProfilerStep), the wait the slowest
    rank's lead, and compute close to what
    each rank measured of itself (the trace also counts the few operators between the
    zero_grad and the forward, and around the packing of the gradient, that the rank's own clock
    leaves out: a larger share of the toy model's 2-10 ms steps than of validation's)."""
    files = sorted(folder.glob("equal-rank*.json.gz"))
    frame = import_traces(files).trace.to_frame()
    errors = []
    for path in files:
        rank = int(path.name.split("rank")[1].split(".")[0])
        truth = json.loads((folder / f"truth-rank{rank}.json").read_text())
        mine = frame[frame["worker"] == rank].set_index("step")
        assert sorted(mine.index) == [t["step"] for t in truth]
        assert [int(mine.loc[t["step"], "local_batch"]) for t in truth] == [t["local_batch"] for t in truth]
        total = mine["compute_s"] + mine["wait_s"] + mine["comm_s"]
        spans = _step_spans_us(files[0])  # every row adds up to the step: rank 0's ProfilerStep
        assert np.allclose(total.to_numpy(), [spans[s] * 1e-6 for s in mine.index], atol=1e-9)
        slowest = frame.groupby("step")["compute_s"].max()
        assert np.allclose(mine["wait_s"].to_numpy(), (slowest[mine.index] - mine["compute_s"]).to_numpy())
        assert (mine[["compute_s", "wait_s", "comm_s"]] >= 0).all().all()
        errors += [mine.loc[t["step"], "compute_s"] / t["compute_s"] - 1 for t in truth]
    assert np.median(np.abs(errors)) < 0.10  # 0.9% to 8.5% over the four recorded jobs
    assert COMM_US > 0  # the builder's constants stay what the exact cases assume


def test_ranks_on_one_host_with_one_base_share_one_clock() -> None:
    """Recorded on one host, the ranks' traces count from the same baseTimeNanoseconds: their
    clocks are one and no offset is estimated (from the all-reduces' ends, which a loaded rank
    sees late, it came out at milliseconds)."""
    from hetsim.traces.torch_profiler import offsets_line

    imported = import_traces(sorted((FIXTURES / "ddp-2ranks").glob("equal-rank*.json.gz")))
    assert imported.same_clock and imported.offsets_s == (0.0, 0.0)
    assert offsets_line(imported.offsets_s, imported.same_clock) == (
        "clock offsets from rank 0: none (the ranks ran on one host, on one clock)"
    )


def test_one_host_name_and_base_with_clocks_apart_falls_back_to_the_estimate(tmp_path: Path) -> None:
    """Two hosts of one name whose traces share a base (generic container names): with no offsets
    the all-reduces would end before they were issued, so the offsets are estimated as for two
    hosts, exactly."""
    from tests.kineto_builder import rank_events, trace, write

    steps, shifts = [[3000.0, 7000.0], [5000.0, 4000.0], [2000.0, 6000.0]], [0.0, 50_000.0]
    files = [write(tmp_path / f"equal-rank{r}.json.gz", trace(r, 2, rank_events(r, steps, [64, 64], shifts[r]),
                                                               host_name="box", baseTimeNanoseconds=10**18))
             for r in range(2)]  # fmt: skip
    imported = import_traces(files)
    assert not imported.same_clock and np.allclose(imported.offsets_s, [0.0, 0.05], atol=1e-9)


def _cuda_one_rank_events(steps: int) -> list[dict[str, object]]:
    """One rank of NCCL + DDP on CUDA as torch.profiler records it: the loop on thread 1, the
    backward (and DDP's all-reduce, from its comm hook) on the autograd engine's device thread 3,
    the kernels on the device; a job of one rank, so NCCL launched no kernel."""
    events: list[dict[str, object]] = []

    def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", pid: int = 7, **args: object) -> None:
        events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    for k in range(steps):
        t = 1_000_000.0 + k * 10_000.0
        op(f"ProfilerStep#{k + 1}", t, 10_000.0, cat="user_annotation")
        op("c10d::broadcast_", t + 20, 10, **{"Input Dims": [[[2]], [], []]})  # the split
        op("Optimizer.zero_grad#SGD.zero_grad", t + 50, 20, cat="user_annotation")
        op("aten::linear", t + 100, 200, **{"Input Dims": [[64, 8], [4, 8], [4]]})
        op("autograd::engine::evaluate_function: AddmmBackward0", t + 2000, 300, tid=3)
        op("c10d::allreduce_", t + 2400, 10, tid=3, **{"Input Dims": [[[36]], [], []]})
        op("sm90_xmma_gemm", t + 150, 1500, tid=7, cat="kernel", pid=0)
        op("sm90_xmma_gemm_bwd", t + 2050, 1000, tid=7, cat="kernel", pid=0)
    return events


def test_a_one_rank_cuda_job_reads_its_backward_and_collectives_from_every_thread(tmp_path: Path) -> None:
    """gpu-check's profiled run on one GPU: the backward's last node and DDP's all-reduce come from
    the engine's thread, and its collectives, which ran nowhere (NCCL's one-rank communicator
    launches no kernel), took no time and blocked nothing: the step is compute from the
    zero_grad's end to its end, the rest communication."""
    from hetsim.traces.kineto import read_rank

    data = trace(0, 1, _cuda_one_rank_events(3))
    data["distributedInfo"]["backend"] = "nccl"
    path = write(tmp_path / "equal-rank0.json.gz", data)
    rank = read_rank(path)
    assert [c.name for c in rank.collectives] == ["c10d::broadcast_", "c10d::allreduce_"] * 3
    assert all(c.ran.start_s == c.ran.end_s == c.issue.end_s for c in rank.collectives)
    assert rank.backward_s == {k + 1: pytest.approx((1_000_000.0 + k * 10_000.0 + 2000) * 1e-6) for k in range(3)}
    frame = import_traces([path]).trace.to_frame()
    assert list(frame["local_batch"]) == [64, 64, 64]
    assert np.allclose(frame["compute_s"], (10_000.0 - 70.0) * 1e-6) and np.allclose(frame["comm_s"], 70e-6)
    assert np.allclose(frame["wait_s"], 0.0)


def test_a_step_holding_untimed_work_is_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # validation's trainer warms a new batch size inside the step, outside its clock: imported,
    # that pass counted as compute (21.7 ms where the run's step was 15.5)
    steps, batches = [[3000.0, 7000.0], [6000.0, 2000.0], [4000.0, 5000.0]], [64, 64]
    paths = []
    for r in range(2):
        events = rank_events(r, steps, batches)
        events.append({"ph": "X", "cat": "user_annotation", "name": UNTIMED, "pid": 7, "tid": 1,
                       "ts": 1_000_000.0 + STEP_US + 50, "dur": 40, "args": {}})  # in step 2  # fmt: skip
        paths.append(write(tmp_path / f"equal-rank{r}.json.gz", trace(r, 2, events)))
    imported = import_traces(paths)
    assert imported.untimed == (2,) and sorted(set(imported.trace.step)) == [1, 3]
    whole = import_traces(job(tmp_path / "whole", steps, batches)).trace.to_frame()
    assert imported.trace.to_frame().reset_index(drop=True).equals(whole[whole["step"] != 2].reset_index(drop=True))
    assert main(["import-trace", "--format", "torch-profiler", *map(str, paths), "-o", str(tmp_path / "t.csv")]) == 0
    assert "note: steps 2 left out: they hold a hetsim.untimed range" in capsys.readouterr().err
