"""The checks across a run's options (:func:`validation.config.build_config` calls them once every
option is read): barrier policies only, what the policies need of the run, DDP on one kind of
device, a noise scale that can be measured, an efficiency table that fits the run's learning rates.
Each raises ConfigError, one line naming the option."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hetsim.core.errors import ConfigError
from hetsim.model.efficiency import lr_factor
from hetsim.policies import policy_class
from hetsim.policies.base import not_barrier, waits_for_every_worker
from validation.backend import check_ddp_devices


def check_barrier_policies(policies: Sequence[str]) -> None:
    """The real trainer always combines every rank's gradient: a policy that ends a step without
    every gradient (the trait :func:`~hetsim.policies.base.waits_for_every_worker` reads:
    ``async``, ``backup``, ``ksync``) is refused, as the example's trainer refuses it."""
    for name in policies:
        cls = policy_class(name)
        if not waits_for_every_worker(cls):
            raise ConfigError("--policies", not_barrier(name, cls))


def check_across(policies: Sequence[str], world_size: int, probe_repeats: int,
                 noise: tuple[bool, Mapping[str, Any] | None], comm: str, devices: Sequence[str]) -> None:  # fmt: skip
    """The checks across options: barrier policies only, what the policies need (``noise``:
    whether the noise scale is measured, and the efficiency table given, if any), a noise scale
    that can be measured, DDP on one kind of device (the table's fit to the run:
    :func:`check_table_fits`, once the learning rate is read)."""
    measured, table = noise
    check_barrier_policies(policies)
    check_policy_needs(policies, probe_repeats, measured or table is not None, comm)
    check_noise_measured(measured, world_size, comm)
    check_ddp_devices(comm, devices)


def check_noise_measured(noise_scale: bool, world_size: int, comm: str) -> None:
    """``--noise-scale`` pairs each rank's own gradient with the combined one, on the flat path
    (DDP never holds a rank's own whole gradient) and with two ranks or more: else nothing is measured."""
    if noise_scale and comm != "flat":
        raise ConfigError(
            "--noise-scale", "is measured from each rank's own gradient on the flat path: use --comm flat"
        )
    if noise_scale and world_size < 2:
        raise ConfigError("--noise-scale", "is measured from two or more ranks' gradients: use --world-size 2 or more")


def check_table_fits(table: Mapping[str, Any] | None, global_batch: int, lr: float) -> None:
    """An ``--efficiency`` table holds for the optimizer and learning rates it was measured with:
    this trainer runs SGD, sets ``--lr`` at ``--global-batch`` and scales it by the square root of
    the batch, so the table's rule must be that one, and ``--lr`` the table's rate (``lr``, which
    ``calibrate-efficiency`` writes) scaled by it from the table's base batch to the run's; a table
    that does not record its rate or its rule holds only at its base batch, run with the sweep's
    ``--lr``."""
    if table is None:
        return
    rule, base, rate, optimizer = (table.get(k) for k in ("lr_scaling", "base_batch", "lr", "optimizer"))
    if rule not in (None, "sqrt"):
        raise ConfigError("--efficiency", f"fitted under the {rule!r} learning-rate rule; this trainer scales "
                          "the rate by the root of the batch (fit a batch-sweep of --lr-scaling sqrt)")  # fmt: skip
    if optimizer not in (None, "sgd"):
        raise ConfigError("--efficiency", f"measured with {optimizer}; this trainer runs SGD (fit a batch-sweep of "
                          "--optimizer sgd)")  # fmt: skip
    if rate is not None and base is not None and rule is not None:
        want = float(rate) * lr_factor("sqrt", global_batch, float(base))
        if not math.isclose(want, lr, rel_tol=1e-5):  # the 6 digits plan prints are close enough
            raise ConfigError("--efficiency", f"measured with the learning rate {float(rate):g} at global batch "
                              f"{float(base):g}, which the square-root rule makes {want:.10g} at --global-batch "
                              f"{global_batch}: run with --lr {want:.10g} (here {lr:g})")  # fmt: skip
    elif base is not None and float(base) != global_batch:
        at = f"{float(base):g}"
        raise ConfigError("--efficiency", f"fitted with the learning rate set at global batch {at}; run at "
                          f"--global-batch {at} with the sweep's --lr (or fit one at {global_batch})")  # fmt: skip


def check_policy_needs(policies: Sequence[str], probe_repeats: int, noise_scale: bool, comm: str) -> None:
    """What the policies need of the run: the probe for their costs, the noise scale for the batch
    (measured, or given as an efficiency table: ``noise_scale`` then true)."""
    costly = [p for p in policies if policy_class(p).needs_costs]
    if costly and probe_repeats == 0:
        raise ConfigError(
            "--probe-repeats", f"{costly[0]} needs the ranks' costs, which come from the probe: use at least 1"
        )
    batching = [p for p in policies if policy_class(p).needs_efficiency]
    if batching and (not noise_scale or comm != "flat"):
        problem = "picks the batch by the noise scale: it needs --noise-scale (or --efficiency FILE) and --comm flat"
        raise ConfigError("--policies", f"{batching[0]} {problem}")
