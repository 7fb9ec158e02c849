"""What a scenario is: the frozen, validated objects the scenario factory (:mod:`hetsim.scenario.config`)
builds from a file, and everything else reads: the workload, the worker groups, the network
model, the policy's name and parameters, and the seed.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from hetsim.core.errors import ConfigError
from hetsim.core.params import MAX_SEED, typename
from hetsim.model.efficiency import Efficiency
from hetsim.model.network import Buckets, NetworkModel, Nodes
from hetsim.model.workers import WorkerSpec
from hetsim.policies import POLICIES, Policy, RunHint, WorkerHint, make_policy
from hetsim.policies.base import NO_EFFICIENCY

DEFAULT_BACKWARD_FRACTION = 2.0 / 3.0  # backward ~ twice the forward pass's time


@dataclass(frozen=True)
class Workload:
    global_batch: int
    dataset_size: int
    epochs: int
    gradient_mb: float = 0.0
    backward_fraction: float | None = None  # the backward pass's share of the compute (None: the default)
    efficiency: Efficiency | None = None  # statistical efficiency (None: throughput only)

    @property
    def backward_share(self) -> float:
        """The backward pass's share of every worker's compute: ``backward_fraction``, or
        :data:`DEFAULT_BACKWARD_FRACTION` (used only when the network overlaps in buckets)."""
        return DEFAULT_BACKWARD_FRACTION if self.backward_fraction is None else self.backward_fraction

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size // self.global_batch

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs


@dataclass(frozen=True)
class WorkerGroup:
    spec: WorkerSpec
    count: int = 1


@dataclass(frozen=True)
class PolicySpec:
    name: str = "equal"
    params: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dict(self.params)}


@dataclass(frozen=True)
class Scenario:
    """One cluster and its job, checked and built: the ``workload``, the ``network`` model, the
    workers in ``groups`` (each a :class:`~hetsim.model.workers.WorkerSpec` and a count;
    ``workers`` lists them one by one), the default ``policy`` and the ``seed`` every draw is
    spawned from. Made by :func:`~hetsim.scenario.config.load_scenario` from a built-in name, a
    file or a dict (the scenario-file schema); ``to_dict`` gives that dict back."""

    name: str
    seed: int
    workload: Workload
    network: NetworkModel
    groups: tuple[WorkerGroup, ...]
    policy: PolicySpec = field(default_factory=PolicySpec)
    description: str = ""

    def __post_init__(self) -> None:
        try:
            self.network.bucket_sizes(self.workload.gradient_mb)
        except ConfigError as exc:
            raise ConfigError(f"network.{exc.field}", exc.problem) from None
        if self.network.uses_nodes:
            for i, g in enumerate(self.groups):
                if g.spec.node is None:
                    raise ConfigError(
                        f"workers.{i}.node", f"missing (the {self.network.name} network needs every worker's node)"
                    )

    @cached_property
    def workers(self) -> tuple[WorkerSpec, ...]:
        """One spec per worker, groups expanded in file order (computed once per scenario)."""
        out = []
        for g in self.groups:
            if g.count == 1:
                out.append(g.spec)
            else:
                out.extend(replace(g.spec, name=f"{g.spec.name}#{k}") for k in range(g.count))
        return tuple(out)

    @property
    def n_workers(self) -> int:
        return sum(g.count for g in self.groups)

    @cached_property
    def nodes(self) -> Nodes | None:
        """How many workers each node holds, nodes in order of first appearance, when the network
        ``uses_nodes`` (None otherwise: the layout changes nothing and is not asked for)."""
        if not self.network.uses_nodes:
            return None
        count: dict[str | None, int] = {}
        for w in self.workers:
            count[w.node] = count.get(w.node, 0) + 1
        return tuple(count.values())

    def allreduce_s(self) -> float:
        """The whole gradient's all-reduce (what follows the barrier without buckets)."""
        return self.network.allreduce_among(self.n_workers, self.workload.gradient_mb, self.nodes)

    def buckets(self) -> Buckets | None:
        """The network's overlap of the all-reduce with the backward pass (None: none)."""
        return self._buckets

    @cached_property
    def _buckets(self) -> Buckets | None:
        wl = self.workload
        return self.network.buckets(self.n_workers, wl.gradient_mb, wl.backward_share, self.nodes)

    def make_policy(self, policy: Policy | None = None, params: Mapping[str, Any] | None = None) -> Policy:
        """The policy to run on this scenario: ``policy`` as it is (its parameters are its own:
        ``params`` with one is an error), or (None) the scenario's own, built fresh from its
        ``[policy]`` table's parameters, then ``params``. Either is checked against the cluster's
        size (ConfigError on ``policy.<parameter>``). A name is refused: names are resolved in
        files and on the command line (:meth:`named_policy`)."""
        if isinstance(policy, str):
            raise ConfigError("policy", _name_given(policy))
        if isinstance(policy, type) and issubclass(policy, Policy):
            raise ConfigError("policy", f"got the class {policy.__name__}: give an object ({policy.__name__}())")
        if not isinstance(policy, (Policy, type(None))):
            raise ConfigError("policy", f"expected a Policy object or None, got {typename(policy)}")
        if policy is None:
            return self.named_policy(self.policy.name, params)
        if params:
            raise ConfigError("params", "given with a policy object: set them when building the object")
        try:
            policy.check_cluster(self.n_workers)
        except ConfigError as exc:
            raise ConfigError(f"policy.{exc.field}", exc.problem) from None
        return self._with_efficiency(policy)

    def named_policy(self, name: str, params: Mapping[str, Any] | None = None) -> Policy:
        """The registered policy ``name`` (a file's or the command line's), built fresh with the
        scenario's ``[policy]`` parameters where it is the scenario's own policy, then ``params``,
        and checked against the cluster's size (ConfigError on ``policy.<parameter>``)."""
        if isinstance(name, Policy):
            what = f"{type(name).__name__}()"
            raise ConfigError("policy", f"{what} is an object already: give it to simulate, predict or plan as it is")
        own = dict(self.policy.params) if name == self.policy.name else {}
        return self._with_efficiency(make_policy(name, {**own, **dict(params or {})}, n_workers=self.n_workers))

    def _with_efficiency(self, policy: Policy) -> Policy:
        """``policy``, refused where it chooses the global batch by statistical efficiency the
        scenario's workload lacks."""
        if policy.needs_efficiency and self.workload.efficiency is None:
            raise ConfigError(
                "workload.efficiency",
                f"missing: policy {policy.name!r} chooses the global batch by statistical efficiency "
                "(give noise_scale and base_batch)",
            )
        return policy

    def run_hint(self) -> RunHint:
        """What every policy is told about the run: the all-reduce after the barrier and the
        workload's statistical efficiency."""
        return RunHint(self.allreduce_s(), self.workload.efficiency)

    def runnable_policies(self) -> tuple[dict[str, Policy], tuple[tuple[str, str], ...]]:
        """Every registered policy that can run this scenario, built (and so checked) once by
        name, and (name, why) for each that cannot: one that needs the statistical efficiency the
        scenario lacks, or whose parameters do not fit the cluster (what simulate and plan leave out).
        The scenario's own ``[policy]`` with parameters that do not fit is refused (ConfigError):
        those are the file's, not a default."""
        built: dict[str, Policy] = {}
        left_out = []
        for name, cls in POLICIES.items():
            if cls.needs_efficiency and self.workload.efficiency is None:
                left_out.append((name, NO_EFFICIENCY))
                continue
            try:
                built[name] = self.named_policy(name)
            except ConfigError as exc:
                if name == self.policy.name and self.policy.params:
                    raise
                left_out.append((name, str(exc)))
        return built, tuple(left_out)

    def hints(self) -> tuple[WorkerHint, ...]:
        """What the cost-aware policies are told: caps and the true expected cost curves (cost
        model, noise mean, mean delay)."""
        return self._hints

    @cached_property
    def _hints(self) -> tuple[WorkerHint, ...]:
        return tuple(WorkerHint(w.cap, w.cost, w.noise.mean(), w.delay.mean()) for w in self.workers)

    def unfitted(self) -> tuple[str, ...]:
        """A line per worker entry whose cost is a guess, not a fit (its ``unfitted`` key, which
        ``calibrate`` writes for a worker the trace left idle): a result that gives it samples
        rests on that guess, so the commands say these lines on stderr."""
        groups = enumerate(self.groups)
        return tuple(f"workers.{i} ({g.spec.name}): {g.spec.unfitted}" for i, g in groups if g.spec.unfitted)

    def to_dict(self) -> dict[str, Any]:
        """The scenario-file form; ``load_scenario(s.to_dict())`` rebuilds an equal scenario."""
        out: dict[str, Any] = {"name": self.name, "seed": self.seed}
        if self.description:
            out["description"] = self.description
        out["workload"] = {
            "global_batch": self.workload.global_batch,
            "dataset_size": self.workload.dataset_size,
            "epochs": self.workload.epochs,
            "gradient_mb": self.workload.gradient_mb,
        }
        if self.workload.backward_fraction is not None:
            out["workload"]["backward_fraction"] = self.workload.backward_fraction
        if self.workload.efficiency is not None:
            out["workload"]["efficiency"] = self.workload.efficiency.to_dict()
        out["network"] = self.network.to_dict()
        out["workers"] = [{**g.spec.to_dict(), "count": g.count} for g in self.groups]
        out["policy"] = self.policy.to_dict()
        return out


def check_scenario(value: object) -> Scenario:
    """``value``, a :class:`Scenario`; anything else is a ConfigError on ``scenario``. The Python
    API takes objects: a name, a file or a dict becomes one through
    :func:`~hetsim.scenario.config.load_scenario` first."""
    if not isinstance(value, Scenario):
        made = "hetsim.load_scenario(name, file or dict)"
        raise ConfigError("scenario", f"expected a Scenario (made by {made}), got {typename(value)}")
    return value


def check_seed(seed: object, field: str = "seed") -> int | None:
    """``seed`` as an int (None: the scenario's); a boolean, a fraction, a negative number or
    one above :data:`MAX_SEED` is a ConfigError on ``field`` (NumPy's own error would name none)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ConfigError(field, f"must be an integer, got {typename(seed)}")
    value = int(seed)
    if value < 0:
        raise ConfigError(field, f"must be >= 0, got {value}")
    if value > MAX_SEED:
        raise ConfigError(field, f"must be <= {MAX_SEED} (TOML's largest integer), got {value}")
    return value


def _name_given(name: str) -> str:
    """The error for a policy's name given where its object belongs: the object to give instead
    (:meth:`~hetsim.core.registry.Registry.spelled`)."""
    spelled = POLICIES.spelled(name)
    if spelled is None:
        return f"give a Policy object (as hetsim.policies.Equal()), not a name ({name!r} is not a registered one)"
    return f"give a Policy object ({spelled}), not the name {name!r}"
