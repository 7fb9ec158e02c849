"""How long ``export-trace`` takes and how large its file is near the size bound.

    python benchmarks/bench_export_trace.py [--workers 16] [--steps 15000] [--rounds 3]

Simulates ``equal`` on the shared cluster (slowdown episodes, a failing worker) resized to
``--workers`` workers and ``--steps`` steps (default: about 1,000,000 events, the bound,
:data:`hetsim.traces.chrome.MAX_EVENTS`), then times laying it out and writing the JSON (no
process start, no import) in each round. Prints JSON: events, bytes per event, the file's MB,
and the seconds' mean, median and 90th percentile over rounds.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import Parser, count, entry, stats

from hetsim.policies import Equal
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from hetsim.traces.chrome import ExportRun, check_size, lay_out, write_chrome


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=count, default=16)
    ap.add_argument("--steps", type=count, default=15000)
    ap.add_argument("--rounds", type=count, default=3)
    args = ap.parse_args(argv)
    half = args.workers // 2
    scenario = load_scenario("shared-cluster", [
        f"workers.0.count={half - 1}", f"workers.2.count={args.workers - half}", "workload.global_batch=1024",
        f"workload.dataset_size={1024 * args.steps}", "workload.epochs=1"])  # fmt: skip
    trace = simulate(scenario, Equal())
    run = ExportRun(trace, tuple(w.name for w in scenario.workers), scenario.buckets(), "benchmark")
    seconds, events, size = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        for _ in range(args.rounds):
            start = time.perf_counter()
            laid = [lay_out(run, np.arange(len(trace.step)))]
            events = check_size(laid, "all steps")
            write_chrome(out, laid, {"source": "benchmark"})
            seconds.append(time.perf_counter() - start)
            size = out.stat().st_size
    print(json.dumps({"workers": args.workers, "steps": args.steps, "events": events,
                      "bytes_per_event": size / events, "file_mb": size / 1e6, "seconds": stats(seconds),
                      "rounds": seconds}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    entry(main, "bench_export_trace")
