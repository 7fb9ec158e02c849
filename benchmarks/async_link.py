"""Async on a parameter server: the link's capacity, the simulation and the queueing prediction.

    python benchmarks/async_link.py [--json] [--epochs 10] [--sigma SIGMA]

The ``workstation`` scenario grown to 16 workers (8 a100-class, E[X] = 37 ms at 32 samples; 8
t4-class, 149 ms) on one 10 Gbit/s parameter server (``network.kind = "ps"``), for gradients
from 100 MB (the link saturated many times over) down to 0.2 MB. For each size: the link's time
per update ``S = 2 latency + 2 bytes / bandwidth``, the offered load ``S sum_i 1/(E[X_i] + S)``
(above 1 the link cannot keep up), the link's capacity in samples a second, the simulated
``async`` throughput and mean time between updates, and ``hetsim.analysis.analytic.predict``'s, with its
error; the same with Bard–Schweitzer alone (``analytic_async.MAX_STATES = 0``). ``--sigma``
sets both groups' lognormal noise (default: the scenario's, 0.05 and 0.08).
"""

from __future__ import annotations

import json
from typing import Any

from bench_common import Parser, count, entry

import hetsim.analysis.analytic_async as analytic_async
from hetsim.analysis.analytic import predict
from hetsim.policies import Async
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario

SIZES_MB = (100.0, 10.0, 4.0, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.2)
PS16 = ["network.kind=ps", "network.bandwidth_gbps=10", "workers.0.count=8", "workers.1.count=8"]


def measure(gradient_mb: float, epochs: int, sigma: float | None) -> dict[str, Any]:
    overrides = [*PS16, f"workload.gradient_mb={gradient_mb}", f"workload.epochs={epochs}"]
    if sigma is not None:
        overrides += [f"workers.0.noise.sigma={sigma}", f"workers.1.noise.sigma={sigma}"]
    s = load_scenario("workstation", overrides)
    link_s = s.network.update_link_s(gradient_mb)
    assert link_s is not None
    sim = summarize(simulate(s, Async()))
    exact = predict(s, Async())
    states, analytic_async.MAX_STATES = analytic_async.MAX_STATES, 0
    try:
        schweitzer = predict(s, Async())
    finally:
        analytic_async.MAX_STATES = states
    batch = s.workload.global_batch // s.n_workers  # async's equal split (512 / 16)
    return {
        "gradient_mb": gradient_mb,
        "link_s": link_s,
        "offered_load": link_s * sum(1.0 / (w.expected_compute_s(batch) + link_s) for w in s.workers),
        "capacity_sps": batch / link_s,
        "simulated_sps": sim.throughput_sps,
        "predicted_sps": exact.throughput_sps,
        "simulated_step_s": sim.mean_step_s,
        "predicted_step_s": exact.mean_step_s,
        "error": exact.mean_step_s / sim.mean_step_s - 1.0,
        "schweitzer_error": schweitzer.mean_step_s / sim.mean_step_s - 1.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    ap.add_argument("--epochs", type=count, default=10, help="epochs of 97 steps (x 16 updates) per run")
    ap.add_argument("--sigma", type=float, default=None, help="lognormal noise of every worker")
    args = ap.parse_args(argv)
    rows = [measure(mb, args.epochs, args.sigma) for mb in SIZES_MB]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("gradient  link/update  load  capacity  simulated  predicted  sim step  pred step   error  Schweitzer")
    for r in rows:
        print(
            f"{r['gradient_mb']:6g} MB  {r['link_s'] * 1e3:8.3f} ms  {r['offered_load']:4.2f}  "
            f"{r['capacity_sps']:6.0f}/s  {r['simulated_sps']:7.0f}/s  {r['predicted_sps']:7.0f}/s  "
            f"{r['simulated_step_s'] * 1e3:5.3f} ms  {r['predicted_step_s'] * 1e3:6.3f} ms  "
            f"{r['error']:+6.2%}  {r['schweitzer_error']:+6.2%}"
        )
    return 0


if __name__ == "__main__":
    entry(main, "async_link")
