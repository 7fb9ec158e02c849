"""The Policy interface shared by the simulator's engines and the real trainer (``validation``).

A policy owns the split of the global batch. The caller drives it with three hooks:

* ``reset(n_workers, global_batch, hints, run)`` once before the first step (``run``: what is
  known of the run beyond its workers, a :class:`RunHint`);
* ``partition(info) -> local batches`` before every step (integers, each in ``[0, max_batch]``,
  summing exactly to ``global_batch``; a policy that ``varies_batch`` changes its
  ``global_batch`` as it goes);
* ``observe(record)`` after every step, with the measured per-worker compute times.

The base class keeps the split (set at ``reset`` from :meth:`Policy.initial_split`, the equal
split unless a subclass overrides it; a re-splitting policy changes it as it observes), and
``partition`` adds the one shared failure rule: a policy that ``excludes_failed`` moves the
work of workers that are down (``info.available``) to the others, while the rest (plain
synchronous SGD) keep them in the split and so stall until they are repaired. ``wait_for()``
says how many gradients a step waits for (all, for barrier policies; fewer for backup and
K-sync). ``synchronous = False`` marks a policy without a barrier (async).
``weighted_gradients`` tells a real trainer to combine gradients as ``sum_i (b_i/B) g_i``; the
simulator's timing does not depend on it.

A new policy subclasses :class:`Policy` and registers with ``hetsim.core.registry.POLICIES``;
simulate, analyze, sweep and the plots then find it by name and ask its traits.
"""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from hetsim.core.errors import ConfigError
from hetsim.core.params import PlugIn
from hetsim.model.costs import CostModel
from hetsim.model.efficiency import Efficiency
from hetsim.model.partition import split_by_shares

UNTIL_THE_END = sys.maxsize  # Policy.steady_steps: the split never changes by itself


@dataclass(frozen=True)
class WorkerHint:
    """What a policy may know about a worker before running: its cap and, when known, its
    expected compute time ``cost(b) * noise_mean + delay_s`` (``cost`` None where unknown, e.g.
    on real hardware before a probe)."""

    max_batch: float = math.inf
    cost: CostModel | None = None
    noise_mean: float = 1.0
    delay_s: float = 0.0

    def affine(self) -> tuple[float, float] | None:
        """``(fixed_s, per_sample_s)`` of the expected time when the cost is affine."""
        terms = None if self.cost is None else self.cost.affine_terms()
        if terms is None:
            return None
        return terms[0] * self.noise_mean + self.delay_s, terms[1] * self.noise_mean

    def expected_s(self, batch: Any) -> Any:
        """Expected compute time at ``batch`` samples (``batch >= 1``; arrays element-wise). An
        affine cost is evaluated as ``fixed_s + per_sample_s * b``, the closed form's arrangement."""
        if self.cost is None:
            raise ValueError("this worker's costs are unknown")
        affine = self.affine()
        if affine is not None:
            return affine[0] + affine[1] * batch
        return self.cost.time_s(batch) * self.noise_mean + self.delay_s

    def batch_within(self, time_s: float) -> float:
        """The largest (real) batch whose expected time is at most ``time_s``."""
        if self.cost is None:
            raise ValueError("this worker's costs are unknown")
        if time_s < self.delay_s:
            return 0.0
        return self.cost.batch_within((time_s - self.delay_s) / self.noise_mean)


@dataclass(frozen=True)
class RunHint:
    """What a policy may know about the run beyond its workers: the expected time of a step
    outside the workers' compute (``overhead_s``: the all-reduce, or an upper bound of its
    exposed part when it overlaps the backward pass) and the workload's statistical efficiency
    (None: unknown)."""

    overhead_s: float = 0.0
    efficiency: Efficiency | None = None


class StepInfo(NamedTuple):
    """Where a step stands. A named tuple, not a dataclass: engines build one per step, and a
    tuple is several times cheaper to create."""

    step: int
    epoch: int
    step_in_epoch: int
    steps_per_epoch: int
    available: tuple[bool, ...] | None = None  # None: every worker is up


class StepRecord(NamedTuple):
    """What was measured in one step (a named tuple for the same reason as StepInfo)."""

    info: StepInfo
    local_batches: tuple[int, ...]
    compute_s: tuple[float, ...]
    included: tuple[bool, ...]

    @property
    def ends_epoch(self) -> bool:
        return self.info.step_in_epoch == self.info.steps_per_epoch - 1


def step_records(
    first: StepInfo, local_batches: tuple[int, ...], compute_s: np.ndarray, included: np.ndarray
) -> Iterator[StepRecord]:
    """The StepRecord of each step of a block reported to :meth:`Policy.observe_steps`."""
    included = np.broadcast_to(included, compute_s.shape)
    per_epoch = first.steps_per_epoch
    for j, (times, flags) in enumerate(zip(compute_s.tolist(), included.tolist())):
        at = first.step_in_epoch + j
        info = (
            first
            if j == 0
            else first._replace(step=first.step + j, epoch=first.epoch + at // per_epoch, step_in_epoch=at % per_epoch)
        )
        yield StepRecord(info, local_batches, tuple(times), tuple(flags))


# Why a policy that needs_efficiency is left out of a scenario without it (simulate's and plan's note).
NO_EFFICIENCY = "it needs [workload.efficiency] (the gradient noise scale), which the scenario lacks"


class Policy(PlugIn):
    """Base class. A subclass sets ``name``, declares its ``params`` (they arrive as keyword
    arguments, from the scenario's ``[policy]`` table, and become attributes) and either keeps
    the split it is given at :meth:`reset` (the equal split, or :meth:`initial_split`'s) or
    changes ``self._batches`` as it observes steps (or overrides :meth:`split`).

    The traits below are what the rest of hetsim asks instead of looking at names."""

    weighted_gradients: ClassVar[bool] = False  # a real trainer combines gradients as sum_i (b_i/B) g_i
    needs_costs: ClassVar[bool] = False  # reset needs every worker's expected costs in the hints
    uses_costs: ClassVar[bool] = False  # reset uses them when the hints carry them (a real run: the probe's)
    excludes_failed: ClassVar[bool] = True  # partition moves the work of workers that are down
    synchronous: ClassVar[bool] = True  # False: no barrier (the engines run it as async updates)
    resplits: ClassVar[bool] = False  # the split can change during a run (plots show its trajectory)
    autocorrelated_steps: ClassVar[bool] = False  # step times depend on the history: CIs use batch means
    closed_form: ClassVar[bool] = False  # hetsim.analysis.analytic.predict models it (see analytic's docstring)
    needs_efficiency: ClassVar[bool] = False  # reset needs the workload's statistical efficiency (RunHint)
    varies_batch: ClassVar[bool] = False  # the global batch can change during a run
    no_closed_form_reason: ClassVar[str] = "it does not declare a closed form (Policy.closed_form)"

    @classmethod
    def reads_costs(cls) -> bool:
        """Whether :meth:`reset` reads the workers' costs from the hints (it needs or uses them):
        a real run fits its probe, and ``compare`` tells its twin the costs, only for such a policy."""
        return cls.needs_costs or cls.uses_costs

    __eq__ = object.__eq__  # a policy is stateful: two are the same only if they are one object
    __hash__ = object.__hash__

    def reset(
        self, n_workers: int, global_batch: int, hints: Sequence[WorkerHint] | None = None, run: RunHint | None = None
    ) -> None:
        self.n_workers = n_workers
        self.global_batch = global_batch
        self.hints = tuple(hints) if hints is not None else (WorkerHint(),) * n_workers
        self.run = RunHint() if run is None else run
        self._caps = tuple(h.max_batch for h in self.hints)
        self._cap_array = np.array(self._caps, dtype=float)
        self._cap_array.flags.writeable = False
        if len(self.hints) != n_workers:
            raise ValueError(f"{len(self.hints)} hints for {n_workers} workers")
        if self.needs_costs and not self.costs_known:
            raise ValueError(f"policy {self.name!r} needs every worker's expected costs")
        if self.needs_efficiency and self.run.efficiency is None:
            raise ValueError(f"policy {self.name!r} needs the workload's statistical efficiency")
        self.check_cluster(n_workers)
        self._batches = self.initial_split()

    def check_cluster(self, n_workers: int) -> None:
        """Check the parameters against the cluster's size; raise ConfigError on the parameter's
        name (``make_policy(..., n_workers=n)`` adds the path, as for every parameter)."""

    def initial_split(self) -> tuple[int, ...]:
        """The split of the first step: equal shares, capped workers' excess spread evenly."""
        return split_by_shares([1.0] * self.n_workers, self.global_batch, self.caps)

    @property
    def caps(self) -> tuple[float, ...]:
        return self._caps

    @property
    def cap_array(self) -> np.ndarray:
        """:attr:`caps` as a NumPy array (read-only)."""
        return self._cap_array

    @property
    def costs_known(self) -> bool:
        """Whether every worker's expected costs are in the hints."""
        return all(h.cost is not None for h in self.hints)

    def partition(self, info: StepInfo) -> tuple[int, ...]:
        batches = self.split(info)
        available = info.available
        if not self.excludes_failed or available is None or all(available) or not any(available):
            return batches
        if all(b == 0 for b, up in zip(batches, available) if not up):
            return batches
        shares = [b if up else 0 for b, up in zip(batches, available)]
        if not any(shares):
            shares = [1 if up else 0 for up in available]
        caps = [c if up else 0 for c, up in zip(self.caps, available)]
        if sum(caps) < self.global_batch:  # the workers left cannot hold the batch: wait instead
            return batches
        return split_by_shares(shares, self.global_batch, caps)

    def split(self, info: StepInfo) -> tuple[int, ...]:
        """The split of this step before failures are taken into account: by default the one
        set at :meth:`reset` or since changed by the policy."""
        return self._batches

    def shares(self) -> np.ndarray:
        """The current split as fractions of the global batch (a policy that keeps continuous
        shares, as ``dynamic`` does, returns those)."""
        return np.asarray(self._batches, dtype=float) / self.global_batch

    def fixed_point_shares(self) -> tuple[float, ...] | None:
        """Where the policy's split converges on workers with the hints' expected costs, when it
        re-splits and the analysis knows (None otherwise)."""
        return None

    def observe(self, record: StepRecord) -> None:
        """Default: a static policy ignores measurements."""

    def observe_noise_scale(self, noise_scale: float) -> None:
        """A measured gradient noise scale, samples (a real trainer's running estimate). Default:
        ignored; a policy that ``needs_efficiency`` prefers it to the efficiency's schedule."""

    def wait_for(self) -> int:
        return self.n_workers

    def steady_steps(self, info: StepInfo) -> int:
        """For how many steps, from ``info``'s on, an engine may compute with the split
        ``partition`` returns now (and ``wait_for`` too), as long as no worker's availability
        changes, and report them with one ``observe_steps``. It is the number of steps the split
        is sure to stay, unless the policy may change it as it observes: then it is a guess, and
        ``observe_steps`` takes only the steps up to the change. :data:`UNTIL_THE_END` means every
        remaining step.

        Default: it follows from what the class overrides. A policy that overrides none of
        :meth:`split`, :meth:`partition`, :meth:`wait_for`, :meth:`observe` and
        :meth:`observe_steps` keeps the split :meth:`reset` set (its :meth:`initial_split`, say)
        until availability changes, so every remaining step; any other gets 1, always safe (a
        re-splitting policy that knows better overrides this, as ``dynamic`` does)."""
        return UNTIL_THE_END if _keeps_its_split(type(self)) else 1

    def observe_steps(
        self, first: StepInfo, local_batches: tuple[int, ...], compute_s: np.ndarray, included: np.ndarray
    ) -> int:
        """Observe consecutive steps that ran with one split, from ``first`` on: ``compute_s`` is
        (steps x workers), ``included`` the same or one row for all. Equivalent to one ``observe``
        per step (what this default does); a policy may override it to do the same bookkeeping
        with fewer Python calls. Returns how many steps it took: all, or (a policy whose split
        may change as it observes) the steps up to and including the one after which its split
        changed; the engine computes the steps after it again, with the new split."""
        if type(self).observe is Policy.observe:  # a policy that ignores measurements
            return len(compute_s)
        for record in step_records(first, local_batches, compute_s, included):
            self.observe(record)
        return len(compute_s)


_SPLIT_HOOKS = ("split", "partition", "wait_for", "observe", "observe_steps")


def _keeps_its_split(cls: type[Policy]) -> bool:
    """Whether ``cls`` overrides none of the methods through which a split changes during a run."""
    return all(getattr(cls, hook) is getattr(Policy, hook) for hook in _SPLIT_HOOKS)


def not_barrier(name: str, cls: type[Policy]) -> str:
    """Why policy ``name`` (class ``cls``, not :func:`waits_for_every_worker`) is not one a trainer
    that waits for every rank each step (DDP's) can run."""
    how = "has no barrier" if not cls.synchronous else "leaves the slowest gradients out"
    return f"{name!r} {how}, and this trainer waits for every rank each step"


def fresh(policy: Policy) -> Policy:
    """A copy of ``policy`` for one prediction or run: a plan's rows, the replications of one
    simulated mean, keep the object they were given unused (policies are stateful: the caller's
    object is not changed, and no run starts from another's state). One that cannot be copied
    (it holds a lock, a file) is made anew from its parameters."""
    if not isinstance(policy, Policy):
        raise ConfigError("policy", f"expected a Policy object, got {type(policy).__name__} ({policy!r})")
    try:
        return copy.deepcopy(policy)
    except (TypeError, copy.Error):
        return type(policy)(**policy.param_values())


def told(policy: Policy, hints: Sequence[WorkerHint] | None) -> Policy:
    """A fresh copy of ``policy`` (same class and parameters) that is reset with ``hints`` whatever
    hints it is given (a subclass made here: the engines and the closed forms reset a policy with
    the scenario's own, true costs), as a real run is told a probe's or a profile's costs;
    ``policy`` itself without hints or where it reads none (:meth:`Policy.reads_costs`)."""
    if hints is None or not policy.reads_costs():
        return policy
    base = type(policy)

    def reset(self: Policy, n_workers: int, global_batch: int, _hints: Any = None, run: Any = None) -> None:
        base.reset(self, n_workers, global_batch, hints, run)

    cls: type[Policy] = type(base.__name__, (base,), {"reset": reset, "__doc__": base.__doc__})
    return cls(**policy.param_values())


def check_split(policy: Policy, batches: Sequence[int]) -> None:
    """What the engines take from :meth:`Policy.partition`: one whole number >= 0 per worker, each
    within its cap, summing to the policy's global batch. A plug-in that breaks it gets one line
    (ConfigError on ``policy``) instead of a run of wrong numbers."""
    where = f"{policy.name}'s split {_short(batches)}"
    if len(batches) != policy.n_workers:
        raise ConfigError("policy", f"{where} has {len(batches)} entries for {policy.n_workers} workers")
    b = np.asarray(batches)
    if b.dtype.kind not in "iu" or (b < 0).any():  # the types one by one (uint64 beside int makes floats)
        for i, v in enumerate(batches):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError("policy", f"{where}: worker {i}'s batch {v!r} is not a whole number >= 0")
        b = np.array([int(v) for v in batches], dtype=np.int64)
    over = np.flatnonzero(b > policy.cap_array)
    if over.size:
        i = int(over[0])
        raise ConfigError("policy", f"{where}: worker {i}'s batch {b[i]} is beyond its max_batch {policy.caps[i]:g}")
    if int(b.sum()) != policy.global_batch:
        raise ConfigError("policy", f"{where} sums to {int(b.sum())}, not the global batch {policy.global_batch}")


def check_wait_for(policy: Policy, need: object) -> int:
    """What the engines take from :meth:`Policy.wait_for`: a whole number of workers from 1 to the
    cluster's size (0 would end a step before any gradient; the engines would disagree on it)."""
    n = policy.n_workers
    if isinstance(need, (bool, np.bool_)) or not isinstance(need, (int, np.integer)) or not 1 <= need <= n:
        raise ConfigError("policy", f"{policy.name}'s wait_for() gave {need!r}: give a whole number from 1 to "
                          f"the {policy.n_workers} workers")  # fmt: skip
    return int(need)


def _short(batches: Sequence[int]) -> str:
    text = "/".join(str(b) for b in batches[:8])
    return text + ("/..." if len(batches) > 8 else "")


def waits_for_every_worker(cls: type[Policy]) -> bool:
    """Whether each step of policy class ``cls`` waits for every worker's gradient, as a DDP
    trainer does (``validation.uneven`` among them): it keeps a barrier and does not end a step
    early (``async``, ``backup`` and ``ksync`` do not; ``plan --wait-for-all`` plans without them)."""
    return cls.synchronous and cls.wait_for is Policy.wait_for
