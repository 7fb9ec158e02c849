"""What a workload's ``batch-sweep`` runs at where the command line names nothing
(:attr:`validation.workloads.base.Workload.sweep_defaults`), torch-free, so that the command's
options can say them without loading a workload."""

from __future__ import annotations

import math
from typing import NamedTuple


class SweepDefaults(NamedTuple):
    """A workload's sweep settings where the command line names none."""

    base_batch: int
    optimizer: str  # a key of validation.batch_sweep_train.OPTIMIZERS
    lr: float  # at the base batch
    target: float  # held-out accuracy
    max_steps: int  # the most a run may take
    quick_max_steps: int  # ... at --quick
    eval_gap: int  # the fewest steps between held-out evaluations (an evaluation can cost tens of steps)


# A workload that declares none (resnet18, most plug-ins): its base batch, learning rate and target
# are the user's to give (the sweep refuses to start without them; nan here is never used); SGD, and
# the caps and evaluation spacing digits-cnn has, unless named.
UNDECLARED = SweepDefaults(0, "sgd", math.nan, math.nan, 3000, 1000, 1)
