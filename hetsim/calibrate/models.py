"""Which cost curve a worker's times support: held-out errors and the choice (:func:`choose`).

:func:`held_out_errors` scores each form of :data:`~hetsim.calibrate.curves.FITTED` by leaving
batch sizes out (each size its own fold, or :data:`MAX_FOLDS` interleaved folds): ``predicted /
measured mean - 1`` at the sizes a fit did not see, root mean square over their rows.
:func:`choose` keeps the simplest form whose score is within :func:`noise_floor` (the noise of
the held-out means themselves) of the best. These least-squares fits
(:mod:`~hetsim.calibrate.curves`) choose the form and start its fit over every row
(:mod:`~hetsim.calibrate.worker_fit`), which gives the parameters written and their standard errors.
"""

from __future__ import annotations

import math

import numpy as np

from hetsim.calibrate.curves import FITTED, Curve, Sizes

MAX_FOLDS = 10


def folds(m: int) -> list[np.ndarray]:
    """Indices of the held-out sizes of each fold: one size each, or MAX_FOLDS interleaved groups."""
    k = min(m, MAX_FOLDS)
    return [np.arange(j, m, k) for j in range(k)]


def held_out_errors(s: Sizes) -> dict[str, float | None]:
    """Per model, the relative error of its predictions at batch sizes left out of its fit
    (``predicted / mean measured - 1`` at each size), root mean square over the held-out rows;
    None where some fold cannot fit it (every model needs three sizes or more)."""
    m = s.batch.size
    errors: dict[str, list[np.ndarray] | None] = {form.name: [] for form in FITTED}
    weights = np.concatenate([s.count[hold] for hold in folds(m)])
    if m < 3:
        return {form.name: None for form in FITTED}
    for hold in folds(m):
        keep = np.ones(m, dtype=bool)
        keep[hold] = False
        train = s.subset(keep)
        for form in FITTED:
            found = errors[form.name]
            if found is None:
                continue
            curve = form.fit(train)
            if curve is None:
                errors[form.name] = None
                continue
            found.append(curve.time_s(s.batch[hold]) / s.mean[hold] - 1.0)
    return {
        name: None if e is None else float(np.sqrt(np.average(np.concatenate(e) ** 2, weights=weights)))
        for name, e in errors.items()
    }


def noise_floor(b: np.ndarray, y: np.ndarray, s: Sizes) -> float:
    """What the held-out error owes to the noise of the held-out means themselves (their root
    mean square over the rows): the within-size sigma of log times (pooled) times
    ``sqrt(sizes / rows)``; infinite when no size was seen twice: nothing tells the noise, so no
    difference of scores is more than noise and :func:`choose` keeps the simplest form (a 0
    chose a table through single rows, its noise then read as 0)."""
    logs = np.log(y)
    means = np.bincount(s.index, weights=logs) / s.count
    dof = y.size - s.batch.size
    if dof < 1:
        return math.inf
    sigma = float(np.sqrt(((logs - means[s.index]) ** 2).sum() / dof))
    return sigma * float(np.sqrt(s.batch.size / y.size))


def choose(errors: dict[str, float | None], floor: float) -> type[Curve]:
    """The simplest form whose held-out error (``errors``, by name) is within ``floor`` of the
    lowest (the first, affine, when none could be scored)."""
    scored = {k: v for k, v in errors.items() if v is not None}
    if not scored:
        return FITTED[0]
    best = min(scored.values())
    return next(form for form in FITTED if form.name in scored and scored[form.name] <= best + floor)
