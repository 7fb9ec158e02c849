"""The all-reduce overlapped with the backward pass in DDP-style buckets: the plan, the
recurrence on hand-computed steps, both engines, the analysis, and bad input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.analysis.analytic import predict
from hetsim.core.errors import ConfigError
from hetsim.engines import VectorEngine
from hetsim.model.network import Buckets, ConstantNetwork, ParameterServer, Ring
from hetsim.policies import Async, Equal, KSync
from hetsim.run.metrics import mean_ci, step_times, summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario
from tests.helpers import scenario_dict
from tests.test_vector_engine import assert_same_trace, policies, scenarios

PAPER_BUCKETS = ["network.buckets_mb=25", "network.first_bucket_mb=1"]  # DDP's defaults


def two_workers(network: dict, *, backward_fraction: float | None = 0.5, epochs: int = 1, **workload) -> dict:
    """Two deterministic workers, 1 s and 2 s per step (one sample each), a 4 MB gradient."""
    workers = [{"overhead_s": 0.0, "per_sample_s": 1.0}, {"overhead_s": 0.0, "per_sample_s": 2.0}]
    raw = scenario_dict(workers, global_batch=2, steps_per_epoch=3, epochs=epochs, network=network, gradient_mb=4.0)
    if backward_fraction is not None:
        raw["workload"]["backward_fraction"] = backward_fraction
    raw["workload"].update(workload)
    return raw


def steps_of(raw: dict, policy: str = "equal", **params) -> list[tuple[float, float]]:
    """(step time, comm_s) of every step, the same on both engines."""
    s = build_scenario(raw)
    trace = simulate(s, s.named_policy(policy, params))
    assert_same_trace(trace, simulate(s, s.named_policy(policy, params), engine=VectorEngine()))
    return list(zip(step_times(trace).tolist(), trace.per_step("comm_s")[:, 0].tolist()))


# ----------------------------------------------------------------------------- the plan


def test_bucket_sizes_follow_ddp():
    assert Ring(1e-5, 10, 25).bucket_sizes(102.2) == pytest.approx((1.0, 25.0, 25.0, 25.0, 25.0, 1.2))
    assert Ring(1e-5, 10, 25, 1).bucket_sizes(51.0) == (1.0, 25.0, 25.0)  # no sliver of rounding error
    assert Ring(1e-5, 10, 0.5).bucket_sizes(2.0) == (0.5, 0.5, 0.5, 0.5)  # first bucket min(1, buckets_mb)
    assert ConstantNetwork(0.3, 2.0, 3.0).bucket_sizes(3.0) == (3.0,)
    assert Ring(1e-5, 10).bucket_sizes(102.2) is None and Ring(1e-5, 10).buckets(2, 102.2, 0.5) is None


def test_bucket_times_are_the_networks_cost_of_each_bucket():
    ring = Ring(1e-5, 10, 25)
    b = ring.buckets(4, 60.0, 0.6)
    assert b is not None and b.sizes_mb == (1.0, 25.0, 25.0, 9.0)
    assert b.times_s == tuple(ring.allreduce_s(4, s) for s in b.sizes_mb)
    assert b.backlog == pytest.approx((0.6 * 59 / 60, 0.6 * 34 / 60, 0.6 * 9 / 60, 0.0)) and b.backlog[-1] == 0.0
    ps = ParameterServer(1e-4, 2, 0.3, 0.05)
    assert ps.buckets(3, 1.0, 0.5).times_s == pytest.approx([ps.allreduce_s(3, s) for s in (0.05, 0.3, 0.3, 0.3, 0.05)])
    constant = ConstantNetwork(0.4, 1.0).buckets(2, 4.0, 0.5)  # a share of time_s per bucket, by size
    assert constant is not None and constant.times_s == pytest.approx((0.1, 0.1, 0.1, 0.1))
    # one worker exchanges nothing, but a constant network's time is a step's whatever the size (the update)
    assert ConstantNetwork(0.4, 1.0).buckets(1, 4.0, 0.5).times_s == pytest.approx((0.1, 0.1, 0.1, 0.1))


@pytest.mark.parametrize("times", [(0.1, 0.1, 0.1, 0.1), (0.5, 0.01, 0.3, 0.02), (0.0, 0.0, 0.0), (0.2,)])
def test_the_envelope_is_the_end_function(times):
    k = len(times)
    backlog = tuple(0.7 * (1 - (j + 1) / k) for j in range(k - 1)) + (0.0,)
    b = Buckets((1.0,) * k, times, backlog)
    pieces = b.envelope()
    assert pieces[0][0] == 0.0 and pieces[-1][1] == 1.0
    grid = np.linspace(0.0, 5.0, 2001)
    value, at = float(b.end_s(0.0)), 0.0
    for (lo, slope), (hi, _) in zip(pieces, [*pieces[1:], (5.0, 0.0)]):
        inside = grid[(grid >= lo) & (grid <= hi)]
        assert np.allclose(b.end_s(inside), value + slope * (inside - at), atol=1e-12)
        value, at = value + slope * (hi - at), hi


# ----------------------------------------------------------------------------- hand-computed steps


# Workers of 1 s and 2 s, backward_fraction 0.5, four 1 MB buckets: worker i's bucket k is ready
# at compute_i * (1 - 0.5 * (1 - (k + 1) / 4)): worker 1 (the slower) at 1.25, 1.5, 1.75, 2.0.
@pytest.mark.parametrize(
    "time_s,step",
    [
        (0.4, 2.1),  # buckets of 0.1 s: each waits for its gradient; only the last is exposed
        (2.0, 3.25),  # buckets of 0.5 s: from the first on, each waits for the one before
    ],
)
def test_the_recurrence_on_deterministic_workers(time_s, step):
    network = {"kind": "constant", "time_s": time_s, "buckets_mb": 1.0, "first_bucket_mb": 1.0}
    for step_s, comm_s in steps_of(two_workers(network)):
        assert step_s == pytest.approx(step, abs=1e-12)
        assert comm_s == pytest.approx(step - 2.0, abs=1e-12)  # exposed after the slower worker's finish
    without = steps_of(two_workers({"kind": "constant", "time_s": time_s}))
    assert without[0] == pytest.approx((2.0 + time_s, time_s))


def test_the_recurrence_on_a_ring_by_hand():
    lat, gbps = 1e-3, 0.016  # 2 MB/s per link; with two workers a bucket of s MB takes lat + s / 2 s
    network = {"kind": "ring", "latency_s": lat, "bandwidth_gbps": gbps, "buckets_mb": 1.5, "first_bucket_mb": 0.5}
    a = [lat * 2 + s / 2 for s in (0.5, 1.5, 1.5, 0.5)]  # sizes 0.5, 1.5, 1.5, 0.5 MB of 4
    ready = [2.0 * (1 - 0.75 * (1 - c / 4)) for c in (0.5, 2.0, 3.5, 4.0)]  # backward_fraction 0.75
    end = -np.inf
    for r, t in zip(ready, a):
        end = max(end, r) + t
    step, comm = steps_of(two_workers(network, backward_fraction=0.75))[0]
    assert step == pytest.approx(end, abs=1e-12) and comm == pytest.approx(end - 2.0, abs=1e-12)


def test_first_k_waits_for_the_buckets_of_the_gradients_it_keeps():
    # ksync k=1 keeps the 1 s worker: its buckets are ready at 0.625, 0.75, 0.875, 1.0.
    network = {"kind": "constant", "time_s": 0.4, "buckets_mb": 1.0, "first_bucket_mb": 1.0}
    for step_s, comm_s in steps_of(two_workers(network), "ksync", k=1):
        assert step_s == pytest.approx(1.1, abs=1e-12) and comm_s == pytest.approx(0.1, abs=1e-12)


def test_a_worker_without_samples_or_starting_late_changes_the_recurrence_as_stated():
    b = ConstantNetwork(0.4, 1.0).buckets(3, 4.0, 0.5)
    finish, compute = np.array([1.0, 2.0]), np.array([1.0, 2.0])
    alone = float(b.exposed_s(finish, compute))
    assert alone == pytest.approx(0.1)
    # a worker that sits out is ready at the start: it delays nothing
    assert float(b.exposed_s(np.append(finish, 0.0), np.append(compute, 0.0))) == alone
    # a worker that began 1.5 s late (stalled by a failure) produces its buckets 1.5 s later
    late = float(b.exposed_s(np.array([1.0, 2.0, 2.5]), np.array([1.0, 2.0, 1.0])))
    assert late == pytest.approx(max(2.0 + 0.1, 2.5) + 0.1 - 2.5)
    # only the waited-for workers count
    assert float(b.exposed_s(np.array([1.0, 9.0]), compute, np.array([True, False]))) == pytest.approx(0.1)


def test_without_buckets_nothing_changes():
    raw = two_workers({"kind": "constant", "time_s": 0.4}, backward_fraction=None)
    base = build_scenario(raw)
    raw["workload"]["backward_fraction"] = 0.3  # no effect without buckets
    assert build_scenario(raw).buckets() is None
    for policy in ("equal", "ksync"):
        assert simulate(base, base.named_policy(policy)) == simulate(build_scenario(raw), base.named_policy(policy))
    assert base.to_dict()["network"] == {"kind": "constant", "time_s": 0.4}
    assert "backward_fraction" not in base.to_dict()["workload"]


def test_scenario_files_round_trip_the_bucket_keys():
    s = load_scenario("paper", [*PAPER_BUCKETS, "workload.backward_fraction=0.7"])
    again = load_scenario(s.to_dict())
    assert again == s and again.buckets() == s.buckets()
    assert s.to_dict()["network"]["buckets_mb"] == 25.0 and s.workload.backward_share == 0.7
    assert load_scenario("paper", ["network.buckets_mb=25"]).workload.backward_share == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- the paper's set-up


def test_paper_equal_step_is_shorter_by_the_overlapped_part_and_never_below_the_slowest_compute():
    plain = load_scenario("paper", ["workload.epochs=2"])
    bucketed = load_scenario("paper", ["workload.epochs=2", *PAPER_BUCKETS])
    a, b = simulate(plain, Equal(), engine=VectorEngine()), simulate(bucketed, Equal(), engine=VectorEngine())
    assert np.array_equal(a.compute_s, b.compute_s)  # the same draws
    slowest = b.per_step("compute_s").max(axis=1)
    with_, without = step_times(b), step_times(a)
    comm = b.per_step("comm_s")[:, 0]
    assert np.all(with_ >= slowest + bucketed.buckets().times_s[-1] - 1e-12)  # the last bucket follows it
    assert np.allclose(without - with_, plain.allreduce_s() - comm, atol=1e-12)  # the overlapped part
    assert np.all(comm < 0.25 * plain.allreduce_s())  # most of the 0.082 s all-reduce is hidden
    assert_same_trace(b, simulate(bucketed, Equal()))


def test_paper_equal_step_by_hand_on_deterministic_workers():
    s = load_scenario("paper", ["workers.0.noise.sigma=0", "workers.1.noise.sigma=0", *PAPER_BUCKETS])
    slowest = 0.02 + 128 * 0.00383 + 0.1
    sizes = (1.0, 25.0, 25.0, 25.0, 25.0, 102.2 - 101.0)
    end, done = -np.inf, 0.0
    for size in sizes:
        done += size
        ready = slowest - slowest * (2 / 3) * (1 - done / 102.2)
        end = max(end, ready) + 2e-5 + size * 1e6 / 1.25e9  # ring, two workers, 10 Gbit/s
    trace = simulate(load_scenario(s.to_dict(), ["workload.epochs=1"]), Equal())
    assert step_times(trace) == pytest.approx(np.full(trace.n_steps, end), abs=1e-12)
    assert predict(s, Equal()).mean_step_s == pytest.approx(end, abs=1e-12)


# ----------------------------------------------------------------------------- the analysis


@pytest.mark.parametrize("policy,params", [("equal", {}), ("ksync", {"k": 1}), ("optimal", {})])
def test_the_prediction_is_exact_on_deterministic_workers(policy, params):
    network = {"kind": "constant", "time_s": 2.0, "buckets_mb": 1.0, "first_bucket_mb": 1.0}
    s = build_scenario(two_workers(network, epochs=2))
    p = predict(s, s.named_policy(policy, params))
    steps = step_times(simulate(s, s.named_policy(policy, params)))
    assert p.steady_step_s == pytest.approx(steps[-1], abs=1e-12)
    assert p.mean_step_s == pytest.approx(steps.mean(), abs=1e-12)
    assert p.p95_step_s == pytest.approx(np.percentile(steps, 95), abs=1e-12)


@pytest.mark.parametrize("policy,params", [("equal", {}), ("dynamic", {}), ("ksync", {"k": 2}), ("backup", {})])
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_the_prediction_agrees_with_long_noisy_runs(policy, params):
    s = load_scenario(
        "paper", [*PAPER_BUCKETS, "workload.epochs=100", "workers.0.noise.sigma=0.1", "network.bandwidth_gbps=2"]
    )
    p = predict(s, s.named_policy(policy, params))
    ci = mean_ci(step_times(simulate(s, s.named_policy(policy, params), engine=VectorEngine())), batches=50)
    assert abs(p.mean_step_s - ci.mean) <= 4 * ci.half_width + 1e-4, (p.mean_step_s, ci)
    assert (
        p.mean_step_s
        < predict(load_scenario("paper", ["network.bandwidth_gbps=2"]), s.named_policy(policy, params)).mean_step_s
    )


@pytest.mark.slow
def test_a_continuous_barrier_is_integrated():
    workers = [{"overhead_s": 0.01, "per_sample_s": 0.002, "noise": {"dist": "gamma", "shape": 4.0, "scale": 0.25},
                "delay": {"dist": "uniform", "low": 0.0, "high": 0.05}, "count": 3}]  # fmt: skip
    network = {"kind": "ring", "latency_s": 1e-4, "bandwidth_gbps": 1, "buckets_mb": 2.0}
    s = build_scenario(scenario_dict(workers, global_batch=96, steps_per_epoch=100, epochs=100, network=network,
                                     gradient_mb=10.0))  # fmt: skip
    p = predict(s, Equal())
    ci = mean_ci(step_times(simulate(s, Equal(), engine=VectorEngine())))
    assert abs(p.mean_step_s - ci.mean) <= 4 * ci.half_width, (p.mean_step_s, ci)
    assert p.p95_step_s == pytest.approx(summarize(simulate(s, Equal(), engine=VectorEngine())).p95_step_s, rel=0.01)


# ----------------------------------------------------------------------------- engines, async, bad input


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from([0.1, 0.5, 1.0]))
def test_both_engines_agree_for_any_backward_fraction(data, fraction):
    scenario = data.draw(scenarios())
    if scenario.buckets() is None:
        scenario = replace(scenario, network=Ring(1e-5, 1, 0.25))
    scenario = replace(scenario, workload=replace(scenario.workload, backward_fraction=fraction))
    name, params = data.draw(policies(scenario.n_workers))
    assert simulate(scenario, scenario.named_policy(name, params)) == simulate(
        scenario, scenario.named_policy(name, params), engine=VectorEngine()
    )


def test_async_ignores_buckets():
    plain = load_scenario("workstation", ["workload.epochs=1"])
    bucketed = load_scenario(
        "workstation", ["workload.epochs=1", f"network.buckets_mb={plain.workload.gradient_mb / 4}"]
    )
    assert bucketed.buckets() is not None
    assert simulate(plain, Async()) == simulate(bucketed, Async())
    assert predict(plain, Async()) == predict(bucketed, Async())


BAD = [
    (["network.buckets_mb=200"], "network.buckets_mb: 200 MB is larger than the gradient"),
    (["network.buckets_mb=25", "network.first_bucket_mb=103"], "network.first_bucket_mb: 103 MB is larger"),
    (["network.buckets_mb=0"], "network.buckets_mb: must be > 0, got 0"),
    (["network.buckets_mb=-25"], "network.buckets_mb: must be > 0, got -25"),
    (["network.buckets_mb=25", "network.first_bucket_mb=0"], "network.first_bucket_mb: must be > 0, got 0"),
    (["network.first_bucket_mb=1"], "network.first_bucket_mb: needs buckets_mb"),
    (["network.buckets_mb=1e-6"], "network.buckets_mb: cuts the gradient into more than"),
    (["network.buckets_mb=25", "workload.backward_fraction=0"], "workload.backward_fraction: must be in (0, 1]"),
    (["workload.backward_fraction=1.5"], "workload.backward_fraction: must be in (0, 1], got 1.5"),
    (["workload.gradient_mb=0", "network.buckets_mb=25"], "network.buckets_mb: 25 MB is larger than the gradient"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_bucket_input_names_the_field(overrides, message, capsys):
    from hetsim.cli.main import main

    with pytest.raises(ConfigError):
        load_scenario("paper", overrides)
    argv = ["simulate", "paper", "--policy", "equal"]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hetsim: error: ") and message in err, err


def test_backward_fraction_one_is_allowed():
    assert load_scenario("paper", ["network.buckets_mb=25", "workload.backward_fraction=1"]).buckets() is not None


def test_ties_decided_by_rounding_at_the_absolute_time_are_redone_step_by_step(monkeypatch):
    # 0.1 + 0.2 s and 0.3 s: apart at the first step's start (0), equal once start + compute
    # rounds them together, so from then on ksync(1) keeps the tie's lowest-indexed worker, 0 (as
    # the SimPy engine does), not the one with the smaller compute time.
    workers = [{"overhead_s": 0.1, "per_sample_s": 0.2}, {"overhead_s": 0.0, "per_sample_s": 0.3}]
    network = {"kind": "constant", "time_s": 0.05, "buckets_mb": 0.25}
    s = build_scenario(scenario_dict(workers, global_batch=2, steps_per_epoch=20, epochs=2, network=network,
                                     gradient_mb=1.0))  # fmt: skip
    redone = []
    exposed_s = Buckets.exposed_s
    monkeypatch.setattr(
        Buckets, "exposed_s", lambda self, f, c, w=None: redone.append(np.ndim(f) == 1) or exposed_s(self, f, c, w)
    )
    vector = simulate(s, KSync(k=1), engine=VectorEngine())
    assert any(redone)  # the vector engine met a tie it had assumed the other way
    assert vector == simulate(s, KSync(k=1))  # to the last bit
    included = vector.per_step("included")
    assert included[0].tolist() == [False, True] and np.all(included[1:] == [True, False])
