"""Cost models: a worker's noise-free compute time of one step as a function of its local batch.

A worker's step takes ``cost(b) * noise * slowdown + delay`` for ``b > 0`` samples (and nothing
for ``b = 0``). The cost is a plug-in, declared in a scenario as the worker's ``cost`` table
(``{ model = "hinge", floor_s = 0.03, ... }``); the keys ``overhead_s``/``per_sample_s`` of a
worker are the affine model. Every model is non-decreasing in the batch, which is what the
min-max split (:func:`hetsim.model.partition.min_max_split`) needs to be the exact optimum.

* ``affine``: ``overhead_s + per_sample_s * b``;
* ``hinge``: ``max(floor_s, overhead_s + per_sample_s * b)``: flat at small batches (a GPU
  that is not yet busy), linear at large ones (the line's intercept ``overhead_s`` may be below 0
  where the floor is above 0);
* ``table``: piecewise linear through measured ``(batch, seconds)`` points, given inline or in a
  CSV file of two columns; below the first point the first point's time (flat), beyond the last
  the last segment's slope;
* ``profile``: the ``table`` of a shipped device profile (Gavel's measurements of K80, P100 and
  V100 GPUs, ``hetsim/data/device-profiles``); its largest measured batch is the worker's
  ``max_batch`` unless the worker sets one.

A new model subclasses :class:`CostModel` (``time_s`` on arrays of batches, ``batch_within``
its inverse) and registers with ``hetsim.core.registry.COSTS``.
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.files import not_a_file
from hetsim.core.params import FrozenPlugIn, Param, file_path, written_path
from hetsim.core.registry import COSTS
from hetsim.model.nonnegative import first_invalid

PROFILE_FILE = "data/device-profiles/gavel/throughputs.csv"


def check_times(
    times_s: np.ndarray, batches: np.ndarray, names: Sequence[str], works: np.ndarray | None = None
) -> None:
    """Refuse a cost curve's time that is not a finite number >= 0 (a plug-in's), at the batches
    a split gives: the engines ask here (the scenario's load tried one sample and the global
    batch only). Per worker (``names``); ``works``: those with samples (None: all)."""
    found = first_invalid(times_s if works is None else np.where(works, times_s, 0.0))
    if found is not None:
        (i,) = found
        raise bad_time(names[i], float(times_s[i]), int(batches[i]))


def bad_time(name: str, time_s: float, batch: int) -> ConfigError:
    """The refusal of worker ``name``'s cost curve giving ``time_s`` at ``batch``."""
    return ConfigError("cost", f"worker {name}'s cost gave {time_s!r} s at batch {batch}: a time must be a finite "
                       "number >= 0")  # fmt: skip


class CostModel(FrozenPlugIn):
    """Base class: ``time_s(b)`` for ``b >= 1`` (arrays element-wise), non-decreasing in ``b``."""

    def time_s(self, batch: Any) -> Any:
        raise NotImplementedError

    def batch_within(self, time_s: float) -> float:
        """The largest (real) batch whose time is at most ``time_s``: 0 when no batch's time is
        that small (a fraction of a sample where the curve allows it: callers round down), ``inf``
        when the time never exceeds it."""
        raise NotImplementedError

    def affine_terms(self) -> tuple[float, float] | None:
        """``(overhead_s, per_sample_s)`` when the model is affine (the closed-form split applies)."""
        return None

    def max_batch(self) -> int | None:
        """The most samples the model knows the device can take (None: no limit known)."""
        return None

    def bends(self) -> tuple[float, ...]:
        """The batches where ``time_s`` changes slope, for a model linear between them: what a
        tabulation of the curve must keep (goodput's), since a chord across a bend misses it.
        None declared (the default): a tabulation's chords approximate the curve."""
        return ()

    def measured(self) -> tuple[float, float] | None:
        """The smallest and largest batch the curve rests on measurements at, for a curve read
        off measured points (outside them it is extrapolated); None for a formula (the default)."""
        return None

    def extrapolated(self, batch: float) -> str | None:
        """``below`` or ``beyond`` where ``batch`` lies outside the batches :meth:`measured` names
        (the curve's time there is its extrapolation); None inside them, or for a formula."""
        measured = self.measured()
        if measured is None:
            return None
        return "below" if batch < measured[0] else "beyond" if batch > measured[1] else None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.name, **self.file_values()}


@COSTS.register
class Affine(CostModel):
    name: ClassVar[str] = "affine"
    params = (
        Param("overhead_s", default=0.0, low=0.0, doc="fixed cost of a step with samples"),
        Param("per_sample_s", low=0.0, low_open=True, doc="cost of one sample"),
    )
    overhead_s: float
    per_sample_s: float

    def time_s(self, batch: Any) -> Any:
        return self.overhead_s + self.per_sample_s * batch

    def batch_within(self, time_s: float) -> float:
        return max((time_s - self.overhead_s) / self.per_sample_s, 0.0)

    def affine_terms(self) -> tuple[float, float]:
        return self.overhead_s, self.per_sample_s


@COSTS.register
class Hinge(CostModel):
    name: ClassVar[str] = "hinge"
    params = (
        Param("floor_s", low=0.0, doc="the least a step with samples takes"),
        Param("overhead_s", default=0.0, doc="the linear part's intercept (below 0 where the line is steep)"),
        Param("per_sample_s", low=0.0, low_open=True, doc="the linear part's slope"),
    )
    floor_s: float
    overhead_s: float
    per_sample_s: float

    def validate(self) -> None:
        # The line only counts above the kink, so its intercept may be below 0 (a device whose
        # time is flat and then grows faster than in proportion); the floor then keeps every
        # step's time above 0.
        if self.overhead_s < 0 and self.floor_s <= 0:
            below = f"must be > 0 where overhead_s is below 0 ({self.overhead_s:g})"
            raise ConfigError("floor_s", f"{below}, got {self.floor_s:g}")

    def time_s(self, batch: Any) -> Any:
        return np.maximum(self.floor_s, self.overhead_s + self.per_sample_s * np.asarray(batch, dtype=float))

    def batch_within(self, time_s: float) -> float:
        if time_s < self.floor_s:
            return 0.0
        return max((time_s - self.overhead_s) / self.per_sample_s, 0.0)

    def bends(self) -> tuple[float, ...]:
        kink = (self.floor_s - self.overhead_s) / self.per_sample_s
        return (kink,) if kink > 0 else ()


class _PiecewiseLinear(CostModel):
    """Shared by ``table`` and ``profile``: linear between points, flat before the first, the
    last segment's slope after the last."""

    _b: np.ndarray
    _t: np.ndarray

    def _set_points(self, batches: np.ndarray, times: np.ndarray) -> None:
        object.__setattr__(self, "_b", batches)
        object.__setattr__(self, "_t", times)

    def time_s(self, batch: Any) -> Any:
        b = np.asarray(batch, dtype=float)
        slope = (self._t[-1] - self._t[-2]) / (self._b[-1] - self._b[-2])
        inside = np.interp(b, self._b, self._t)
        return np.where(b > self._b[-1], self._t[-1] + slope * (b - self._b[-1]), inside)

    def batch_within(self, time_s: float) -> float:
        if time_s < self._t[0]:
            return 0.0
        slope = (self._t[-1] - self._t[-2]) / (self._b[-1] - self._b[-2])
        if time_s >= self._t[-1]:
            return float("inf") if slope == 0 else float(self._b[-1] + (time_s - self._t[-1]) / slope)
        k = int(np.searchsorted(self._t, time_s, side="right"))  # _t[k-1] <= time_s < _t[k]
        b0, b1, t0, t1 = self._b[k - 1], self._b[k], self._t[k - 1], self._t[k]
        return float(b0 + (time_s - t0) * (b1 - b0) / (t1 - t0))

    def points(self) -> list[list[float]]:
        return [[float(b), float(t)] for b, t in zip(self._b, self._t)]

    def bends(self) -> tuple[float, ...]:
        return tuple(float(b) for b in self._b)

    def measured(self) -> tuple[float, float]:
        return float(self._b[0]), float(self._b[-1])


@COSTS.register
class Table(_PiecewiseLinear):
    """Measured points: ``points = [[b, seconds], ...]`` or ``file = "curve.csv"`` (two columns,
    batch and seconds; ``#`` starts a comment). At least two points, batches increasing, times
    non-decreasing."""

    name: ClassVar[str] = "table"
    params = (
        Param("points", "points", default=None, attr="points_", doc="[[batch, seconds], ...]"),
        Param("file", "path", default=None, doc="a CSV file of batch,seconds lines instead"),
    )
    points_: tuple[tuple[float, float], ...] | None
    file: str | None

    def validate(self) -> None:
        if (self.points_ is None) == (self.file is None):
            raise ConfigError("", "a table needs exactly one of 'points' or 'file'")
        field = "points" if self.points_ is not None else "file"
        pairs = self.points_ if self.points_ is not None else _read_pairs(file_path(self.file or ""))
        batches, times = (np.array(column, dtype=float) for column in zip(*pairs)) if pairs else (np.empty(0),) * 2
        if batches.size < 2:
            raise ConfigError(field, f"needs at least two points, got {batches.size}")
        if not (np.isfinite(batches).all() and np.isfinite(times).all()):
            raise ConfigError(field, f"every batch and time must be a finite number, got {pairs}")
        if times[0] <= 0:
            raise ConfigError(field, f"a step with samples must take some time, got {times[0]:g} s at {batches[0]:g}")
        if (batches <= 0).any() or (np.diff(batches) <= 0).any():
            raise ConfigError(field, f"batch sizes must be positive and increasing, got {batches.tolist()}")
        if (np.diff(times) < 0).any():
            raise ConfigError(field, f"times must not decrease as the batch grows, got {times.tolist()}")
        self._set_points(batches, times)

    def to_dict(self) -> dict[str, Any]:
        if self.file is not None:
            return {"model": self.name, "file": written_path(self.file)}
        return {"model": self.name, "points": self.points()}


@COSTS.register
class Profile(_PiecewiseLinear):
    """A shipped device profile: ``device`` and ``workload`` as ``python -m hetsim profiles``
    lists them. Step time is ``1 / steps_per_s`` at each measured batch; where a measurement is
    faster than a smaller batch's (noise), the curve is the least-squares non-decreasing fit
    (isotonic regression), so it is a valid cost curve."""

    name: ClassVar[str] = "profile"
    params = (
        Param("device", "string", blank=False, doc="a GPU of the profiles (k80, p100, v100)"),
        Param("workload", "string", blank=False, doc="a model of the profiles (ResNet-18, ResNet-50, ...)"),
    )
    device: str
    workload: str

    def validate(self) -> None:
        profiles = device_profiles()
        if self.device not in {d for d, _ in profiles}:
            raise ConfigError("device", f"unknown device {self.device!r} (known: {', '.join(profile_devices())})")
        if (self.device, self.workload) not in profiles:
            known = ", ".join(w for d, w in profiles if d == self.device)
            raise ConfigError("workload", f"no profile of {self.workload!r} on {self.device} (known: {known})")
        batches, times = profiles[self.device, self.workload]
        self._set_points(batches, times)

    def max_batch(self) -> int:
        return int(self._b[-1])


@cache
def device_profiles() -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(device, workload) -> (batch sizes, non-decreasing step times in seconds), from the
    shipped Gavel measurements."""
    text = resources.files("hetsim").joinpath(PROFILE_FILE).read_text(encoding="utf-8")
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row in csv.DictReader(text.splitlines()):
        point = (float(row["batch_size"]), 1.0 / float(row["steps_per_s"]))
        rows.setdefault((row["gpu"], row["model"]), []).append(point)
    from scipy.optimize import isotonic_regression  # here: scipy.optimize is slow to import

    out = {}
    for key, pairs in rows.items():
        batches, times = (np.array(c) for c in zip(*sorted(pairs)))
        out[key] = (batches, isotonic_regression(times).x)
    return out


def profile_devices() -> list[str]:
    return sorted({d for d, _ in device_profiles()})


def _read_pairs(path: Path) -> list[tuple[float, float]]:
    """The ``batch,seconds`` lines of a measured curve."""
    if not path.is_file():
        raise ConfigError("file", f"{not_a_file(path)}: {path}")
    try:
        with warnings.catch_warnings():  # NumPy warns on an empty file; the caller says it plainly
            warnings.simplefilter("ignore")
            values = np.loadtxt(path, dtype=float, delimiter=",", ndmin=2, comments="#")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("file", f"not two columns of numbers (batch,seconds): {exc}") from None
    if values.size and values.shape[1] != 2:
        raise ConfigError("file", f"needs two columns (batch,seconds), got {values.shape[1]}")
    return [(float(b), float(t)) for b, t in values]
