"""Peak memory of a large run summarised as it goes (``--trace none``).

    cd benchmarks && python trace_none_memory.py [--workers 10000] [--steps 100000] [--policy dynamic]

The scenario of ``bench_engines.py`` (a quarter of the workers 2x slower, lognormal noise, an
exponential delay, 100 steps per epoch) at the given size, run once on the vector engine with
:func:`hetsim.run.simulate.simulate_summary`. Prints one JSON object: the size, the seconds, the
worker-steps per second, this process's peak resident memory in MB (``VmHWM``, reset when the
run starts: a process inherits its parent's peak through fork and exec; ``ru_maxrss`` where
/proc cannot say) and the Summary. With its trace the same run would need ``workers x steps`` rows (10^9 at the
defaults, about 60 GB).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from bench_common import Parser, count, entry
from bench_engines import scenario

from hetsim.engines import VectorEngine
from hetsim.run.simulate import simulate_summary

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def reset_peak() -> None:
    """Reset this process's peak resident memory to what it holds now (Linux; else nothing)."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        pass


def peak_mb() -> float:
    """This process's peak resident memory since :func:`reset_peak`, in MB."""
    try:
        line = next(ln for ln in STATUS.read_text().splitlines() if ln.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=count, default=10_000)
    parser.add_argument("--steps", type=count, default=100_000)
    parser.add_argument("--policy", default="dynamic")
    args = parser.parse_args()
    s = scenario(args.workers, args.steps, args.policy)
    reset_peak()
    start = time.perf_counter()
    summary = simulate_summary(s, s.named_policy(args.policy), engine=VectorEngine())
    seconds = time.perf_counter() - start
    worker_steps = args.workers * s.workload.total_steps
    out = {
        "command": " ".join(sys.argv),
        "workers": args.workers,
        "steps": s.workload.total_steps,
        "seconds": seconds,
        "worker_steps_per_s": worker_steps / seconds,
        "peak_rss_mb": peak_mb(),
        "summary": {k: v for k, v in summary.to_dict().items() if k not in ("utilization", "final_batches")},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    entry(main, "trace_none_memory")
