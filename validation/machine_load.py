"""The machine's load while a benchmark runs: a daemon thread that samples, every ``period_s``,
the 1-minute load average and the fraction of all CPUs busy since the last sample (Linux
``/proc/loadavg`` and ``/proc/stat``), tagged with what was running. The samples go into the
benchmark's results, so a figure says how busy the machine was when it was measured.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot (0, 0 where /proc/stat is missing)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return 0.0, 0.0
    values = [float(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    return sum(values) - idle, sum(values)


def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return float("nan")


@dataclass
class LoadSampler:
    """Samples ``(seconds since start, load average, busy CPU fraction, label)`` until stopped."""

    period_s: float = 1.0
    label: str = ""
    samples: list[tuple[float, float, float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LoadSampler:
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        t0 = time.monotonic()
        busy0, total0 = _cpu_times()
        while not self._stop.wait(self.period_s):
            busy, total = _cpu_times()
            fraction = (busy - busy0) / (total - total0) if total > total0 else float("nan")
            busy0, total0 = busy, total
            self.samples.append((time.monotonic() - t0, _loadavg(), fraction, self.label))

    def rows(self) -> list[dict[str, float | str]]:
        return [{"t_s": t, "loadavg_1m": a, "cpu_busy": b, "running": lab} for t, a, b, lab in self.samples]
