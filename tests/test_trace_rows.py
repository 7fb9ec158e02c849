"""validation's trace rows and run folder: the gradient weights of a split, a step's rows in the
simulator's terms (every rank's row adding up to rank 0's step), and the writer's files. No
process group here."""

from __future__ import annotations

import pandas as pd
import pytest

from hetsim.model.trace import COLUMNS, Trace
from hetsim.run.metrics import step_times
from validation.allreduce import gradient_weights
from validation.record import RankTiming, RunWriter, step_rows


def test_gradient_weights():
    assert gradient_weights((5, 0, 13), weighted=True) == (5.0, 0.0, 13.0)
    assert gradient_weights((5, 0, 13), weighted=False) == (1.0, 0.0, 1.0)


# ----------------------------------------------------------------------------- trace rows


def test_step_rows_add_up_to_rank_0s_step_with_the_barrier_latency_as_comm():
    # rank 1 got the split 0.5 ms after rank 0 (its comm_s has that wait), computed 10 ms and
    # arrived last at the barrier, which took 0.2 ms
    timings = [RankTiming(0.004, 0.0062, 0.001), RankTiming(0.010, 0.0002, 0.0015)]
    rows = step_rows("equal", 0, 7, 1.5, (64, 64), timings)
    assert [r["comm_s"] for r in rows] == pytest.approx([0.0012, 0.0012])
    assert [r["wait_s"] for r in rows] == pytest.approx([0.006, 0.0])
    for r in rows:
        assert r["compute_s"] + r["wait_s"] + r["comm_s"] == pytest.approx(0.004 + 0.0062 + 0.001)
    trace = Trace.from_frame(pd.DataFrame(rows))
    assert step_times(trace) == pytest.approx([0.0112])  # what the simulator would call the step
    assert all(set(r) == set(COLUMNS) for r in rows)


def test_a_step_rank_0_timed_from_after_a_peer_started_has_no_negative_part():
    """Rank 0 left a warm-up's meeting 5 ms after rank 1, which then computed 30 ms: rank 0's wall
    (27 ms) is shorter than the slowest compute, and DDP's wait makes its communication -3 ms.
    The step is the slowest compute and the barrier's latency; no part is negative."""
    timings = [RankTiming(0.010, 0.020, -0.003), RankTiming(0.030, 0.0004, 0.004)]
    rows = step_rows("probe", 0, 3, 0.0, (32, 96), timings)
    assert [r["comm_s"] for r in rows] == pytest.approx([0.0004, 0.0004])
    assert [r["wait_s"] for r in rows] == pytest.approx([0.020, 0.0])
    for r in rows:
        assert min(r["compute_s"], r["wait_s"], r["comm_s"]) >= 0
        assert r["compute_s"] + r["wait_s"] + r["comm_s"] == pytest.approx(0.0304)


def test_a_peers_compute_that_overlapped_rank_0s_broadcast_does_not_lengthen_the_step():
    """Flat, a neighbour on rank 1's core (as a reviewer measured it against rank 0's
    torch.profiler steps): rank 1 began its 15.75 ms of compute while rank 0 was still in the
    step's first communication, so rank 0's 12.1 ms of communication, 5 ms of compute and 3.37 ms
    at the barrier (a 20.47 ms wall) overlap it. The step is rank 0's wall, not the slowest compute
    plus rank 0's communication (27.85 ms); only what the slowest compute leaves is exposed."""
    timings = [RankTiming(0.005, 0.00337, 0.0121), RankTiming(0.01575, 0.0001, 0.0003)]
    rows = step_rows("dynamic", 0, 4, 0.0, (40, 24), timings)
    for r in rows:
        assert r["compute_s"] + r["wait_s"] + r["comm_s"] == pytest.approx(0.02047)
        assert min(r["wait_s"], r["comm_s"]) >= 0
    assert rows[0]["comm_s"] == pytest.approx(0.02047 - 0.01575)
    assert rows[1]["wait_s"] == 0.0


def test_run_writer_writes_the_trace_schema(tmp_path):
    writer = RunWriter(tmp_path, {"global_batch": 8})
    for step in range(3):
        writer.add_steps(
            step_rows(
                "equal", 0, step, 0.01 * step, (3, 5), [RankTiming(0.003, 0.002, 0.001), RankTiming(0.005, 0.0, 0.001)]
            )
        )
    writer.add_epoch(
        lambda: {
            "policy": "equal",
            "epoch": 0,
            "train_loss": 1.0,
            "test_loss": 1.1,
            "test_accuracy": 0.5,
            "elapsed_s": 0.03,
            "split": "3/5",
            "global_batch": 8,
            "noise_scale": None,
        }
    )
    writer.flush()
    summary = writer.finish(["equal"])
    for frame in (pd.read_parquet(tmp_path / "trace.parquet"), pd.read_csv(tmp_path / "trace.csv")):
        assert tuple(frame.columns) == COLUMNS
        trace = Trace.from_frame(frame)
        assert trace.n_workers == 2 and trace.n_steps == 3
    assert summary["policies"][0]["final_batches"] == [3, 5]
    assert summary["policies"][0]["final_test_accuracy"] == 0.5


# ----------------------------------------------------------------------------- options and bad input
