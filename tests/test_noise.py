"""Correlated and persistent noise: a factor shared by a group of workers, and lognormal noise
whose log is a lag-1 autoregression. The draws against theory, the engines and the
predictions against simulation, and one-line errors for bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from hetsim.analysis.analytic import NoClosedForm, predict
from hetsim.analysis.orderstats import CommonFactorMax, ComputeTime, expected_max
from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from hetsim.engines import VectorEngine
from hetsim.model.distributions import Constant, LogNormal
from hetsim.model.draws import StepDraws
from hetsim.model.workers import SharedNoise, persistent_noise
from hetsim.policies import Async, Dynamic, Equal, KSync
from hetsim.run.metrics import mean_ci, step_times
from hetsim.run.simulate import simulate
from hetsim.scenario.config import build_scenario, load_scenario
from tests.helpers import scenario_dict
from tests.test_vector_engine import assert_same_trace


def lognormal(sigma: float, **extra: object) -> dict[str, object]:
    return {"dist": "lognormal", "sigma": sigma, **extra}


def noise_draws(workers: list[dict], steps: int, seed: int = 0) -> np.ndarray:
    """(steps x workers) noise factors, as both engines draw them."""
    s = build_scenario(scenario_dict(workers, global_batch=64))
    return StepDraws(seed, s.workers).take(0, steps)[0]


def lag1(x: np.ndarray, y: np.ndarray | None = None) -> float:
    """corr(x_t, y_{t+1}) (y = x: the lag-1 autocorrelation)."""
    y = x if y is None else y
    return float(np.corrcoef(x[:-1], y[1:])[0, 1])


# ----------------------------------------------------------------------------- the draws against theory


@pytest.mark.slow
def test_persistent_noise_keeps_the_lognormal_marginal_and_has_lag1_autocorrelation_rho():
    sigma, rho, n = 0.3, 0.8, 200_000
    x = noise_draws([{"per_sample_s": 1e-3, "noise": lognormal(sigma, persistence=rho)}], n)[:, 0]
    log = np.log(x)
    se_log = sigma * math.sqrt((1 + rho) / ((1 - rho) * n))  # the standard error of an AR(1) mean
    assert abs(log.mean() + sigma**2 / 2) < 5 * se_log
    assert log.std() == pytest.approx(sigma, rel=0.02)
    assert lag1(log) == pytest.approx(rho, abs=0.01)
    r = math.expm1(rho * sigma**2) / math.expm1(sigma**2)  # the factors' own lag-1 autocorrelation
    assert lag1(x) == pytest.approx(r, abs=0.015)
    se = math.sqrt(math.expm1(sigma**2) * (1 + r) / ((1 - r) * n))
    assert abs(x.mean() - 1.0) < 5 * se
    thinned = x[::60]  # rho^60 ~ 1e-6: close to independent, so a KS test applies
    assert stats.kstest(thinned, stats.lognorm(s=sigma, scale=math.exp(-(sigma**2) / 2)).cdf).pvalue > 1e-3


@pytest.mark.slow
def test_a_shared_group_correlates_its_members_as_theory_says():
    sn, ss, rho, n = 0.1, 0.3, 0.7, 200_000
    shared = {"group": "host0", **lognormal(ss, persistence=rho)}
    workers = [
        {"count": 2, "per_sample_s": 1e-3, "noise": lognormal(sn), "shared_noise": shared},
        {"per_sample_s": 1e-3, "noise": lognormal(sn)},  # outside the group
        {"per_sample_s": 1e-3, "noise": lognormal(sn), "shared_noise": {"group": "host1", **lognormal(ss)}},
    ]
    x = noise_draws(workers, n)
    corr = np.corrcoef(x.T)
    both = math.expm1(ss**2) / math.expm1(sn**2 + ss**2)  # cov = var(S), var = E[N^2] E[S^2] - 1
    assert corr[0, 1] == pytest.approx(both, abs=0.015)
    for i, j in ((0, 2), (0, 3), (2, 3), (1, 3)):
        assert abs(corr[i, j]) < 0.015
    assert np.allclose(x.mean(axis=0), 1.0, atol=0.01)
    assert lag1(x[:, 0], x[:, 1]) == pytest.approx(math.expm1(rho * ss**2) / math.expm1(sn**2 + ss**2), abs=0.015)
    assert abs(lag1(x[:, 3])) < 0.015  # host1's factor does not persist


def test_draws_are_the_same_however_steps_are_grouped_and_members_read_at_their_own_pace():
    shared = {"group": "h", **lognormal(0.3, persistence=0.9)}
    workers = [
        {"count": 2, "per_sample_s": 1e-3, "noise": lognormal(0.2, persistence=0.5), "shared_noise": shared},
        {"per_sample_s": 1e-3, "noise": {"dist": "gamma", "shape": 4.0, "scale": 0.25}, "shared_noise": shared},
    ]
    whole = noise_draws(workers, 1000, seed=7)
    s = build_scenario(scenario_dict(workers, global_batch=64))
    rng = np.random.default_rng(1)
    forward, first, parts = StepDraws(7, s.workers), 0, []
    while first < 1000:  # a forward reader, in random chunks
        parts.append(forward.rows(first, int(rng.integers(1, 40)))[0])
        first += len(parts[-1])
    assert np.array_equal(np.concatenate(parts)[:1000], whole)  # bit for bit
    paced, got = StepDraws(7, s.workers), np.empty((1000, 3))
    for k in rng.permutation(3000):  # members reading at their own pace, in any order
        got[k // 3, k % 3] = paced.at(k % 3, k // 3)[0]
    assert np.array_equal(got, whole)


# ----------------------------------------------------------------------------- engines and old traces


def test_without_the_new_keys_nothing_changes():
    base = load_scenario("workstation", ["workload.epochs=2"])
    same = load_scenario(
        "workstation",
        ["workload.epochs=2", "workers.0.noise={dist='lognormal', sigma=0.05, persistence=0.0}",
         "workers.1.shared_noise={group='one', dist='constant', value=1.0}"],
    )  # fmt: skip
    assert not persistent_noise(same.workers)
    for name in ("equal", "dynamic"):
        assert_same_trace(simulate(base, base.named_policy(name)), simulate(same, same.named_policy(name)))
        assert predict(base, base.named_policy(name)) == predict(same, same.named_policy(name))
    assert load_scenario(same.to_dict()) == same


@pytest.mark.slow
def test_engines_agree_on_a_long_run_with_shared_and_persistent_noise():
    workers = [
        {"count": 3, "overhead_s": 0.01, "per_sample_s": 0.001, "noise": lognormal(0.1, persistence=0.95),
         "shared_noise": {"group": "h", **lognormal(0.3, persistence=0.8)}},
        {"count": 2, "overhead_s": 0.02, "per_sample_s": 0.002, "noise": lognormal(0.05),
         "shared_noise": {"group": "h", **lognormal(0.3, persistence=0.8)}, "max_batch": 40},
        {"overhead_s": 0.02, "per_sample_s": 0.002, "shared_noise": {"group": "g", "dist": "uniform", "low": 0.5,
                                                                       "high": 1.5}},
    ]  # fmt: skip
    s = build_scenario(scenario_dict(workers, global_batch=120, steps_per_epoch=300, epochs=4))
    for name in ("equal", "dynamic", "adaptive", "ksync"):
        assert_same_trace(simulate(s, s.named_policy(name)), simulate(s, s.named_policy(name), engine=VectorEngine()))


def test_async_members_use_the_groups_nth_factor_for_their_nth_compute():
    workers = [
        {"per_sample_s": 1e-3, "shared_noise": {"group": "h", **lognormal(0.4, persistence=0.5)}},
        {"per_sample_s": 3e-3, "shared_noise": {"group": "h", **lognormal(0.4, persistence=0.5)}},
    ]
    s = build_scenario(scenario_dict(workers, global_batch=64, steps_per_epoch=50, epochs=2))
    trace = simulate(s, Async())
    fast, slow = (trace.compute_s[trace.worker == i] / (32 * c) for i, c in enumerate((1e-3, 3e-3)))
    assert len(fast) > len(slow) > 10  # at their own paces
    assert np.allclose(fast[: len(slow)], slow, rtol=1e-12)
    assert np.allclose(fast, noise_draws(workers, len(fast))[:, 0], rtol=1e-12)


# ----------------------------------------------------------------------------- predictions


def agreement(workers: list[dict], batches: int | None = None, steps: int = 100_000) -> tuple[float, float, float]:
    """(predicted, simulated mean, CI half-width) of ``equal``'s step over ``steps`` steps."""
    s = build_scenario(scenario_dict(workers, global_batch=50, steps_per_epoch=steps // 10, epochs=10))
    t = step_times(simulate(s, Equal(), engine=VectorEngine()))
    return predict(s, Equal()).mean_step_s, float(t.mean()), mean_ci(t, 0.95, batches).half_width


def host(noise: dict, shared: dict, delay: dict | None = None, mixed: dict | None = None) -> list[dict]:
    """Four workers on one host (two fast, two slow) and one on its own."""
    delay = delay or {"dist": "constant", "value": 0.002}
    return [
        {"count": 2, "overhead_s": 0.01, "per_sample_s": 0.001, "noise": noise, "delay": delay, "shared_noise": shared},
        {"count": 2, "overhead_s": 0.02, "per_sample_s": 0.002, "noise": mixed or noise, "delay": delay,
         "shared_noise": shared},
        {"overhead_s": 0.03, "per_sample_s": 0.0015, "noise": lognormal(0.1)},
    ]  # fmt: skip


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_analyze_under_a_shared_factor_agrees_with_a_long_simulation_and_independence_overpredicts():
    predicted, simulated, half = agreement(host(lognormal(0.05), {"group": "h", **lognormal(0.25)}))
    assert abs(predicted - simulated) < 3 * half
    independent = host(lognormal(math.hypot(0.05, 0.25)), {"group": "h", "dist": "constant", "value": 1.0})
    wrong = agreement(independent, steps=20)[0]  # the same marginals, drawn independently
    assert wrong - simulated > 20 * half


@pytest.mark.slow
@pytest.mark.parametrize(
    "noise,shared,delay,mixed",
    [
        ({"dist": "constant", "value": 1.0}, {"group": "h", **lognormal(0.25)}, None, None),
        ({"dist": "empirical", "samples": [0.9, 1.0, 1.1]}, {"group": "h", "dist": "gamma", "shape": 10, "scale": 0.1},
         None, lognormal(0.1)),
        (lognormal(0.05), {"group": "h", **lognormal(0.25)}, {"dist": "uniform", "low": 0.0, "high": 0.004}, None),
        (lognormal(0.05), {"group": "h", "dist": "empirical", "samples": [0.7, 1.0, 1.3]}, None, None),
    ],
    ids=["factor-only", "discrete-and-continuous-members", "random-delay", "discrete-factor"],
)  # fmt: skip
def test_analyze_agrees_for_every_kind_of_member_and_factor(noise, shared, delay, mixed):
    predicted, simulated, half = agreement(host(noise, shared, delay, mixed))
    assert abs(predicted - simulated) < 3 * half


@pytest.mark.slow
def test_persistence_leaves_a_static_prediction_as_it_was_and_batch_means_cover_it():
    shared = {"group": "h", **lognormal(0.25, persistence=0.9)}
    predicted, simulated, half = agreement(host(lognormal(0.05, persistence=0.5), shared), batches=50)
    assert abs(predicted - simulated) < 3 * half
    assert predicted == agreement(host(lognormal(0.05), {**shared, "persistence": 0.0}), steps=20)[0]


def test_a_common_factor_that_scales_everything_leaves_e_max_alone():
    members = [ComputeTime(s, LogNormal(0.1), Constant(0.0)) for s in (0.02, 0.03, 0.04)]
    assert expected_max([CommonFactorMax(members, LogNormal(0.3))]) == pytest.approx(expected_max(members), rel=1e-6)


def test_deterministic_members_under_a_common_factor_integrate_exactly():
    scales, delays, sigma = (0.02, 0.03, 0.01), (0.01, 0.0, 0.025), 0.3
    members = [ComputeTime(c, Constant(1.0), Constant(d)) for c, d in zip(scales, delays)]
    f = stats.lognorm(s=sigma, scale=math.exp(-(sigma**2) / 2))
    kinks = [1.0, 1.25, 1.5]  # where the fastest-growing member takes over
    exact = integrate.quad(lambda s: max(c * s + d for c, d in zip(scales, delays)) * f.pdf(s), 0, 20, points=kinks,
                           epsabs=1e-15, epsrel=1e-13, limit=500)[0]  # fmt: skip
    assert expected_max([CommonFactorMax(members, LogNormal(sigma))]) == pytest.approx(exact, rel=1e-9)


@pytest.mark.slow
def test_what_is_not_modelled_says_so():
    shared = {"group": "h", **lognormal(0.2)}
    s = build_scenario(scenario_dict(host(lognormal(0.05), shared), global_batch=50))
    with pytest.raises(NoClosedForm, match="share a noise factor"):
        predict(s, KSync())
    predict(s, Dynamic())  # the split follows expected times; E[max] of each split is exact
    predict(s, Async())  # the renewal rate needs only the means
    persistent = build_scenario(scenario_dict(host(lognormal(0.05, persistence=0.5), shared), global_batch=50))
    with pytest.raises(NoClosedForm, match="noise persists"):
        predict(persistent, Dynamic())


# ----------------------------------------------------------------------------- bad input

BAD = [
    ("workers.0.noise={dist='lognormal', sigma=0.1, persistence=1.0}", "workers.0.noise.persistence", "[0, 1)"),
    ("workers.0.noise={dist='lognormal', sigma=0.1, persistence=-0.2}", "workers.0.noise.persistence", "[0, 1)"),
    ("workers.0.noise={dist='lognormal', sigma=0.1, persistence='high'}", "workers.0.noise.persistence", "a number"),
    ("workers.0.noise={dist='gamma', shape=4, scale=0.25, persistence=0.5}", "workers.0.noise.persistence",
     "needs a lognormal factor"),
    ("workers.0.shared_noise={group='h', dist='gamma', shape=2, scale=1}", "workers.0.shared_noise", "mean 1"),
    ("workers.0.shared_noise={group='h', dist='lognormal', sigma=0.1, persistence=1}",
     "workers.0.shared_noise.persistence", "[0, 1)"),
    ("workers.0.shared_noise={group='h', dist='uniform', low=0.5, high=1.5, persistence=0.3}",
     "workers.0.shared_noise.persistence", "needs a lognormal factor"),
    ("workers.0.shared_noise={dist='lognormal', sigma=0.1}", "workers.0.shared_noise.group", "missing"),
    ("workers.0.shared_noise={group=3, dist='lognormal', sigma=0.1}", "workers.0.shared_noise.group", "a string"),
    ("workers.0.shared_noise={group='h', sigma=0.1}", "workers.0.shared_noise.dist", "missing"),
    ("workers.0.shared_noise={group='h', dist='lognormal', sigma=0.1, rho=0.5}", "workers.0.shared_noise.rho",
     "unknown parameter"),
    ("workers.0.shared_noise='h'", "workers.0.shared_noise", "must be a table"),
]  # fmt: skip
PAIR = "workers.0.shared_noise={group='h', dist='lognormal', sigma=0.1}"
DISAGREE = [
    "workers.1.shared_noise={group='h', dist='lognormal', sigma=0.2}",
    "workers.1.shared_noise={group='h', dist='lognormal', sigma=0.1, persistence=0.5}",
    "workers.1.shared_noise={group='h', dist='empirical', samples=[0.9, 1.1]}",
]


@pytest.mark.parametrize("override,field,problem", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_noise_input_names_the_field(override, field, problem):
    with pytest.raises(ConfigError) as err:
        load_scenario("workstation", [override])
    assert (err.value.field, "\n" in str(err.value)) == (field, False)
    assert problem in err.value.problem


@pytest.mark.parametrize("other", DISAGREE)
def test_members_of_a_group_must_declare_the_same_factor(other):
    with pytest.raises(ConfigError) as err:
        load_scenario("workstation", [PAIR, other])
    assert err.value.field == "workers.1.shared_noise"
    assert "group 'h'" in err.value.problem and "in workers.0" in err.value.problem
    assert "\n" not in str(err.value)
    load_scenario("workstation", [PAIR, PAIR.replace("workers.0", "workers.1")])  # the same factor is fine


def test_bad_input_built_directly_raises_the_same_problems():
    with pytest.raises(ConfigError, match="mean 1"):
        SharedNoise("h", Constant(2.0))
    with pytest.raises(ConfigError, match=r"persistence: must be in \[0, 1\)"):
        SharedNoise("h", LogNormal(0.1), 1.0)
    with pytest.raises(ConfigError, match="persistence: needs a lognormal factor"):
        build_scenario(scenario_dict([{"per_sample_s": 1e-3, "noise": {"dist": "exponential", "mean": 1.0,
                                                                          "persistence": 0.2}}]))  # fmt: skip


def test_the_command_line_gives_one_line_naming_the_field(capsys):
    assert main(["show", "workstation", "--set", BAD[0][0]]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "error: workers.0.noise.persistence: must be in [0, 1), got 1" in err
