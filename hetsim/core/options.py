"""Values of command-line options owned by modules below the command line: the trace modes (and
:class:`TraceMode`, what ``--trace`` and ``--sample-every`` keep) and the speedup metrics
(:mod:`hetsim.sweep.results`'s), the scheduler timeout (:mod:`hetsim.sweep.run`'s).

They are defined here, in a module that imports only the standard library and the core's checks,
and their owners import them from here: ``hetsim.cli.main`` needs them to build its parser
(choices, defaults, help text) and ``simulate`` its trace mode, and importing the owners would
import numpy, pandas and simpy into every command line, ``--help`` and a mistyped option included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_COUNT, Param

TRACE_MODES = ("full", "sample", "none")  # simulate/sweep --trace
DEFAULT_SAMPLE_EVERY = 10  # simulate/sweep --sample-every
SPEEDUP_METRICS = {  # --metric (plan --objective): the Summary field compared, and whether more of it is better
    "throughput": ("throughput_sps", True),
    "time_to_target": ("time_to_target_s", False),
}
MAX_JOBS = 256  # sweep --jobs: local processes or LocalCluster workers; more would fork beyond any machine here
DEFAULT_CONNECT_TIMEOUT_S = 5.0  # sweep --connect-timeout-s: how long to try reaching a Dask scheduler


@dataclass(frozen=True)
class TraceMode:
    """What a sweep keeps of its plotted cell's traces (``sweep --trace``): ``full`` every step,
    ``sample`` each ``every``-th, ``none`` nothing (no traces.parquet, no trace plots). The cells
    keep summaries whatever the mode. It is recorded in meta.json because it decides what
    ``--resume`` and ``report`` write: a second mode in one folder would mix two kinds of plot."""

    mode: str = "full"
    every: int = DEFAULT_SAMPLE_EVERY  # read with mode "sample" only

    @property
    def kept(self) -> int:
        """The ``every`` of :func:`hetsim.run.simulate.simulate_sampled` and ``check_kept_size``:
        1 (every step), k (each k-th) or 0 (none)."""
        return {"full": 1, "sample": self.every, "none": 0}[self.mode]

    def describe(self) -> str:
        """The options that give this mode."""
        return f"--trace {self.mode}" + (f" --sample-every {self.every}" if self.mode == "sample" else "")

    def to_meta(self) -> dict[str, Any]:
        return {"trace": self.mode, **({"sample_every": self.every} if self.mode == "sample" else {})}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], where: str) -> TraceMode:
        """The mode meta.json (``where``) records; ``full`` where it records none (a folder made
        before ``--trace`` existed)."""
        try:
            mode = Param("trace", "choice", choices=TRACE_MODES).check(meta.get("trace", "full"))
            every = meta.get("sample_every", DEFAULT_SAMPLE_EVERY)
            every = Param("sample_every", "integer", low=1, high=MAX_COUNT).check(every)
        except ConfigError as exc:
            raise ConfigError(where, str(exc)) from None
        return cls(mode, int(every))
