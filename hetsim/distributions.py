"""Random-time models: the plug-ins behind a worker's ``noise`` and ``delay``.

Each distribution declares its parameters (:class:`~hetsim.params.Param`, named as in
scenario files) and checks them when it is built, and has four hooks:

* ``sample(rng, size=None)`` draws from a ``numpy.random.Generator`` (never global state);
  a scalar when ``size`` is None. A draw of ``size=k`` yields exactly the numbers of ``k``
  scalar draws in a row, so an engine may batch its draws without changing the trace.
* ``mean()``, ``var()`` and ``cdf(t)``, exact, for the analytic models.

``atoms()`` gives the support of a purely discrete distribution (None otherwise), which the
analytic models use to integrate exactly. ``to_dict()`` gives back the scenario-file form
(``{"dist": "gamma", "shape": 2, ...}``). A new distribution subclasses :class:`Distribution`
and registers with ``hetsim.registry.DISTRIBUTIONS``; nothing else needs an edit.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from scipy import stats

from hetsim.errors import ConfigError
from hetsim.params import FrozenPlugIn, Param, file_path
from hetsim.registry import DISTRIBUTIONS


class Distribution(FrozenPlugIn):
    """Base class: a non-negative random time (or factor)."""

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        raise NotImplementedError

    def mean(self) -> float:
        raise NotImplementedError

    def var(self) -> float:
        raise NotImplementedError

    def cdf(self, t: Any) -> Any:
        raise NotImplementedError

    def atoms(self) -> np.ndarray | None:
        """The support points of a purely discrete distribution; None when it has a continuous part."""
        return None

    def log_normal_sigma(self) -> float | None:
        """``sigma`` when the distribution is ``exp(N(-sigma^2/2, sigma^2))`` (a mean-1 lognormal
        factor, which can persist through its log and is integrated in closed form); else None."""
        return None

    @property
    def is_constant(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"dist": self.name, **self.param_values()}


@DISTRIBUTIONS.register
class Constant(Distribution):
    """Always ``value``; consumes no random numbers."""

    name: ClassVar[str] = "constant"
    params = (Param("value", low=0.0, doc="the value"),)
    value: float

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        return self.value if size is None else np.full(size, self.value)

    def mean(self) -> float:
        return self.value

    def var(self) -> float:
        return 0.0

    def cdf(self, t: Any) -> Any:
        return np.where(np.asarray(t) >= self.value, 1.0, 0.0)

    def atoms(self) -> np.ndarray:
        return np.array([self.value])

    @property
    def is_constant(self) -> bool:
        return True


def _exponential_cdf(t: Any, mean_s: float) -> Any:
    t = np.asarray(t, dtype=float)
    return np.where(t > 0, -np.expm1(-np.maximum(t, 0) / mean_s), 0.0)


@DISTRIBUTIONS.register
class Exponential(Distribution):
    name: ClassVar[str] = "exponential"
    params = (Param("mean", low=0.0, low_open=True, attr="mean_s", doc="the mean"),)
    mean_s: float

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        return rng.exponential(self.mean_s, size)

    def mean(self) -> float:
        return self.mean_s

    def var(self) -> float:
        return self.mean_s**2

    def cdf(self, t: Any) -> Any:
        return _exponential_cdf(t, self.mean_s)


@DISTRIBUTIONS.register
class ShiftedExponential(Distribution):
    """``shift + Exp(mean)``: a minimum time plus an exponential tail."""

    name: ClassVar[str] = "shifted_exponential"
    params = (
        Param("shift", low=0.0, doc="the smallest value"),
        Param("mean", low=0.0, low_open=True, attr="mean_s", doc="the mean of the exponential part"),
    )
    shift: float
    mean_s: float

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        return self.shift + rng.exponential(self.mean_s, size)

    def mean(self) -> float:
        return self.shift + self.mean_s

    def var(self) -> float:
        return self.mean_s**2

    def cdf(self, t: Any) -> Any:
        return _exponential_cdf(np.asarray(t, dtype=float) - self.shift, self.mean_s)


@DISTRIBUTIONS.register
class Gamma(Distribution):
    name: ClassVar[str] = "gamma"
    params = (
        Param("shape", low=0.0, low_open=True, doc="the shape k"),
        Param("scale", low=0.0, low_open=True, doc="the scale theta (mean k theta)"),
    )
    shape: float
    scale: float

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        return rng.gamma(self.shape, self.scale, size)

    def mean(self) -> float:
        return self.shape * self.scale

    def var(self) -> float:
        return self.shape * self.scale**2

    def cdf(self, t: Any) -> Any:
        return stats.gamma.cdf(t, a=self.shape, scale=self.scale)


@DISTRIBUTIONS.register
class LogNormal(Distribution):
    """Lognormal with mean exactly 1: ``exp(N(-sigma^2/2, sigma^2))``; a multiplicative noise."""

    name: ClassVar[str] = "lognormal"
    params = (Param("sigma", low=0.0, doc="the standard deviation of the log"),)
    sigma: float

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        return rng.lognormal(-0.5 * self.sigma**2, self.sigma, size)

    def mean(self) -> float:
        return 1.0

    def var(self) -> float:
        return math.expm1(self.sigma**2)

    def cdf(self, t: Any) -> Any:
        if self.sigma == 0:
            return np.where(np.asarray(t) >= 1.0, 1.0, 0.0)
        return stats.lognorm.cdf(t, s=self.sigma, scale=math.exp(-0.5 * self.sigma**2))

    def atoms(self) -> np.ndarray | None:
        return np.array([1.0]) if self.sigma == 0 else None

    def log_normal_sigma(self) -> float:
        return self.sigma

    @property
    def is_constant(self) -> bool:
        return self.sigma == 0


@DISTRIBUTIONS.register
class Uniform(Distribution):
    name: ClassVar[str] = "uniform"
    params = (
        Param("low", low=0.0, doc="the smallest value"),
        Param("high", low="low", low_open=True, doc="the largest value (above low)"),
    )
    low: float
    high: float

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        return rng.uniform(self.low, self.high, size)

    def mean(self) -> float:
        return 0.5 * (self.low + self.high)

    def var(self) -> float:
        return (self.high - self.low) ** 2 / 12.0

    def cdf(self, t: Any) -> Any:
        return stats.uniform.cdf(t, loc=self.low, scale=self.high - self.low)


@DISTRIBUTIONS.register
class Empirical(Distribution):
    """Resampling (with replacement) of measured values, given inline (``samples``) or read
    from ``file`` (one number per line or comma-separated; ``#`` starts a comment). A relative
    ``file`` is read from the current folder; the config factory first makes it relative to the
    scenario file's folder."""

    name: ClassVar[str] = "empirical"
    params = (
        Param("samples", "numbers", default=None, doc="the measured values"),
        Param("file", "path", default=None, doc="a file of measured values instead"),
    )
    samples: tuple[float, ...] | None
    file: str | None
    _sorted: np.ndarray

    def validate(self) -> None:
        if self.file is not None and self.samples is None:
            values = _read_numbers(file_path(self.file))
        elif self.samples is not None and self.file is None:
            values = self.samples
        else:
            raise ConfigError("", "empirical needs exactly one of 'samples' or 'file'")
        object.__setattr__(self, "_sorted", np.sort(np.asarray(values, dtype=float)))

    def _key(self) -> tuple[Any, ...]:
        where = None if self.file is None else file_path(self.file).resolve()  # one name, two folders: two files
        return (*super()._key(), where)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        idx = rng.integers(0, len(self._sorted), size)
        return self._sorted[idx]

    def mean(self) -> float:
        return float(self._sorted.mean())

    def var(self) -> float:
        return float(self._sorted.var())

    def cdf(self, t: Any) -> Any:
        return np.searchsorted(self._sorted, t, side="right") / len(self._sorted)

    def atoms(self) -> np.ndarray:
        return np.unique(self._sorted)

    @property
    def is_constant(self) -> bool:
        return bool(self._sorted[0] == self._sorted[-1])

    def to_dict(self) -> dict[str, Any]:
        if self.file is not None:
            return {"dist": self.name, "file": self.file}
        return {"dist": self.name, "samples": list(self._sorted if self.samples is None else self.samples)}


def _read_numbers(path: Path) -> tuple[float, ...]:
    """The numbers of a measurement file, checked like inline samples."""
    if not path.is_file():
        raise ConfigError("file", f"no such file: {path}")
    try:
        with warnings.catch_warnings():  # NumPy warns on an empty file; the check below says it plainly
            warnings.simplefilter("ignore")
            values = np.loadtxt(path, dtype=float, delimiter=",", ndmin=1, comments="#")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("file", f"not a column of numbers: {exc}") from None
    return Param("file", "numbers").check(values.ravel().tolist())
