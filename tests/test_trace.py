"""Trace files: equality of traces, CSV/Parquet round trips, and the reader's one-line errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from hetsim.core.errors import ConfigError
from hetsim.model.trace import COLUMNS, Trace, read_trace_table, traces_by_policy, write_trace_table
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    scenario = load_scenario("paper", ["workload.epochs=2"])
    return {p: simulate(scenario, scenario.named_policy(p), seed=1) for p in ("equal", "dynamic", "async")}


def test_equal_traces_compare_equal_and_any_difference_is_seen(traces):
    trace = traces["dynamic"]
    copy = dataclasses.replace(trace, compute_s=trace.compute_s.copy())
    assert copy == trace and not (copy != trace)
    assert trace != traces["equal"]
    assert dataclasses.replace(trace, policy="other") != trace
    assert dataclasses.replace(trace, synchronous=False) != trace
    changed = trace.compute_s.copy()
    changed[-1] += 1e-12
    assert dataclasses.replace(trace, compute_s=changed) != trace
    assert trace != "a trace"
    with pytest.raises(TypeError):
        hash(trace)


@pytest.mark.parametrize("name", ["t.csv", "t.parquet", "t.pq"])
def test_written_traces_read_back_equal(traces, tmp_path, name):
    write_trace_table(traces.values(), tmp_path / name)
    back = traces_by_policy(read_trace_table(tmp_path / name, COLUMNS))
    assert list(back) == list(traces)
    for policy, trace in traces.items():
        assert back[policy] == trace
    assert not back["async"].synchronous


def test_a_table_is_written_with_its_own_columns_and_optional_columns_default(tmp_path):
    frame = pd.DataFrame({c: [0] for c in COLUMNS}).assign(policy="equal", included=True, local_batch=4)
    write_trace_table(frame, tmp_path / "t.parquet", tmp_path / "t.csv")
    for name in ("t.parquet", "t.csv"):
        table = read_trace_table(tmp_path / name, COLUMNS)
        assert tuple(table.columns) == COLUMNS
        trace = Trace.from_frame(table)
        assert trace.slowdown.tolist() == [1.0] and trace.up.tolist() == [True]


def test_an_unknown_suffix_writes_nothing(traces, tmp_path):
    with pytest.raises(ConfigError, match="unknown file type '.txt'"):
        write_trace_table(traces["equal"], tmp_path / "t.csv", tmp_path / "t.txt")
    assert list(tmp_path.iterdir()) == []


def _one_line(info: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(info.value)
    assert "\n" not in text
    return text


def test_reader_errors_are_one_line_and_name_the_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_trace_table(tmp_path / "absent.parquet")
    assert _one_line(info) == f"{tmp_path / 'absent.parquet'}: no such file"

    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all\n\x00\x01" * 10)
    with pytest.raises(ConfigError) as info:
        read_trace_table(garbage)
    assert _one_line(info).startswith(f"{garbage}: not a readable Parquet table: ")

    missing = tmp_path / "missing.csv"
    missing.write_text("worker,compute_s\n0,0.1\n")
    with pytest.raises(ConfigError) as info:
        read_trace_table(missing)
    assert info.value.field == "local_batch"
    assert "missing column" in _one_line(info) and str(missing) in str(info.value)

    bad = tmp_path / "bad.csv"
    bad.write_text("worker,local_batch,compute_s\n0,4,0.1\n0,8,slow\n")
    with pytest.raises(ConfigError) as info:
        read_trace_table(bad)
    assert info.value.field == "compute_s"
    assert _one_line(info) == f"compute_s: non-numeric value 'slow' in data row 2 in {bad}"


def test_reader_checks_every_required_column(tmp_path):
    path = tmp_path / "short.parquet"
    pd.DataFrame({"worker": [0], "local_batch": [4], "compute_s": [0.1]}).to_parquet(path)
    assert read_trace_table(path)["local_batch"].dtype == np.int64
    with pytest.raises(ConfigError, match="missing column") as info:
        read_trace_table(path, COLUMNS)
    assert info.value.field == "policy"
