"""Where an array meant to hold times (or noise factors) holds something else: nan, infinity or
a number below zero, as a plug-in's ``ppf`` or ``time_s`` may return (:func:`first_invalid`).
The engines cannot order such times; a clock of nan stood the vector engine still."""

from __future__ import annotations

import numpy as np


def first_invalid(values: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first value that is not a finite number >= 0; None where every one is
    (two reductions then, the common case: a nan makes either nan)."""
    if values.size == 0 or (values.min() >= 0 and np.isfinite(values.max())):
        return None
    return tuple(int(i) for i in np.argwhere(~((values >= 0) & np.isfinite(values)))[0])
