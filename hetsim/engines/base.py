"""The engine plug-in: how (scenario, policy, seed) becomes a Trace.

An engine class declares its parameters (none for the built-ins), whether it runs a given
policy (:meth:`Engine.supports`, asked of the policy's traits, never its name) and its
``priority``: ``auto`` picks the supporting engine with the highest. A new engine subclasses
:class:`Engine` and registers with ``hetsim.core.registry.ENGINES``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from hetsim.core.params import PlugIn
from hetsim.model.draws import StepDraws
from hetsim.model.workers import WorkerStreams
from hetsim.policies.base import Policy, StepInfo

if TYPE_CHECKING:
    from hetsim.model.trace import Recorder, Trace
    from hetsim.scenario.scenario import Scenario


def begin(scenario: Scenario, policy: Policy, seed: int | None) -> tuple[list[WorkerStreams], StepDraws]:
    """Start a run: ``policy`` reset for the scenario (its hints and run hint), and from ``seed``
    (default: the scenario's) the workers' timelines and their draws of each step."""
    policy.reset(scenario.n_workers, scenario.workload.global_batch, scenario.hints(), scenario.run_hint())
    seed = scenario.seed if seed is None else seed
    steps = scenario.workload.total_steps if policy.synchronous else None  # async: a worker's updates vary
    return WorkerStreams.spawn(seed, scenario.workers), StepDraws(seed, scenario.workers, steps)


class Epochs:
    """Where each step of a barrier run falls in its epoch. An epoch is ``dataset_size // B``
    steps of the global batch ``B`` in force when it begins: always the workload's for a policy
    with a fixed batch, the policy's own for one that ``varies_batch`` (so an epoch stays one
    pass over the data, as a real trainer counts it). Asked for steps in increasing order."""

    def __init__(self, dataset_size: int, policy: Policy) -> None:
        self.dataset_size, self.policy = dataset_size, policy
        self.first_step = self.epoch = 0  # the current epoch and its first step
        self.length_steps = self._length_steps()

    def _length_steps(self) -> int:
        return max(1, self.dataset_size // self.policy.global_batch)

    def info(self, step: int, available: tuple[bool, ...] | None = None) -> StepInfo:
        """The StepInfo of ``step`` (not before the last one asked)."""
        if not self.policy.varies_batch and step - self.first_step >= self.length_steps:
            passed = (step - self.first_step) // self.length_steps  # every epoch as long
            self.first_step, self.epoch = self.first_step + passed * self.length_steps, self.epoch + passed
        while step - self.first_step >= self.length_steps:  # an epoch ended; the next is the batch's now
            self.first_step, self.epoch = self.first_step + self.length_steps, self.epoch + 1
            self.length_steps = self._length_steps()
        return StepInfo(step, self.epoch, step - self.first_step, self.length_steps, available)


class Engine(PlugIn):
    """The base of engines: :meth:`run` simulates a scenario under a policy into a
    :class:`~hetsim.model.trace.Trace`; :meth:`supports` says which policies it runs, and
    ``priority`` ranks it for ``--engine auto`` among those that support a policy."""

    priority: ClassVar[int] = 0  # ``auto`` runs a policy on the supporting engine with the highest

    @classmethod
    def supports(cls, policy: Policy) -> bool:
        """Whether this engine runs ``policy``."""
        return True

    @classmethod
    def refusal(cls, policy: Policy) -> str:
        """Why this engine does not run ``policy`` (asked when it was given, or named, for it)."""
        auto = "auto picks one: --engine auto, engine=None"
        return f"the {cls.name} engine does not run {policy.name!r}: use another ({auto})"

    def run(self, scenario: Scenario, policy: Policy, seed: int | None = None) -> Trace:
        """Simulate ``scenario`` under ``policy`` (reset here) with ``seed`` (default: the scenario's)."""
        raise NotImplementedError

    def record(self, scenario: Scenario, policy: Policy, recorder: Recorder, seed: int | None = None) -> None:
        """Simulate ``scenario`` under the barrier ``policy``, handing ``recorder`` the steps as they
        are computed instead of keeping the trace. Default: run, then hand over the whole trace."""
        trace = self.run(scenario, policy, seed)
        n = trace.n_workers
        recorder.add_block(0, trace.per_step("epoch")[:, 0], trace.per_step("start_s")[:, 0],
                           trace.per_step("local_batch"), trace.per_step("compute_s"), trace.per_step("wait_s"),
                           trace.per_step("included"), trace.per_step("slowdown"), trace.per_step("up"),
                           trace.comm_s[::n])  # fmt: skip
