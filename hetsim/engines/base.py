"""The engine plug-in: how (scenario, policy, seed) becomes a Trace.

An engine class declares its parameters (none for the built-ins), whether it runs a given
policy (:meth:`Engine.supports`, asked of the policy's traits, never its name) and its
``priority``: ``auto`` picks the supporting engine with the highest. A new engine subclasses
:class:`Engine` and registers with ``hetsim.registry.ENGINES``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from hetsim.params import PlugIn
from hetsim.policies.base import Policy

if TYPE_CHECKING:
    from hetsim.scenario import Scenario
    from hetsim.trace import Trace


class Engine(PlugIn):
    priority: ClassVar[int] = 0  # ``auto`` runs a policy on the supporting engine with the highest

    @classmethod
    def supports(cls, policy: Policy) -> bool:
        """Whether this engine runs ``policy``."""
        return True

    @classmethod
    def refusal(cls, policy: Policy) -> str:
        """Why this engine does not run ``policy`` (asked when it was chosen by name)."""
        return f"the {cls.name} engine does not run {policy.name!r}: use another engine (--engine auto picks one)"

    def run(self, scenario: Scenario, policy: Policy, seed: int | None = None) -> Trace:
        """Simulate ``scenario`` under ``policy`` (reset here) with ``seed`` (default: the scenario's)."""
        raise NotImplementedError
