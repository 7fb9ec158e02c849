"""Networks that agree across policies: the parameter server's link is one shared resource under
``async`` too (the engine queues updates for it, the analysis solves the closed queueing network),
and the two-level ``hierarchical`` all-reduce over the workers' nodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hetsim.analysis.analytic_async as analytic_async
from hetsim.analysis.analytic import predict
from hetsim.analysis.analytic_async import link_rates
from hetsim.cli.analysis import compare
from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.engines import VectorEngine
from hetsim.model.network import ConstantNetwork, Hierarchical, ParameterServer, Ring
from hetsim.policies import Async
from hetsim.run.metrics import apply_times, summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario
from tests.helpers import scenario_dict
from tests.test_vector_engine import assert_same_trace, policies, scenarios

# 16 workers (8 fast, 8 slow), 100 MB gradients, one 10 Gbit/s parameter server: the link carries
# one update's push and pull in 2 * 100 MB / 1.25 GB/s = 0.16 s, 6.25 updates (200 samples) a second.
PS16 = ["network.kind=ps", "network.bandwidth_gbps=10", "workload.gradient_mb=100",
        "workers.0.count=8", "workers.1.count=8", "workload.epochs=2"]  # fmt: skip
UNSATURATED = [*PS16[:2], "workload.gradient_mb=1", *PS16[3:]]  # offered load 0.43 of the link


def ps16(overrides: list[str] = PS16):
    return load_scenario("workstation", overrides)


# ----------------------------------------------------------------------------- the network models


def test_only_the_parameter_server_has_a_shared_link():
    assert ParameterServer(1e-4, 10).update_link_s(100.0) == pytest.approx(2e-4 + 2 * 100e6 / 1.25e9)
    assert ParameterServer(1e-4, 10).exchange_s(100.0) == ParameterServer(1e-4, 10).update_link_s(100.0)
    for net in (Ring(1e-5, 10), ConstantNetwork(0.3), Hierarchical()):
        assert net.update_link_s(100.0) is None
        assert net.exchange_s(100.0) == net.allreduce_s(2, 100.0)  # today's uncontended exchange


def test_hierarchical_allreduce_on_hand_computed_layouts():
    net = Hierarchical(1e-6, 800, 1e-5, 80)  # 100 GB/s inside a node, 10 GB/s between nodes
    # two nodes of four: 2*3 intra messages, 2*3/4 of 100 MB inside, 2 inter messages, 2*1/2 of 100 MB between
    assert net.allreduce_s(8, 100.0, (4, 4)) == pytest.approx(6e-6 + 1.5e-3 + 2e-5 + 1e-2, rel=1e-12)
    # unequal nodes: the largest node's intra-node phases (m = 3), k = 2 nodes
    assert net.allreduce_s(4, 100.0, (3, 1)) == pytest.approx(4e-6 + 4 / 3 * 1e-3 + 2e-5 + 1e-2, rel=1e-12)
    # three nodes of two: m = 2, k = 3
    assert net.allreduce_s(6, 30.0, (2, 2, 2)) == pytest.approx(2e-6 + 0.3e-3 + 4e-5 + 4 / 3 * 3e-3, rel=1e-12)
    # one node is a ring of the intra-node links; one worker per node a ring of the inter-node ones
    assert net.allreduce_s(5, 100.0, (5,)) == pytest.approx(Ring(1e-6, 800).allreduce_s(5, 100.0), rel=1e-12)
    assert net.allreduce_s(3, 100.0, (1, 1, 1)) == pytest.approx(Ring(1e-5, 80).allreduce_s(3, 100.0), rel=1e-12)
    assert net.allreduce_s(3, 100.0) == net.allreduce_s(3, 100.0, (1, 1, 1))  # no layout: a node each
    assert net.allreduce_s(1, 100.0, (1,)) == 0.0 and net.allreduce_s(2, 0.0, (2,)) == pytest.approx(2e-6)


def test_the_scenario_lays_workers_out_on_their_nodes():
    workers = [
        {"count": 3, "overhead_s": 0.01, "per_sample_s": 0.001, "node": "a"},
        {"count": 2, "overhead_s": 0.02, "per_sample_s": 0.002, "node": "b"},
        {"overhead_s": 0.02, "per_sample_s": 0.002, "node": "a"},
    ]
    net = {"kind": "hierarchical", "latency_s": 1e-6, "bandwidth_gbps": 800, "inter_latency_s": 1e-5,
           "inter_bandwidth_gbps": 80, "buckets_mb": 40}  # fmt: skip
    s = build_scenario(scenario_dict(workers, global_batch=60, network=net, gradient_mb=100.0))
    assert s.nodes == (4, 2)
    assert s.allreduce_s() == pytest.approx(6e-6 + 1.5e-3 + 2e-5 + 1e-2, rel=1e-12)
    buckets = s.buckets()
    assert buckets is not None and buckets.sizes_mb == (1.0, 40.0, 40.0, 19.0)
    assert buckets.times_s == tuple(s.network.allreduce_s(6, mb, (4, 2)) for mb in buckets.sizes_mb)
    assert load_scenario(s.to_dict()) == s and s.to_dict()["workers"][2]["node"] == "a"
    ring = build_scenario({**scenario_dict(workers, global_batch=60, gradient_mb=100.0), "network": {"kind": "ring"}})
    assert ring.nodes is None  # a network that does not use nodes is not given them


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_both_engines_agree_on_hierarchical_scenarios(data):
    scenario = data.draw(scenarios())
    if scenario.network.name != "hierarchical":
        raw = scenario.to_dict()
        raw["network"] = {"kind": "hierarchical", "inter_latency_s": 1e-4, "inter_bandwidth_gbps": 1}
        for k, w in enumerate(raw["workers"]):
            w["node"] = data.draw(st.sampled_from(["x", "y"]), label=f"node of group {k}")
        scenario = build_scenario(raw)
    name, params = data.draw(policies(scenario.n_workers))
    assert_same_trace(
        simulate(scenario, scenario.named_policy(name, params)),
        simulate(scenario, scenario.named_policy(name, params), engine=VectorEngine()),
    )


BAD = [
    (["network.kind=hierarchical"], "workers.0.node: missing (the hierarchical network needs every worker's node)"),
    (["network.kind=hierarchical", "workers.0.node=a"],
     "workers.1.node: missing (the hierarchical network needs every worker's node)"),
    (["workers.0.node=3"], "workers.0.node: must be a string, got int (3)"),
    (["network.kind=hierarchical", "network.inter_bandwidth_gbps=0"],
     "network.inter_bandwidth_gbps: must be > 0, got 0"),
    (["network.kind=hierarchical", "network.inter_latency_s=-1"], "network.inter_latency_s: must be >= 0, got -1"),
    (["network.kind=ring", "network.inter_latency_s=1"], "network.inter_latency_s: unknown parameter"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "message"), BAD)
def test_bad_network_and_node_input_is_one_line(overrides, message, capsys):
    with pytest.raises(ConfigError) as caught:
        load_scenario("workstation", overrides)
    assert str(caught.value).startswith(message)
    args = ["simulate", "workstation", "--policy", "equal"] + [a for o in overrides for a in ("--set", o)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hetsim: error: {message}") and err.count("\n") == 1


# ----------------------------------------------------------------------------- async on a shared link


def test_async_updates_queue_for_the_parameter_servers_link():
    # Two deterministic workers, 1 s of compute each; the link takes 0.5 s per update. Both
    # finish at 1 s: worker 0 holds the link until 1.5 s, worker 1 queues and is done at 2 s.
    workers = [{"count": 2, "overhead_s": 0.0, "per_sample_s": 0.5}]
    net = {"kind": "ps", "latency_s": 0.0, "bandwidth_gbps": 0.032}  # 2 * 1 MB / 4 MB/s = 0.5 s
    s = build_scenario(scenario_dict(workers, global_batch=4, steps_per_epoch=2, epochs=1, network=net, gradient_mb=1))
    trace = simulate(s, Async())
    assert trace.worker.tolist() == [0, 1, 0, 1]
    assert trace.start_s.tolist() == pytest.approx([0.0, 0.0, 1.5, 2.0])
    assert trace.comm_s.tolist() == pytest.approx([0.5, 1.0, 0.5, 0.5])  # queued 0.5 s, then 0.5 s on the link
    assert apply_times(trace).tolist() == pytest.approx([1.5, 2.0, 3.0, 3.5])
    assert (trace.wait_s == 0).all()  # queueing is in comm_s; wait_s stays the time down


def test_async_on_a_saturated_parameter_server_never_outruns_its_link():
    s = ps16()
    link_s = s.network.update_link_s(s.workload.gradient_mb)
    capacity = s.workload.global_batch / s.n_workers / link_s  # samples a second the link carries
    trace = simulate(s, Async())
    summary = summarize(trace)
    assert summary.throughput_sps <= capacity
    assert summary.throughput_sps == pytest.approx(capacity, rel=1e-3)  # and it is busy all the time
    assert np.diff(apply_times(trace)).min() >= link_s * (1 - 1e-9)
    assert (trace.comm_s >= link_s * (1 - 1e-9)).all()
    p = predict(s, Async())
    assert p.throughput_sps <= capacity * (1 + 1e-12)
    assert p.throughput_sps == pytest.approx(summary.throughput_sps, rel=0.01)


@pytest.mark.parametrize("overrides", [PS16, UNSATURATED], ids=["saturated", "unsaturated"])
def test_analyze_agrees_with_async_simulation_on_a_parameter_server(overrides):
    s = ps16(overrides)
    c = compare(s, Async())
    assert c.relative_error is not None and abs(c.relative_error) < 0.01, c
    summary = summarize(simulate(s, Async()))
    assert c.prediction is not None
    assert c.prediction.throughput_sps == pytest.approx(summary.throughput_sps, rel=0.01)


def test_the_bard_schweitzer_fallback_also_agrees_there(monkeypatch):
    exact = {name: predict(ps16(o), Async()).mean_step_s for name, o in (("sat", PS16), ("low", UNSATURATED))}
    monkeypatch.setattr(analytic_async, "MAX_STATES", 0)
    for name, o in (("sat", PS16), ("low", UNSATURATED)):
        assert predict(ps16(o), Async()).mean_step_s == pytest.approx(exact[name], rel=0.005)


def test_the_link_model_in_limits():
    # one worker never queues: it renews every Z + S
    rates, residence = link_rates(np.array([0.3]), 0.1)
    assert rates == pytest.approx([1 / 0.4]) and residence == pytest.approx([0.1])
    # a link much faster than the compute: the renewal rate of uncontended exchanges
    z = np.array([1.0, 1.0, 2.0, 3.0])
    rates, _ = link_rates(z, 1e-6)
    assert rates == pytest.approx(1 / (z + 1e-6), rel=1e-5)
    # a slow link: saturated, every update waits alike, and the link carries exactly 1/S
    rates, residence = link_rates(z, 10.0)
    assert rates.sum() == pytest.approx(0.1, rel=1e-12) and np.ptp(residence) == 0.0


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.0, 5.0), min_size=1, max_size=12),
    st.floats(1e-3, 2.0),
    st.booleans(),
)
def test_the_link_model_never_exceeds_the_links_or_a_workers_own_rate(think, service, fallback):
    old = analytic_async.MAX_STATES
    analytic_async.MAX_STATES = 0 if fallback else old
    try:
        z = np.array(think)
        rates, residence = link_rates(z, service)
    finally:
        analytic_async.MAX_STATES = old
    assert rates.sum() * service <= 1 + 1e-9
    assert np.all(rates <= 1 / (z + service) * (1 + 1e-9)) and np.all(residence >= service * (1 - 1e-9))


@pytest.mark.parametrize("service", [0.3, 1.1, 1.7])
def test_workers_that_never_think_queue_the_whole_population_at_the_link(service):
    rates, residence = link_rates(np.zeros(5), service)  # every update waits for the other four
    assert np.allclose(residence, 5 * service, rtol=1e-12) and np.allclose(rates, 1 / (5 * service), rtol=1e-12)


def test_async_without_a_shared_link_is_the_renewal_rate():
    for net in ("ring", "constant", "hierarchical"):
        raw = load_scenario("workstation", ["workload.epochs=1"]).to_dict()
        raw["network"] = {"kind": net, "time_s": 0.01} if net == "constant" else {"kind": net}
        for w in raw["workers"]:
            w["node"] = "box"
        s = build_scenario(raw)
        exchange = s.network.allreduce_s(2, s.workload.gradient_mb)
        trace = simulate(s, Async())
        assert (trace.comm_s == exchange).all()
        assert predict(s, Async()).allreduce_s == exchange
