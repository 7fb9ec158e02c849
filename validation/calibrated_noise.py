"""The calibrated scenario with the structure of its noise written in (:func:`noise_scenario`).

:func:`hetsim.calibrate.calibrate` reports how much of the noise a step's workers share
(``Calibration.noise.shared``, the mean pairwise correlation of their log times, from a common
log factor of sigma ``shared_sigma``) and how each worker's noise persists from step to step
(``persistence``, the lag-1 autocorrelation of its log-residuals), but the scenario it writes
draws every worker's noise afresh and independently each step. Both change what a run takes: a
step waits for its slowest worker, and correlated workers are slow together, so the expected
maximum is lower; a split that follows the last step's times follows persistent noise. Here they
are written where the calibration shows them clearly, and left out where they could be chance:

* **shared**: when ``shared`` is above ``max(SHARED_MIN, 3 / sqrt(shared_steps))``, 0.05 or three
  standard errors of a correlation over the steps with two or more workers, whichever is larger.
  Every fitted worker then names one ``shared_noise`` group, lognormal with sigma ``tau``, and its
  own sigma becomes ``sqrt(sigma^2 - tau^2)``, so that each worker's total log variance is the
  fitted ``sigma^2``;
* **persistence**: a worker's lag-1 ``rho`` where it is above ``3 / sqrt(rows)``, three standard
  errors of a lag-1 autocorrelation over its ``rows`` complete computes (else 0).

The calibration measures each worker's total lag-1 only, not how it divides between the shared
and the own factor. Each worker's own factor persists as ``(rho sigma^2 - q tau^2) / (sigma^2 -
tau^2)``, which gives its total log noise the measured lag-1 ``rho`` whatever the shared factor's
persistence ``q``; ``q``, one for the group, is the mean of the members' ``rho``, moved into the
range that keeps every member's own persistence between 0 and :data:`MAX_PERSISTENCE` (the least
of the members' ``rho`` would leave a member whose own part is small an own persistence near 1,
its own factor all but constant over a short run). A member without a clear ``rho`` makes ``q`` 0.

The function needs nothing but the :class:`~hetsim.calibrate.Calibration`, so it could be part
of the scenario ``hetsim.calibrate`` writes.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hetsim.calibrate import Calibration, NoiseStructure

SHARED_MIN = 0.05  # the least mean pairwise correlation written as a shared factor
SE_MULTIPLE = 3.0  # a structure is written when it is this many standard errors above 0
MAX_PERSISTENCE = 0.99  # a persistence must stay below 1
SHARED_GROUP = "calibrated-step"  # the shared_noise group's name


def shared_threshold(noise: NoiseStructure) -> float:
    """The mean pairwise correlation above which the shared part is written."""
    return max(SHARED_MIN, SE_MULTIPLE / math.sqrt(max(noise.shared_steps, 1)))


def clear_shared_sigma(noise: NoiseStructure) -> float:
    """The common factor's sigma where the calibration shows it clearly (module docstring), else 0."""
    if noise.shared is None or noise.shared_sigma is None or noise.shared_sigma <= 0:
        return 0.0
    return float(noise.shared_sigma) if noise.shared > shared_threshold(noise) else 0.0


def clear_persistence(rho: float | None, rows: int) -> float:
    """A worker's lag-1 persistence where it is clearly above 0 (module docstring), else 0."""
    if rho is None or rows < 1 or rho <= SE_MULTIPLE / math.sqrt(rows):
        return 0.0
    return min(float(rho), MAX_PERSISTENCE)


def shared_persistence(rho: list[float], variance: list[float], shared_variance: float) -> float:
    """The shared factor's persistence: the mean of the members' lag-1 ``rho``, moved into the range
    where each member's own persistence ``(rho v - q t) / (v - t)`` (``v`` its log variance, ``t``
    the shared one) lies in [0, MAX_PERSISTENCE]; where no ``q`` suits every member, the largest
    that leaves none below 0."""
    t = shared_variance
    low = max((r * v - MAX_PERSISTENCE * (v - t)) / t for r, v in zip(rho, variance))
    high = min(r * v / t for r, v in zip(rho, variance))
    return float(min(max(sum(rho) / len(rho), low, 0.0), high, MAX_PERSISTENCE))


def noise_scenario(calibration: Calibration) -> dict[str, Any]:
    """``calibration.scenario`` (a copy) with the noise's shared part and persistence written
    where they are clear (module docstring); workers too idle to fit are left as they are."""
    scenario = copy.deepcopy(calibration.scenario)
    fits = {f.worker: f for f in calibration.workers}
    ids = sorted({*fits, *(i.worker for i in calibration.idle)})  # the scenario's worker order
    lag1 = dict(zip(ids, calibration.noise.persistence))
    rho = {w: clear_persistence(lag1.get(w), fit.rows) for w, fit in fits.items()}
    tau = clear_shared_sigma(calibration.noise) if len(fits) > 1 else 0.0
    variance = {w: fit.noise_sigma**2 for w, fit in fits.items()}
    shared_rho = shared_persistence(list(rho.values()), list(variance.values()), tau * tau) if tau > 0 else 0.0
    for worker, entry in zip(ids, scenario["workers"]):
        if worker not in fits:
            continue
        own = math.sqrt(max(variance[worker] - tau * tau, 0.0)) if tau > 0 else fits[worker].noise_sigma
        own_rho = (rho[worker] * variance[worker] - shared_rho * tau * tau) / (own * own) if own > 0 else 0.0
        own_rho = min(max(own_rho, 0.0), MAX_PERSISTENCE)
        entry["noise"] = {"dist": "lognormal", "sigma": own, **({"persistence": own_rho} if own_rho > 0 else {})}
        if tau > 0:
            entry["shared_noise"] = {"group": SHARED_GROUP, "dist": "lognormal", "sigma": tau}
            if shared_rho > 0:
                entry["shared_noise"]["persistence"] = shared_rho
    return scenario
