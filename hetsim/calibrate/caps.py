"""The memory caps a trace shows (:func:`shown_caps`).

``equal`` gives every worker the same share, up to one sample more for the remainder; a worker
whose cap is below its share gets its cap, and the excess goes to the others. So where a
worker got two or more samples fewer than another in a step, it was held at its cap, and the
most it was ever held at is that cap. A scenario fitted without it let ``equal`` give the
capped workers their full share: a split the cluster could not run, and every speed-up over
``equal`` measured against the wrong step. Other policies split by speed, so an uneven split
tells nothing of caps there.
"""

from __future__ import annotations

import pandas as pd

from hetsim.policies import POLICIES
from hetsim.policies.static import Equal


def shown_caps(frame: pd.DataFrame, policy: str | None, warnings: list[str]) -> dict[int, int]:
    """Worker -> its cap where the rows of ``policy`` (their label) show one: only an ``equal``
    split does."""
    return equal_caps(frame, warnings) if policy is not None and POLICIES.get(policy) is Equal else {}


def equal_caps(frame: pd.DataFrame, warnings: list[str]) -> dict[int, int]:
    """Worker -> its cap, for the workers of an ``equal`` trace ``frame`` (one row per worker
    per step, failed workers' rows left out) held below another's share; a warning line each."""
    split = frame.pivot_table(index="step", columns="worker", values="local_batch", aggfunc="first")
    most = split.max(axis=1)
    held = split.add(1).lt(most, axis=0)
    caps: dict[int, int] = {}
    for worker in split.columns:
        if not held[worker].any():
            continue
        cap = int(split.loc[held[worker], worker].max())
        if cap < 1 or bool((split[worker] > cap).any()):  # it took more in another step: not a cap
            continue
        caps[int(worker)] = cap
        share = float(held[worker].sum() / split[worker].notna().sum())  # of the steps it has a row in
        warnings.append(
            f"worker {int(worker)}: equal gave it at most {cap} samples where another took up to "
            f"{int(most[held[worker]].max())} ({share:.0%} of steps): kept as its max_batch, the cap that split shows"
        )
    return caps
