"""The Python API takes objects: ``simulate`` runs a Policy object (None: the scenario's own), on
an Engine object (None: the engine the command line's ``auto`` picks); a name is refused in one
line naming the object to give (names are the files' and the command line's)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from hetsim.analysis.analytic import predict
from hetsim.analysis.step_ci import method, replication_reason, simulated_mean
from hetsim.calibrate import calibrate
from hetsim.core.errors import ConfigError
from hetsim.engines import SimPyEngine, VectorEngine, engine_named
from hetsim.model.costs import Affine
from hetsim.plan.planner import plan
from hetsim.policies import Async, Backup, Dynamic, DynamicEnhanced, Equal, KSync, Optimal, Policy, fresh
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate, simulate_summary
from hetsim.scenario.config import load_scenario

COLUMNS = ("local_batch", "compute_s", "wait_s", "comm_s", "start_s")


def same_trace(a, b) -> None:
    for col in COLUMNS:
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)


@pytest.fixture(scope="module")
def paper():
    return load_scenario("paper", ["workload.epochs=2"])


@pytest.mark.parametrize("name, obj", [("equal", Equal()), ("dynamic", Dynamic()), ("ksync", KSync(k=1))])
def test_a_policy_named_in_a_file_runs_as_its_object(paper, name: str, obj: Policy) -> None:
    params = {"k": 1} if name == "ksync" else None
    same_trace(
        simulate(paper, obj, engine=SimPyEngine()),
        simulate(paper, paper.named_policy(name, params), engine=SimPyEngine()),
    )


def test_policy_object_is_reset_between_runs(paper) -> None:
    """The same object run twice gives the same trace: the engine resets what it learned."""
    obj = Dynamic()
    same_trace(simulate(paper, obj), simulate(paper, obj))


def test_default_engine_is_auto_and_gives_the_reference_trace(paper) -> None:
    """The default is the command line's ``auto`` (vector for a barrier policy): the trace is the
    SimPy reference's, as it is on either engine object."""
    same_trace(simulate(paper, Dynamic()), simulate(paper, Dynamic(), engine=SimPyEngine()))
    same_trace(simulate(paper, Dynamic(), engine=VectorEngine()), simulate(paper, Dynamic(), engine=SimPyEngine()))
    assert (
        simulate_summary(paper, Equal()).mean_step_s
        == simulate_summary(paper, Equal(), engine=SimPyEngine()).mean_step_s
    )


def test_params_with_a_policy_object_are_refused(paper) -> None:
    with pytest.raises(ConfigError, match="params: given with a policy object"):
        simulate(paper, Equal(), params={"x": 1})


BAD_ARGUMENTS = [
    (lambda sc, tr: simulate("paper", Equal()),
     r"^scenario: expected a Scenario \(made by hetsim.load_scenario\(name, file or dict\)\), "
     r"got a string \('paper'\)$"),
    (lambda sc, tr: simulate_summary({"workers": []}, Equal()), r"^scenario: expected a Scenario .*got a table$"),
    (lambda sc, tr: simulate(sc, Dynamic),
     r"^policy: got the class Dynamic: give an object \(Dynamic\(\)\)$"),
    (lambda sc, tr: simulate(sc, 3), r"^policy: expected a Policy object or None, got int \(3\)$"),
    (lambda sc, tr: simulate(sc, "equal"),
     r"^policy: give a Policy object \(hetsim\.policies\.Equal\(\)\), not the name 'equal'$"),
    (lambda sc, tr: simulate_summary(sc, "no-such"),
     r"^policy: give a Policy object \(as hetsim\.policies\.Equal\(\)\), not a name "
     r"\('no-such' is not a registered one\)$"),
    (lambda sc, tr: method(sc, "equal"), r"^policy: give a Policy object \(hetsim\.policies\.Equal\(\)\)"),
    (lambda sc, tr: replication_reason(sc, 3), r"^policy: expected a Policy object or None, got int \(3\)$"),
    (lambda sc, tr: sc.named_policy(Equal()),
     r"^policy: Equal\(\) is an object already: give it to simulate, predict or plan as it is$"),
    (lambda sc, tr: plan(sc, policies=Optimal()), r"^policies: give a list of Policy objects .*, not Optimal\(\)$"),
    (lambda sc, tr: plan(sc, policies=[]), r"^policies: empty: give at least one Policy object, or None for every"),
    (lambda sc, tr: simulated_mean(sc, Equal(), level=95), r"^level: must be in \(0, 1\), got 95$"),
    (lambda sc, tr: Optimal("x"), r"^Optimal\(\) takes no parameters, got 1 positional$"),
    (lambda sc, tr: load_scenario({**sc.to_dict(), "policy": Optimal()}),
     r"^policy: must be a table, got Optimal \(Optimal\(\)\) \(a Policy object goes to simulate, predict or plan\)$"),
    (lambda sc, tr: fresh("adaptive"), r"^policy: expected a Policy object, got str \('adaptive'\)$"),
    (lambda sc, tr: calibrate(tr, policy=Equal()), r"^policy: the label of a policy's rows in the trace \(such as "),
    (lambda sc, tr: calibrate(tr, model=Affine(0.02, 0.004)), r"^model: give the class \(Affine\), not an object"),
    (lambda sc, tr: engine_named(VectorEngine()),
     r"^engine: 'vector' is an object already: give it to simulate as it is$"),
    (lambda sc, tr: plan(sc, policies="equal"),
     r"^policies: give a list of Policy objects \(as \[hetsim\.policies\.Equal\(\)\]\), not 'equal'$"),
    (lambda sc, tr: plan(sc, policies=[Equal(), KSync(k=9)]), r"^policies\.1\.k: "),
    (lambda sc, tr: predict(sc, "dynamic-enhanced"),
     r"^policy: give a Policy object \(hetsim\.policies\.DynamicEnhanced\(\)\)"),
    (lambda sc, tr: simulated_mean(sc, "async"), r"^policy: give a Policy object \(hetsim\.policies\.Async\(\)\)"),
    (lambda sc, tr: plan(sc, policies=["equal"]),
     r"^policies\.0: give a Policy object \(hetsim\.policies\.Equal\(\)\)"),
    (lambda sc, tr: simulate(sc, Equal(), engine="simpy"),
     r"^engine: give an Engine object \(hetsim\.engines\.SimPyEngine\(\)\) or None \(auto\), not the name 'simpy'$"),
    (lambda sc, tr: simulate(sc, Equal(), engine=SimPyEngine),
     r"^engine: got the class SimPyEngine: give an object \(SimPyEngine\(\)\)$"),
    (lambda sc, tr: simulate(sc, Equal(), engine="auto"),
     r"^engine: give an Engine object or None \(auto\), not the name 'auto'$"),
    (lambda sc, tr: simulate(sc, Equal(), seed="x"), r"^seed: must be an integer, got a string \('x'\)$"),
    (lambda sc, tr: simulate(sc, Equal(), seed=True), r"^seed: must be an integer, got a boolean \(true\)$"),
    (lambda sc, tr: simulate(sc, Equal(), seed=1.5), r"^seed: must be an integer, got float \(1.5\)$"),
    (lambda sc, tr: simulate_summary(sc, Equal(), seed=-1), r"^seed: must be >= 0, got -1$"),
    (lambda sc, tr: summarize("x"), r"^trace: expected a Trace \(what hetsim.simulate returns\), got a string"),
    (lambda sc, tr: summarize(tr, "paper"), r"^scenario: expected a Scenario"),
    (lambda sc, tr: predict("paper", Equal()), r"^scenario: expected a Scenario"),
    (lambda sc, tr: plan("paper"), r"^scenario: expected a Scenario"),
    (lambda sc, tr: plan(sc, seed=-2), r"^seed: must be >= 0, got -2$"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "message"), BAD_ARGUMENTS, ids=range(len(BAD_ARGUMENTS)))
def test_the_api_checks_its_arguments_at_the_boundary(paper, call, message) -> None:
    """Objects in, checked where they enter (a name or a dict where a Scenario belongs, a policy
    class for an object, a seed NumPy would refuse naming no field): a ConfigError naming the
    argument, not an AttributeError from deep inside."""
    trace = simulate(paper, Equal(), seed=np.int64(3))  # a NumPy integer is a seed
    with pytest.raises(ConfigError, match=message):
        call(paper, trace)


def test_a_policy_object_is_checked_against_the_cluster(paper) -> None:
    with pytest.raises(ConfigError, match=r"^policy\.k"):
        simulate(paper, KSync(k=paper.n_workers + 1))


class _BarrierOnly(SimPyEngine):
    name = "barrier-only"

    @classmethod
    def supports(cls, policy: Policy) -> bool:
        return policy.synchronous


def test_an_engine_object_that_does_not_run_the_policy_is_refused(paper) -> None:
    with pytest.raises(ConfigError, match="^engine: the barrier-only engine does not run 'async'"):
        simulate(paper, Async(), engine=_BarrierOnly())
    assert simulate(paper, Equal(), engine=_BarrierOnly()).n_workers == 2


class _EvenSplit(Policy):
    """A static plug-in as the docs write one: a name and an initial split, no engine hints."""

    name = "even-split"
    excludes_failed = False


class _Watcher(_EvenSplit):
    name = "watcher"

    def observe(self, record) -> None:
        self.seen = record


def test_a_plugin_that_keeps_its_split_gets_the_fast_path(paper) -> None:
    """steady_steps follows from what a class overrides: none of the split hooks -> every step
    (one block on the vector engine); an observe -> 1 (safe); built-ins keep theirs."""
    from hetsim.policies import Proportional
    from hetsim.policies.base import UNTIL_THE_END

    info = None  # the defaults do not look at it
    for policy, steps in ((_EvenSplit(), UNTIL_THE_END), (_Watcher(), 1), (Equal(), UNTIL_THE_END),
                          (Proportional(), UNTIL_THE_END), (Optimal(), UNTIL_THE_END)):  # fmt: skip
        assert policy.steady_steps(info) == steps, policy.name
    same_trace(simulate(paper, _EvenSplit(), engine=VectorEngine()), simulate(paper, Equal(), engine=SimPyEngine()))
    same_trace(simulate(paper, _Watcher(), engine=VectorEngine()), simulate(paper, Equal(), engine=SimPyEngine()))


class UnregisteredPlain(DynamicEnhanced):
    """EDP-SGD's split with the plain mean: ``dynamic`` under another name, registered nowhere."""

    name = "unregistered-plain"
    weighted_gradients = False


@pytest.mark.parametrize("summarised", [False, True])
def test_the_combine_comes_from_the_policy_object_not_its_name(summarised: bool) -> None:
    """How gradients are combined is the policy object's trait, recorded by the engine: an
    unregistered policy averaging its gradients progresses as ``dynamic`` (same split, plain
    mean), not as ``dynamic-enhanced`` (the weighted combine), whether its run keeps its trace."""
    sc = load_scenario(
        "paper",
        ["workload.epochs=2", "workload.efficiency.base_batch=256", "workload.efficiency.noise_scale=64"],
    )

    def progress(policy: Policy) -> float:
        summary = simulate_summary(sc, policy) if summarised else summarize(simulate(sc, policy), sc)
        assert summary.progress is not None
        return summary.progress

    plain, weighted = progress(Dynamic()), progress(DynamicEnhanced())
    assert plain < weighted * (1 - 1e-4)  # the split is uneven: the combine matters
    assert progress(UnregisteredPlain()) == pytest.approx(plain, rel=1e-12)
    assert simulate(sc, UnregisteredPlain()).weighted is False


class UnregisteredBackup(Backup):
    name = "unregistered-backup"


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_analysis_takes_the_combine_from_the_policy_object_too() -> None:
    """``predict`` of an unregistered policy (a barrier one waiting for all, and one waiting for
    the first k) reads the object's combine, as the simulator does, not a registry by its name."""
    sc = load_scenario(
        "paper",
        ["workload.epochs=2", "workload.efficiency.base_batch=256", "workload.efficiency.noise_scale=64"],
    )
    mine, theirs = predict(sc, UnregisteredPlain()), predict(sc, Dynamic())
    assert mine.policy == "unregistered-plain" and mine.progress == pytest.approx(theirs.progress, rel=1e-12)
    assert mine.progress < predict(sc, DynamicEnhanced()).progress * (1 - 1e-4)
    six = load_scenario("mixed-gpus", ["workload.efficiency.base_batch=256", "workload.efficiency.noise_scale=64"])
    mine, theirs = predict(six, UnregisteredBackup()), predict(six, Backup())
    assert mine.policy == "unregistered-backup" and mine.mean_step_s == theirs.mean_step_s
    assert theirs.progress is not None and mine.progress == theirs.progress


class _Broken(Policy):
    """A plug-in whose split breaks the contract in the way ``how`` names, from the first step
    (``at_start``) or after one step."""

    name = "broken"

    def __init__(self, how: str, at_start: bool) -> None:
        super().__init__()
        self.how, self.at_start = how, at_start

    def initial_split(self) -> tuple[int, ...]:
        good = super().initial_split()
        return self._broken(good) if self.at_start else good

    def observe(self, record) -> None:
        self._batches = self._broken(record.local_batches)

    def _broken(self, good):
        first = good[0]
        return {"sum": (first - 1, *good[1:]), "negative": (-1, first + 1, *good[2:]),
                "float": (float(first), *good[1:]), "length": good[:-1],
                "cap": (self.global_batch, *[0] * (len(good) - 1))}[self.how]  # fmt: skip


@pytest.mark.parametrize("engine", [SimPyEngine(), VectorEngine()], ids=["simpy", "vector"])
@pytest.mark.parametrize(
    ("how", "line"),
    [
        ("sum", "broken's split 127/128 sums to 255, not the global batch 256"),
        ("negative", "broken's split -1/129: worker 0's batch -1 is not a whole number >= 0"),
        ("float", "broken's split 128.0/128: worker 0's batch 128.0 is not a whole number >= 0"),
        ("length", "broken's split 128 has 1 entries for 2 workers"),
        ("cap", "broken's split 256/0: worker 0's batch 256 is beyond its max_batch 200"),
    ],
)
@pytest.mark.parametrize("at_start", [True, False], ids=["first-step", "later"])
def test_a_split_that_breaks_the_contract_is_refused_in_one_line(paper, engine, how, line, at_start) -> None:
    """Both engines check each new split: whole numbers >= 0, one per worker, within max_batch,
    summing to the global batch (before, a plug-in's bad split ran silently to wrong figures)."""
    raw = paper.to_dict()
    raw["workers"][0]["max_batch"] = 200
    scenario = load_scenario(raw)
    with pytest.raises(ConfigError) as err:
        simulate(scenario, _Broken(how, at_start), engine=engine)
    assert str(err.value) == f"policy: {line}"


def test_a_split_of_numpy_integers_of_mixed_kinds_is_accepted() -> None:
    """uint64 beside int makes a float array: the split is then checked value by value, not refused."""
    from hetsim.policies import make_policy
    from hetsim.policies.base import check_split

    policy = make_policy("equal")
    policy.reset(2, 256)
    check_split(policy, (np.uint64(128), 128))
    with pytest.raises(ConfigError, match="worker 1's batch 128.5 is not a whole number"):
        check_split(policy, (np.uint64(128), 128.5))


class _BrokenAsync(Async):
    """An async plug-in whose split sums short of the global batch."""

    name = "broken-async"

    def initial_split(self) -> tuple[int, ...]:
        good = super().initial_split()
        return (good[0] - 1, *good[1:])


@pytest.mark.parametrize("engine", [SimPyEngine(), VectorEngine()], ids=["simpy", "vector"])
def test_an_async_split_that_breaks_the_contract_is_refused_in_one_line(paper, engine) -> None:
    """The asynchronous engines take the split once, and check it as the barrier ones do."""
    with pytest.raises(ConfigError) as err:
        simulate(paper, _BrokenAsync(), engine=engine)
    assert str(err.value) == "policy: broken-async's split 127/128 sums to 255, not the global batch 256"


class _WaitFor(Equal):
    """A first-k plug-in whose ``wait_for`` gives ``need``."""

    name = "wait-for"

    def __init__(self, need: object) -> None:
        super().__init__()
        self.need = need

    def wait_for(self):
        return self.need


@pytest.mark.parametrize("need", [0, 3, -1, True, 1.5], ids=str)
def test_a_wait_for_outside_one_to_the_workers_is_refused_on_both_engines_and_in_predict(paper, need) -> None:
    """0 would end a step before any gradient (the engines disagreed: all samples dropped on
    simpy, a quarter on vector), more than the workers is no barrier: one line naming the value."""
    line = f"policy: wait-for's wait_for() gave {need!r}: give a whole number from 1 to the 2 workers"
    for run in (partial(simulate, engine=SimPyEngine()), partial(simulate, engine=VectorEngine()), predict):
        with pytest.raises(ConfigError) as err:
            run(paper, _WaitFor(need))
        assert str(err.value) == line
    assert simulate_summary(paper, _WaitFor(1)).mean_step_s < simulate_summary(paper, _WaitFor(2)).mean_step_s


def test_a_scenario_dict_made_in_python_takes_plugin_objects_where_a_file_has_tables() -> None:
    """load_scenario refused a cost, noise or network object ("must be a table"), so a plug-in
    object could only reach a scenario through its table."""
    from hetsim.core.registry import DISTRIBUTIONS
    from hetsim.model.network import Ring
    from tests.helpers import scenario_dict

    lognormal = DISTRIBUTIONS["lognormal"](sigma=0.1)
    raw = scenario_dict([{"cost": Affine(0.01, 0.001), "noise": lognormal}, {"cost": Affine(0.01, 0.002)}])
    raw["network"] = Ring(latency_s=1e-5, bandwidth_gbps=10.0)
    made = load_scenario(raw)
    assert made.workers[0].cost == Affine(0.01, 0.001) and made.workers[0].noise == lognormal
    tables = made.to_dict()
    assert tables["workers"][0]["noise"] == {"dist": "lognormal", "sigma": 0.1}
    assert load_scenario(tables).to_dict() == tables  # the same scenario as its file would make
    with pytest.raises(ConfigError, match=r"^network: must be a network or its table, got Affine"):
        load_scenario({**raw, "network": Affine(0.01, 0.001)})
    with pytest.raises(ConfigError, match=r"^workers\.0\.noise: a noise factor must have mean 1"):
        load_scenario(
            {**raw, "workers": [{"cost": Affine(0.01, 0.001), "noise": DISTRIBUTIONS["constant"](value=2.0)}]}
        )


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_plan_takes_policy_objects_and_leaves_them_unchanged() -> None:
    """``plan`` plans an unregistered plug-in beside built-in objects, as it plans the built-in
    ones alone, fragility and ``cost_error`` included, without running the caller's objects; two
    of one name are refused."""

    sc = load_scenario("mixed-gpus")
    built_in = plan(sc, policies=[Equal(), Optimal()])
    mine = [Equal(), Optimal(), _EvenSplit()]
    by_object = plan(sc, policies=mine)
    assert [r.policy for r in by_object.rows] == ["equal", "optimal", "even-split"]
    assert by_object.rows[:2] == built_in.rows and by_object.recommended == built_in.recommended
    assert by_object.fragility == built_in.fragility and by_object.rows[2].split == built_in.rows[0].split
    assert all(not hasattr(p, "n_workers") for p in mine)  # never reset: the plan ran copies
    robust = plan(sc, policies=[Equal(), _EvenSplit()], cost_error=0.2).rows
    assert [r.how.split(", mean of ")[1] for r in robust] == ["16 draws of costs off by 0.2"] * 2  # a plug-in too
    with pytest.raises(ConfigError, match="^policies: 'equal' is given twice: a plan tells its policies apart"):
        plan(sc, policies=[Equal(), Equal()])
