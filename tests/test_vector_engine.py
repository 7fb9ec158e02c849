"""The vector engine gives the SimPy engine's trace, and drives policies the same way."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.core.errors import ConfigError
from hetsim.engines import ENGINES, SimPyEngine, VectorEngine, engine_for, engine_named, run_simpy, run_vector
from hetsim.model.trace import Trace
from hetsim.policies import POLICIES, Async, Dynamic, KSync, make_policy
from hetsim.policies.base import step_records
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario
from tests.helpers import scenario_dict

FLOAT_COLUMNS = ("start_s", "compute_s", "wait_s", "comm_s", "slowdown")
EXACT_COLUMNS = ("epoch", "step", "worker", "local_batch", "included", "up")
BARRIER_POLICIES = [name for name, cls in POLICIES.items() if cls.synchronous]


def assert_same_trace(a: Trace, b: Trace) -> None:
    assert (a.policy, a.n_workers, a.synchronous) == (b.policy, b.n_workers, b.synchronous)
    for column in EXACT_COLUMNS:
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    for column in FLOAT_COLUMNS:
        x, y = getattr(a, column), getattr(b, column)
        assert x.shape == y.shape, column
        assert np.max(np.abs(x - y), initial=0.0) <= 1e-9, column


def recording(cls):
    """A subclass of policy class ``cls`` that logs what an engine tells it and asks of it: the
    splits it hands out (by step) and every step's record, one ``observe_steps`` block expanded
    into the records of its steps."""

    class Recording(cls):
        def reset(self, *args, **kwargs):
            self.splits, self.observed, self.blocks, self.cut = {}, [], 0, 0
            super().reset(*args, **kwargs)

        def partition(self, info):
            batches = super().partition(info)
            self.splits[info.step] = tuple(batches)
            return batches

        def observe(self, record):
            if not self.blocks:
                self.observed.append(record)
            super().observe(record)

        def observe_steps(self, first, local_batches, compute_s, included):
            self.blocks += 1
            taken = super().observe_steps(first, local_batches, compute_s, included)
            self.blocks -= 1
            self.observed.extend(list(step_records(first, local_batches, compute_s, included))[:taken])
            self.cut += taken < len(compute_s)
            return taken

    return Recording


NOISES = [
    {"dist": "constant", "value": 1.0},
    {"dist": "lognormal", "sigma": 0.3},
    {"dist": "exponential", "mean": 1.0},
    {"dist": "gamma", "shape": 4.0, "scale": 0.25},
    {"dist": "uniform", "low": 0.5, "high": 1.5},
    {"dist": "empirical", "samples": [0.8, 1.0, 1.2]},
]
DELAYS = [
    {"dist": "constant", "value": 0.0},
    {"dist": "constant", "value": 0.02},
    {"dist": "uniform", "low": 0.0, "high": 0.05},
    {"dist": "shifted_exponential", "shift": 0.01, "mean": 0.02},
]
COSTS = [  # beside the affine overhead_s/per_sample_s of most draws
    {"model": "hinge", "floor_s": 0.02, "overhead_s": 0.005, "per_sample_s": 0.001},
    {"model": "table", "points": [[4, 0.01], [32, 0.012], [128, 0.06]]},
    {"model": "profile", "device": "v100", "workload": "ResNet-18"},
]
SHARED_NOISES = [  # one definition per group name: members of a group declare the same factor
    {"group": "host", "dist": "lognormal", "sigma": 0.2},
    {"group": "busy", "dist": "lognormal", "sigma": 0.4, "persistence": 0.8},
    {"group": "rack", "dist": "gamma", "shape": 4.0, "scale": 0.25},
    {"group": "pair", "dist": "empirical", "samples": [0.5, 1.5]},
]
POLICY_PARAMS = {
    "adaptive": st.fixed_dictionaries(
        {"resplit": st.sampled_from(["step", "epoch"]), "hysteresis": st.sampled_from([0.0, 0.01])}
    ),
    "goodput": st.fixed_dictionaries(
        {"resplit": st.sampled_from(["step", "epoch"]), "batch_hysteresis": st.sampled_from([0.0, 0.05]),
         "min_batch": st.sampled_from([None, 1])}
    ),
}  # fmt: skip
EFFICIENCIES = [  # every generated scenario has one (goodput needs it); a schedule makes its batch move
    {"noise_scale": 64, "base_batch": 32},
    {"noise_scale": [[0, 4], [2, 4000]], "base_batch": 16},
]
EFFICIENT = ["workload.efficiency.noise_scale=[[0, 50], [200, 5000]]", "workload.efficiency.base_batch=64"]


NETWORKS_DRAWN = [
    {"kind": "constant", "time_s": 0.0},
    {"kind": "constant", "time_s": 0.005},
    {"kind": "ring", "latency_s": 1e-5, "bandwidth_gbps": 10},
    # overlapped with the backward pass in buckets (gradient_mb = 1)
    {"kind": "ring", "latency_s": 1e-5, "bandwidth_gbps": 1, "buckets_mb": 0.25},
    {"kind": "ps", "latency_s": 1e-4, "bandwidth_gbps": 2, "buckets_mb": 0.3, "first_bucket_mb": 0.05},
    {"kind": "constant", "time_s": 0.02, "buckets_mb": 1.0, "first_bucket_mb": 0.5},
    # two levels: every worker group on one of three nodes (a node may hold several groups)
    {"kind": "hierarchical", "latency_s": 1e-6, "bandwidth_gbps": 50, "inter_bandwidth_gbps": 2},
    {"kind": "hierarchical", "inter_latency_s": 1e-4, "inter_bandwidth_gbps": 1, "buckets_mb": 0.25},
]


def _group(draw, g: int) -> dict:
    """One worker group of :func:`scenarios`."""
    w = {
        "name": f"g{g}",
        "count": draw(st.integers(1, 4)),
        "overhead_s": draw(st.sampled_from([0.0, 0.01, 0.03])),
        "per_sample_s": draw(st.floats(1e-4, 5e-3)),
        "noise": draw(st.sampled_from(NOISES)),
        "delay": draw(st.sampled_from(DELAYS)),
    }
    if w["noise"]["dist"] == "lognormal" and draw(st.booleans()):
        w["noise"] = {**w["noise"], "persistence": draw(st.sampled_from([0.0, 0.3, 0.9, 0.999]))}
    if draw(st.integers(0, 2)) == 0:
        w["shared_noise"] = draw(st.sampled_from(SHARED_NOISES))
    if draw(st.booleans()):
        w["max_batch"] = draw(st.integers(8, 200))
    if draw(st.integers(0, 3)) == 0:
        del w["overhead_s"], w["per_sample_s"]
        w["cost"] = draw(st.sampled_from(COSTS))
        w["max_batch"] = w.get("max_batch", 200)  # within the profile's largest measured batch
    if draw(st.integers(0, 2)) == 0:
        shared = draw(st.booleans())
        w["slowdown"] = {
            "every_s": 0.4 if shared else draw(st.floats(0.05, 2.0)),
            "duration_s": 0.2 if shared else draw(st.floats(0.01, 1.0)),
            "factor": draw(st.sampled_from([1.0, 1.5, 3.0])),
        }
        if shared:
            w["slowdown"]["group"] = "host"
    if draw(st.integers(0, 2)) == 0:
        w["failure"] = {"mtbf_s": draw(st.floats(0.1, 3.0)), "repair_s": draw(st.floats(0.01, 0.8))}
    return w


@st.composite
def scenarios(draw):
    """Small scenarios whose episodes and failures come often enough to land inside the run,
    with persistent noise and shared noise groups."""
    workers = [_group(draw, g) for g in range(draw(st.integers(1, 4)))]
    n = sum(w["count"] for w in workers)
    cap = sum(w.get("max_batch", 10**9) * w["count"] for w in workers)
    network = draw(st.sampled_from(NETWORKS_DRAWN))
    if network["kind"] == "hierarchical":
        for w in workers:
            w["node"] = draw(st.sampled_from(["n0", "n1", "n2"]))
    raw = scenario_dict(
        workers,
        global_batch=draw(st.integers(n, min(cap, 400))),
        steps_per_epoch=draw(st.integers(1, 6)),
        epochs=draw(st.integers(1, 4)),
        network=network,
        seed=draw(st.integers(0, 2**16)),
        gradient_mb=1.0,
    )
    raw["workload"]["efficiency"] = draw(st.sampled_from(EFFICIENCIES))
    return build_scenario(raw)


@st.composite
def policies(draw, n_workers: int):
    name = draw(st.sampled_from(BARRIER_POLICIES))
    if name == "backup":
        return name, {"backups": draw(st.integers(0, n_workers - 1))}
    if name == "ksync":
        return name, {"k": draw(st.one_of(st.none(), st.integers(1, n_workers)))}
    return name, draw(POLICY_PARAMS.get(name, st.just({})))


@pytest.mark.slow
@settings(max_examples=300)
@given(st.data())
def test_both_engines_give_the_same_trace_and_the_same_policy_calls(data):
    scenario = data.draw(scenarios())
    name, params = data.draw(policies(scenario.n_workers))
    cls = recording(POLICIES[name])
    a, b = cls(**params), cls(**params)
    assert_same_trace(run_simpy(scenario, a), run_vector(scenario, b))
    assert a.observed == b.observed  # the same measurements, step by step, in order
    assert b.splits.items() <= a.splits.items()  # the vector engine asks only at block starts
    assert sorted(a.splits) == list(range(scenario.workload.total_steps))
    assert pickle.loads(pickle.dumps(b.observed[-1])) == a.observed[-1]


BUCKETED = {"kind": "ring", "latency_s": 1e-5, "bandwidth_gbps": 1, "buckets_mb": 0.25}


@pytest.mark.parametrize("network", [None, BUCKETED], ids=["plain", "buckets"])
def test_ties_at_the_barrier_keep_the_lowest_indexed_worker_on_both_engines(network):
    # Identical deterministic workers finish together: ksync(1) keeps worker 0's gradient only.
    s = build_scenario(
        scenario_dict([{"count": 4, "overhead_s": 0.01, "per_sample_s": 0.001}], steps_per_epoch=3, epochs=2,
                      network=network, gradient_mb=1.0)
    )  # fmt: skip
    traces = [simulate(s, KSync(k=1), engine=engine_named(engine)) for engine in ("simpy", "vector")]
    for trace in traces:
        assert np.array_equal(trace.per_step("included"), np.tile([True, False, False, False], (6, 1)))
        assert np.all(trace.per_step("compute_s") == trace.per_step("compute_s")[:, :1])  # all finished
    assert_same_trace(*traces)


@pytest.mark.parametrize("scenario", ["workstation", "paper", "shared-cluster", "mixed-gpus"])
def test_builtin_scenarios_give_the_same_trace_under_every_barrier_policy(scenario):
    s = load_scenario(scenario, ["workload.epochs=2", *EFFICIENT])
    for name in BARRIER_POLICIES:
        assert_same_trace(simulate(s, s.named_policy(name)), simulate(s, s.named_policy(name), engine=VectorEngine()))


@pytest.mark.slow
def test_long_run_with_frequent_failures_and_shared_episodes():
    workers = [
        {
            "count": 6,
            "overhead_s": 0.01,
            "per_sample_s": 0.001,
            "noise": {"dist": "lognormal", "sigma": 0.1},
            "slowdown": {"every_s": 1.0, "duration_s": 0.5, "factor": 2.0, "group": "a"},
            "failure": {"mtbf_s": 2.0, "repair_s": 0.3},
        },
        {
            "count": 3,
            "overhead_s": 0.02,
            "per_sample_s": 0.002,
            "max_batch": 40,
            "slowdown": {"every_s": 0.7, "duration_s": 0.2, "factor": 1.5},
        },
    ]
    raw = scenario_dict(workers, global_batch=180, steps_per_epoch=25, epochs=8)
    raw["workload"]["efficiency"] = {"noise_scale": [[0, 50], [200, 5000]], "base_batch": 64}
    s = build_scenario(raw)
    for name in BARRIER_POLICIES:
        simpy_trace = simulate(s, s.named_policy(name))
        assert_same_trace(simpy_trace, simulate(s, s.named_policy(name), engine=VectorEngine()))
    assert not simpy_trace.up.all() and (simpy_trace.slowdown > 1).any()  # the run did meet both


@pytest.mark.slow
@settings(max_examples=150)
@given(st.data())
def test_async_on_both_engines_gives_the_same_trace(data):
    # generated scenarios: failures, episodes and shared links take the event loop, the rest
    # the merged update times; both must be the SimPy engine's trace
    scenario = data.draw(scenarios())
    assert_same_trace(simulate(scenario, Async()), simulate(scenario, Async(), engine=VectorEngine()))


@pytest.mark.parametrize("noise", [{"dist": "lognormal", "sigma": 0.3}, {"dist": "constant", "value": 1.0}])
def test_async_without_events_is_merged_update_times_and_a_tie_goes_to_the_event_loop(noise):
    from hetsim.engines.vector_async import run_vector_async
    from hetsim.model.draws import StepDraws
    from hetsim.model.workers import WorkerStreams

    workers = [{"count": 3, "overhead_s": 0.01, "per_sample_s": 0.001, "noise": noise},
               {"count": 2, "overhead_s": 0.02, "per_sample_s": 0.002, "noise": noise}]  # fmt: skip
    s = build_scenario(scenario_dict(workers, global_batch=100, steps_per_epoch=20, epochs=3, gradient_mb=1.0,
                                     network={"kind": "ring", "latency_s": 1e-5, "bandwidth_gbps": 10}))  # fmt: skip
    policy = make_policy("async")
    policy.reset(s.n_workers, 100, s.hints(), s.run_hint())
    merged = run_vector_async(s, policy, WorkerStreams.spawn(s.seed, s.workers), StepDraws(s.seed, s.workers))
    tied = noise["dist"] == "constant"  # identical deterministic workers finish together
    assert (merged is None) == tied
    if merged is not None:
        assert_same_trace(simulate(s, Async()), merged)
    assert_same_trace(simulate(s, Async()), simulate(s, Async(), engine=VectorEngine()))


def test_auto_picks_vector_for_every_policy():
    assert engine_for(None, Dynamic()).name == "vector"
    assert engine_for(None, Async()).name == "vector"
    assert engine_for(SimPyEngine(), Dynamic()).name == "simpy"
    assert engine_named("auto") is None and engine_named("simpy").name == "simpy"  # a file's, the command line's
    with pytest.raises(ConfigError, match=r"^engine: unknown engine 'numba' \(known: simpy, vector, auto\)$"):
        engine_named("numba")
    assert set(ENGINES) == {"simpy", "vector"}


def test_sweep_files_take_an_engine_and_cells_give_the_same_rows_on_each():
    from hetsim.engines import engine_choices
    from hetsim.sweep.run import expand, run_cell
    from hetsim.sweep.spec import load_sweep

    raw = {
        "name": "t",
        "base": "workstation",
        "policies": ["dynamic", "async"],
        "replications": 2,
        "grid": {"workload.epochs": [1]},
    }
    assert load_sweep(raw).engine == "auto" and "engine" not in load_sweep(raw).to_dict()
    rows = {}
    for engine in engine_choices():
        spec = load_sweep({**raw, "engine": engine}) if engine != "vector" else None
        if spec is None:  # vector refuses async: run only the barrier policy there
            spec = load_sweep({**raw, "policies": ["dynamic"], "engine": engine})
        assert load_sweep(spec.to_dict()).engine == engine
        rows[engine] = [run_cell(spec, cell)[1] for cell in expand(spec)]
    assert rows["simpy"] == rows["auto"] and rows["simpy"][0] == rows["vector"][0]
    with pytest.raises(ConfigError, match="engine"):
        load_sweep({**raw, "engine": "gpu"})


def test_cli_simulate_gives_the_same_summaries_on_either_engine(capsys):
    from hetsim.cli.main import main

    out = {}
    for engine in ("simpy", "vector"):
        assert (
            main(
                [
                    "simulate",
                    "workstation",
                    "--policy",
                    "equal,dynamic,ksync",
                    "--set",
                    "workload.epochs=1",
                    "--json",
                    "--engine",
                    engine,
                ]
            )
            == 0
        )
        out[engine] = capsys.readouterr().out
    assert out["simpy"] == out["vector"]


def test_draws_fetched_in_small_chunks_give_the_same_trace(monkeypatch):
    import hetsim.model.draws as draws

    workers = [
        {
            "count": 3,
            "overhead_s": 0.01,
            "per_sample_s": 0.001,
            "noise": {"dist": "gamma", "shape": 4.0, "scale": 0.25},
            "delay": {"dist": "exponential", "mean": 0.01},
            "failure": {"mtbf_s": 1.0, "repair_s": 0.2},
            "shared_noise": {"group": "host", "dist": "lognormal", "sigma": 0.3, "persistence": 0.6},
        },
        {
            "count": 2,
            "overhead_s": 0.02,
            "per_sample_s": 0.002,
            "noise": {"dist": "lognormal", "sigma": 0.1, "persistence": 0.9},
            "slowdown": {"every_s": 0.5, "duration_s": 0.3, "factor": 2.0},
            "shared_noise": {"group": "host", "dist": "lognormal", "sigma": 0.3, "persistence": 0.6},
        },
        {"overhead_s": 0.01, "per_sample_s": 0.003, "noise": {"dist": "empirical", "samples": [0.9, 1.1]}},
    ]
    s = build_scenario(scenario_dict(workers, global_batch=100, steps_per_epoch=7, epochs=5))
    expected = {name: simulate(s, s.named_policy(name)) for name in ("dynamic", "ksync", "adaptive")}
    monkeypatch.setattr(draws, "CHUNK_ELEMENTS", 12)  # one tile per buffer
    for name, trace in expected.items():
        assert_same_trace(trace, simulate(s, s.named_policy(name)))
        assert_same_trace(trace, simulate(s, s.named_policy(name), engine=VectorEngine()))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["adaptive", "goodput"])
def test_adaptive_blocks_guessed_ahead_and_cut_at_a_change_give_the_same_trace(name):
    # 64 workers, two speeds, noise: the split changes now and then, so blocks are guessed
    # ahead and some are cut where the policy re-split; the steps after a cut are recomputed.
    common = {"noise": {"dist": "lognormal", "sigma": 0.05}, "delay": {"dist": "exponential", "mean": 0.002}}
    workers = [{"count": 48, "overhead_s": 0.01, "per_sample_s": 0.001, **common},
               {"count": 16, "overhead_s": 0.02, "per_sample_s": 0.002, **common}]  # fmt: skip
    network = {"kind": "constant", "time_s": 0.05}  # a fixed cost per step: goodput grows its batch
    raw = scenario_dict(workers, global_batch=2048, steps_per_epoch=50, epochs=6, network=network)
    raw["workload"]["efficiency"] = {"noise_scale": [[0, 500], [200, 20000]], "base_batch": 2048}
    s = build_scenario(raw)
    cls = recording(POLICIES[name])
    a, b = cls(hysteresis=0.05), cls(hysteresis=0.05)
    simpy_trace = run_simpy(s, a)
    assert_same_trace(simpy_trace, run_vector(s, b))
    assert a.observed == b.observed
    assert b.cut > 0 and len(b.splits) < s.workload.total_steps / 2  # cut blocks, and long ones
    batches = set(simpy_trace.per_step("local_batch").sum(axis=1).tolist())
    assert len(batches) == (1 if name == "adaptive" else 3)  # goodput's batch moved twice
