"""Heterogeneity injection: emulating a slower rank on identical hardware.

This is emulation, not a model of real devices: a rank sleeps after its forward and backward
pass for

    delay (a per-step draw: constant seconds or a hetsim distribution, the paper's method)
    + per_sample_s * local_batch
    + (slowdown - 1) * the measured forward-and-backward time

and only in steps where it got samples (a rank with no samples sits the step out, as in the
simulator). Real mixed devices need none of it. The random delay draws come from the rank's
own generator, ``SeedSequence(seed).spawn(world_size)[rank]``, one draw per working step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import Param
from hetsim.core.registry import DISTRIBUTIONS
from hetsim.model.distributions import Constant, Distribution
from hetsim.scenario.config import parse_value
from hetsim.scenario.raw_tables import make_distribution


def parse_delay_spec(text: str, option: str = "--delay") -> Distribution:
    """``0.02`` (constant seconds) or ``NAME:A,B,...``: a registered distribution with its
    declared parameters in order (``exponential:0.02``, ``uniform:0.01,0.03``); one that takes
    a list of numbers takes them all (``empirical:0.01,0.02,...``)."""
    text = str(text).strip()
    name, sep, args = text.partition(":")
    if not sep:
        value = parse_value(text)
        if isinstance(value, str):
            raise ConfigError(option, f"expected seconds or NAME:PARAMS, got {text!r}")
        return Constant(Param(option, low=0.0).check(value))
    values = [parse_value(a.strip()) for a in args.split(",") if a.strip()]  # TOML values: 2, 0.01, "x"
    cls = DISTRIBUTIONS.lookup(name, option)
    params = [p for p in cls.params if p.kind != "path"]
    if params and params[0].kind == "numbers":
        return make_distribution({"dist": name, params[0].name: values}, option)
    if len(values) != len(params):
        names = ", ".join(p.name for p in params)
        raise ConfigError(option, f"{name} takes {len(params)} parameter(s) ({names}), got {len(values)}")
    return make_distribution({"dist": name, **{p.name: v for p, v in zip(params, values)}}, option)


@dataclass
class Injector:
    """One rank's emulated slowness."""

    delay: Distribution = field(default_factory=lambda: Constant(0.0))
    per_sample_s: float = 0.0
    slowdown: float = 1.0
    rng: np.random.Generator | None = None  # the rank's, spawned from the run's seed (for_rank); needed to draw

    def __post_init__(self) -> None:
        if self.rng is None and self.delay.var() > 0:
            raise ValueError("a random delay needs the rank's generator (Injector.for_rank spawns it from the seed)")

    @classmethod
    def for_rank(
        cls,
        rank: int,
        world_size: int,
        seed: int,
        delay: dict[int, str],
        per_sample_s: dict[int, float],
        slowdown: dict[int, float],
    ) -> Injector:
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(world_size)[rank])
        spec = parse_delay_spec(delay[rank]) if rank in delay else Constant(0.0)
        return cls(spec, float(per_sample_s.get(rank, 0.0)), float(slowdown.get(rank, 1.0)), rng)

    @property
    def active(self) -> bool:
        return self.delay.mean() > 0 or self.per_sample_s > 0 or self.slowdown > 1.0

    def extra_s(self, local_batch: int, measured_s: float) -> float:
        """Seconds to sleep after a step of ``local_batch`` samples that took ``measured_s``."""
        if local_batch <= 0 or not self.active:
            return 0.0
        drawn = self.delay.mean() if self.rng is None else float(self.delay.sample(self.rng))  # None: not random
        return drawn + self.per_sample_s * local_batch + (self.slowdown - 1.0) * measured_s

    def apply(self, local_batch: int, measured_s: float) -> float:
        """Sleep for :meth:`extra_s`; returns the seconds asked for."""
        extra = self.extra_s(local_batch, measured_s)
        if extra > 0:
            time.sleep(extra)
        return extra
