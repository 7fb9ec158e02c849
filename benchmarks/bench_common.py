"""What the benchmark scripts share: how repeated measurements are summarised.

Every figure a benchmark prints is summarised over repetitions as the README and
docs/benchmarks.md report it: mean, median and 90th percentile of single runs (never the best
run). Standard library only, so that a start-up benchmark can import it without importing numpy.
Run a benchmark from the repository root as ``python benchmarks/NAME.py``: its folder is then on
``sys.path`` and ``from bench_common import stats`` finds this module.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def stats(values: Iterable[float]) -> dict[str, float]:
    """Mean, median and 90th percentile of ``values`` (the percentile linear between order
    statistics, as numpy's default and ``statistics.quantiles(method="inclusive")``)."""
    x = [float(v) for v in values]
    if not x:
        raise ValueError("no measurements to summarise")
    p90 = statistics.quantiles(x, n=10, method="inclusive")[8] if len(x) > 1 else x[0]
    return {"mean": statistics.fmean(x), "median": statistics.median(x), "p90": p90}
