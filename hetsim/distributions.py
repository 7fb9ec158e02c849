"""Random-time models: the plug-ins behind a worker's ``noise`` and ``delay``.

Each distribution is a small frozen dataclass with four hooks:

* ``sample(rng, size=None)`` draws from a ``numpy.random.Generator`` (never global state);
  a scalar when ``size`` is None. A draw of ``size=k`` yields exactly the numbers of ``k``
  scalar draws in a row, so an engine may batch its draws without changing the trace.
* ``mean()``, ``var()`` and ``cdf(t)``, exact, for the analytic models.

``to_dict()`` gives back the scenario-file form (``{"dist": "gamma", "shape": 2, ...}``).
The name -> class table :data:`DISTRIBUTIONS` is what the config factory looks kinds up in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
from scipy import stats

ArrayOrFloat = Any


@dataclass(frozen=True)
class Distribution:
    """Base class: a non-negative random time (or factor)."""

    kind: ClassVar[str] = ""

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        raise NotImplementedError

    def mean(self) -> float:
        raise NotImplementedError

    def var(self) -> float:
        raise NotImplementedError

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        raise NotImplementedError

    @property
    def is_constant(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dist": self.kind}
        for name in (f.name for f in fields(self) if f.init):
            out[name] = getattr(self, name)
        return out


@dataclass(frozen=True)
class Constant(Distribution):
    """Always ``value``; consumes no random numbers."""

    kind: ClassVar[str] = "constant"
    value: float = 0.0

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        return self.value if size is None else np.full(size, self.value)

    def mean(self) -> float:
        return self.value

    def var(self) -> float:
        return 0.0

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        return np.where(np.asarray(t) >= self.value, 1.0, 0.0)

    @property
    def is_constant(self) -> bool:
        return True


@dataclass(frozen=True)
class Exponential(Distribution):
    kind: ClassVar[str] = "exponential"
    mean_s: float = 1.0

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        return rng.exponential(self.mean_s, size)

    def mean(self) -> float:
        return self.mean_s

    def var(self) -> float:
        return self.mean_s**2

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        t = np.asarray(t, dtype=float)
        return np.where(t > 0, -np.expm1(-np.maximum(t, 0) / self.mean_s), 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"dist": self.kind, "mean": self.mean_s}


@dataclass(frozen=True)
class ShiftedExponential(Distribution):
    """``shift + Exp(mean)``: a minimum time plus an exponential tail."""

    kind: ClassVar[str] = "shifted_exponential"
    shift: float = 0.0
    mean_s: float = 1.0

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        return self.shift + rng.exponential(self.mean_s, size)

    def mean(self) -> float:
        return self.shift + self.mean_s

    def var(self) -> float:
        return self.mean_s**2

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        t = np.asarray(t, dtype=float) - self.shift
        return np.where(t > 0, -np.expm1(-np.maximum(t, 0) / self.mean_s), 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"dist": self.kind, "shift": self.shift, "mean": self.mean_s}


@dataclass(frozen=True)
class Gamma(Distribution):
    kind: ClassVar[str] = "gamma"
    shape: float = 1.0
    scale: float = 1.0

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        return rng.gamma(self.shape, self.scale, size)

    def mean(self) -> float:
        return self.shape * self.scale

    def var(self) -> float:
        return self.shape * self.scale**2

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        return stats.gamma.cdf(t, a=self.shape, scale=self.scale)


@dataclass(frozen=True)
class LogNormal(Distribution):
    """Lognormal with mean exactly 1: ``exp(N(-sigma^2/2, sigma^2))``; a multiplicative noise."""

    kind: ClassVar[str] = "lognormal"
    sigma: float = 0.0

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        return rng.lognormal(-0.5 * self.sigma**2, self.sigma, size)

    def mean(self) -> float:
        return 1.0

    def var(self) -> float:
        return math.expm1(self.sigma**2)

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        if self.sigma == 0:
            return np.where(np.asarray(t) >= 1.0, 1.0, 0.0)
        return stats.lognorm.cdf(t, s=self.sigma, scale=math.exp(-0.5 * self.sigma**2))

    @property
    def is_constant(self) -> bool:
        return self.sigma == 0


@dataclass(frozen=True)
class Uniform(Distribution):
    kind: ClassVar[str] = "uniform"
    low: float = 0.0
    high: float = 1.0

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        return rng.uniform(self.low, self.high, size)

    def mean(self) -> float:
        return 0.5 * (self.low + self.high)

    def var(self) -> float:
        return (self.high - self.low) ** 2 / 12.0

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        return stats.uniform.cdf(t, loc=self.low, scale=self.high - self.low)


@dataclass(frozen=True)
class Empirical(Distribution):
    """Resampling (with replacement) of measured values, given inline or read from ``file``."""

    kind: ClassVar[str] = "empirical"
    samples: tuple[float, ...] = ()
    file: str | None = None
    _sorted: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_sorted", np.sort(np.asarray(self.samples, dtype=float)))

    def sample(self, rng: np.random.Generator, size: int | None = None) -> ArrayOrFloat:
        idx = rng.integers(0, len(self._sorted), size)
        return self._sorted[idx]

    def mean(self) -> float:
        return float(self._sorted.mean())

    def var(self) -> float:
        return float(self._sorted.var())

    def cdf(self, t: ArrayOrFloat) -> ArrayOrFloat:
        return np.searchsorted(self._sorted, t, side="right") / len(self._sorted)

    @property
    def is_constant(self) -> bool:
        return bool(self._sorted[0] == self._sorted[-1])

    def to_dict(self) -> dict[str, Any]:
        if self.file is not None:
            return {"dist": self.kind, "file": self.file}
        return {"dist": self.kind, "samples": list(self.samples)}


DISTRIBUTIONS: dict[str, type[Distribution]] = {
    cls.kind: cls for cls in (Constant, Exponential, ShiftedExponential, Gamma, LogNormal, Uniform, Empirical)
}
