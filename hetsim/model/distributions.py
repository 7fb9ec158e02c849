"""Random-time models: the plug-ins behind a worker's ``noise`` and ``delay``.

Each distribution declares its parameters (:class:`~hetsim.core.params.Param`, named as in
scenario files) and checks them when it is built, and has four hooks:

* ``ppf(u)``, the quantile function, element-wise on uniforms in [0, 1). Every draw is one
  uniform through it (inversion): the engines turn each worker's counter-keyed uniforms into
  its draws (:mod:`hetsim.model.draws`), and ``sample(rng, size=None)`` does the same with a
  ``numpy.random.Generator``'s (never global state; a scalar when ``size`` is None), so a
  draw of ``size=k`` is exactly ``k`` scalar draws and consumes ``k`` numbers.
* ``mean()``, ``var()`` and ``cdf(t)``, exact, for the analytic models.

``atoms()`` gives the support of a purely discrete distribution (None otherwise), which the
analytic models use to integrate exactly. ``to_dict()`` gives back the scenario-file form
(``{"dist": "gamma", "shape": 2, ...}``). A new distribution subclasses :class:`Distribution`
and registers with ``hetsim.core.registry.DISTRIBUTIONS``; nothing else needs an edit.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.files import not_a_file
from hetsim.core.params import FrozenPlugIn, Param, file_path, written_path
from hetsim.core.registry import DISTRIBUTIONS


class Distribution(FrozenPlugIn):
    """Base class: a non-negative random time (or factor)."""

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """The quantiles at ``u`` (an array of uniforms in [0, 1)), element-wise."""
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        """Draws by inversion of ``rng``'s uniforms: a float, or an array of ``size``."""
        x = self.ppf(rng.random(1 if size is None else size))
        return float(x[0]) if size is None else x

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
        return {"dist": self.name, **self.file_values()}


@DISTRIBUTIONS.register
class Constant(Distribution):
    """Always ``value``."""

    name: ClassVar[str] = "constant"
    params = (Param("value", low=0.0, doc="the value"),)
    value: float

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.full(np.shape(u), self.value)

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

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return -self.mean_s * np.log1p(-u)

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

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return self.shift - self.mean_s * np.log1p(-u)

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

    def ppf(self, u: np.ndarray) -> np.ndarray:
        from scipy import special  # imported where drawn (slow to import): config alone needs none

        return special.gammaincinv(self.shape, u) * self.scale

    def mean(self) -> float:
        return self.shape * self.scale

    def var(self) -> float:
        return self.shape * self.scale**2

    def cdf(self, t: Any) -> Any:
        from scipy import special  # not scipy.stats: much slower to import, for two closed-form CDFs

        x = np.asarray(t, dtype=float) / self.scale
        below = np.where(np.isnan(x), np.nan, 0.0)  # the CDF is 0 at and below 0 (gammainc is nan there)
        return np.where(x > 0, special.gammainc(self.shape, np.maximum(x, 0.0)), below)[()]


@DISTRIBUTIONS.register
class LogNormal(Distribution):
    """Lognormal with mean exactly 1: ``exp(N(-sigma^2/2, sigma^2))``; a multiplicative noise."""

    name: ClassVar[str] = "lognormal"
    params = (Param("sigma", low=0.0, doc="the standard deviation of the log"),)
    sigma: float

    def ppf(self, u: np.ndarray) -> np.ndarray:
        if self.sigma == 0:  # exactly 1 (sigma * ndtri(0) would be 0 * -inf)
            return np.ones(np.shape(u))
        from scipy import special

        x = special.ndtri(u)
        x *= self.sigma
        x -= 0.5 * self.sigma**2
        return np.exp(x, out=x)

    def mean(self) -> float:
        return 1.0

    def var(self) -> float:
        return math.expm1(self.sigma**2)

    def cdf(self, t: Any) -> Any:
        if self.sigma == 0:
            return np.where(np.asarray(t) >= 1.0, 1.0, 0.0)
        # scipy.stats.lognorm.cdf's own arithmetic (ndtr(log(t / scale) / sigma), 0 for t <= 0),
        # without its argument checks, which cost many times the sum in the analysis's quadratures
        from scipy import special

        x = np.asarray(t, dtype=float) / math.exp(-0.5 * self.sigma**2)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(x > 0, special.ndtr(np.log(x) / self.sigma), np.where(np.isnan(x), np.nan, 0.0))[()]

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

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return self.low + (self.high - self.low) * np.asarray(u)

    def mean(self) -> float:
        return 0.5 * (self.low + self.high)

    def var(self) -> float:
        return (self.high - self.low) ** 2 / 12.0

    def cdf(self, t: Any) -> Any:
        return np.clip((np.asarray(t, dtype=float) - self.low) / (self.high - self.low), 0.0, 1.0)[()]


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

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """Resampling: each value with probability 1/len (u < 1, so the index stays in range)."""
        index = (np.asarray(u) * len(self._sorted)).astype(np.intp)
        return self._sorted[np.minimum(index, len(self._sorted) - 1)]

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
            return {"dist": self.name, "file": written_path(self.file)}
        return {"dist": self.name, "samples": list(self._sorted if self.samples is None else self.samples)}


def _read_numbers(path: Path) -> tuple[float, ...]:
    """The numbers of a measurement file, checked like inline samples."""
    if not path.is_file():
        raise ConfigError("file", f"{not_a_file(path)}: {path}")
    try:
        with warnings.catch_warnings():  # NumPy warns on an empty file; the check below says it plainly
            warnings.simplefilter("ignore")
            values = np.loadtxt(path, dtype=float, delimiter=",", ndmin=1, comments="#")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError("file", f"not a column of numbers: {exc}") from None
    return Param("file", "numbers").check(values.ravel().tolist())
