"""The worked examples of docs/guide/extending.md, each one file in examples/, run as a user runs
them: named in ``HETSIM_PLUGINS``, through ``python -m hetsim`` ``simulate`` (a scenario file that
uses the plug-in), ``analyze``, a small ``sweep`` and its plots, with the figures held to theory:
the distribution's moments against numerical integration of its quantile function and
``analyze`` against the exact E[max] of two of its delays; the cost model's ``batch_within``
against ``time_s`` (its exact inverse) and ``optimal``'s split against brute force; the network's
all-reduce against its formula; the policy's split and step against hand-computed values and
E[max] of two lognormal factors.

The validation workload example (examples/my_workload.py) is run for real, on 2 ranks, by
tests/test_workload_plugins.py (``--workload FILE:ATTR``) and, by the name it registers under
``HETSIM_PLUGINS``, by tests/test_documented_commands.py (validation/README.md's command), so it is
not run again here.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tomli_w
from scipy import integrate, special, stats

from hetsim.core.errors import ConfigError
from hetsim.core.registry import COSTS, DISTRIBUTIONS, NETWORKS, PLUGINS_ENV, POLICIES
from hetsim.engines import SimPyEngine, VectorEngine
from hetsim.policies import make_policy
from hetsim.policies.base import WorkerHint
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict

ROOT = Path(__file__).resolve().parent.parent
PLOTS = {"speedup.png", "gantt.png", "split.png", "step_cdf.png", "utilization.png"}
EXAMPLES = {  # file -> what it registers
    "my_policies.py": ((POLICIES, "drop-slowest"), (POLICIES, "shift")),
    "my_distribution.py": ((DISTRIBUTIONS, "lomax"),),
    "my_cost_model.py": ((COSTS, "power"),),
    "my_network.py": ((NETWORKS, "tree"),),
}


@pytest.fixture(scope="module")
def examples() -> Iterator[dict[str, ModuleType]]:
    """Each example imported in this process (which registers its plug-ins), unregistered after."""
    modules = {}
    for file in EXAMPLES:
        spec = importlib.util.spec_from_file_location(f"example_{Path(file).stem}", ROOT / "examples" / file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[file] = module
    yield modules
    for registry, name in (entry for entries in EXAMPLES.values() for entry in entries):
        registry.unregister(name)


def hetsim(plugins: str, *args: str) -> str:
    """``HETSIM_PLUGINS=plugins python -m hetsim ARGS`` from the repository root, as the examples'
    docstrings run it; its standard output (it must exit 0)."""
    env = {**os.environ, PLUGINS_ENV: plugins, "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-m", "hetsim", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def write(path: Path, data: dict[str, Any]) -> str:
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return str(path)


def sweep(plugins: str, tmp_path: Path, spec: dict[str, Any]) -> tuple[str, Path, list[dict[str, str]]]:
    """Run a sweep file of ``spec`` (one process): its output, its results folder, summary.csv's rows."""
    file = write(tmp_path / "sweep.toml", spec)
    out = hetsim(plugins, "sweep", file, "--jobs", "1", "--runs", str(tmp_path / "runs"))
    (run,) = (tmp_path / "runs").iterdir()
    with open(run / "summary.csv", encoding="utf-8", newline="") as f:
        return out, run, list(csv.DictReader(f))


def check_plots(run: Path) -> None:
    """Every plot of a results folder is there and drawn: a PNG of a figure's size with text,
    axes and data (hundreds of colours), not an empty canvas."""
    import matplotlib.image

    folder = run / "plots"
    assert PLOTS <= {p.name for p in folder.iterdir()}
    for name in PLOTS:
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        image = matplotlib.image.imread(folder / name)
        assert image.shape[0] >= 200 and image.shape[1] >= 400, (name, image.shape)
        colours = np.unique(image.reshape(-1, image.shape[-1]), axis=0)
        assert len(colours) >= 100, (name, len(colours))


def agrees(row: dict[str, Any]) -> bool:
    """Whether ``analyze``'s simulated mean is within two half-widths of its 95% CI (about four
    standard errors) of the prediction: a one-seed check that fails on a wrong prediction, not on
    the one run in twenty that a 95% interval misses."""
    half = (row["ci_high_s"] - row["ci_low_s"]) / 2
    return abs(row["simulated_step_s"] - row["predicted_step_s"]) <= max(2 * half, 1e-12 * row["predicted_step_s"])


def lognormal_noise(sigma: float, workers: int) -> list[str]:
    return [a for i in range(workers) for a in ("--set", f'workers.{i}.noise={{dist="lognormal", sigma={sigma}}}')]


# ----------------------------------------------------------------------------- the distribution


def test_the_distribution_example_has_the_moments_of_its_quantile_function(examples):
    lomax = examples["my_distribution.py"].Lomax(mean=0.02, shape=4.0)
    opts = {"epsabs": 0.0, "epsrel": 1e-11, "limit": 200}
    mean = integrate.quad(lambda u: float(lomax.ppf(np.array(u))), 0.0, 1.0, **opts)[0]
    second = integrate.quad(lambda u: float(lomax.ppf(np.array(u))) ** 2, 0.0, 1.0, **opts)[0]
    assert lomax.mean() == pytest.approx(mean, rel=1e-8)
    assert lomax.var() == pytest.approx(second - mean**2, rel=1e-7) == 0.02**2 * 2  # mean^2 a/(a-2)
    u = np.linspace(0.0, 1.0 - 1e-9, 1001)
    assert np.allclose(lomax.cdf(lomax.ppf(u)), u, rtol=1e-9, atol=1e-15)
    assert lomax.cdf(-1.0) == 0.0 and lomax.ppf(np.array([0.0]))[0] == 0.0
    survival_sq = integrate.quad(lambda t: 1.0 - float(lomax.cdf(t)) ** 2, 0.0, np.inf, epsrel=1e-11)[0]
    assert lomax.expected_max_of_two() == pytest.approx(survival_sq, rel=1e-8)
    with pytest.raises(ConfigError) as caught:
        lomax.__class__(mean=0.02, shape=2.0)
    assert str(caught.value) == "shape: must be > 2, got 2"


def _max_of_two_sd(lomax: Any) -> float:
    """The standard deviation of the larger of two independent delays."""
    second = integrate.quad(lambda t: 2 * t * (1.0 - float(lomax.cdf(t)) ** 2), 0.0, np.inf, epsrel=1e-10)[0]
    return math.sqrt(second - lomax.expected_max_of_two() ** 2)


@pytest.mark.slow
def test_the_distribution_example_through_simulate_analyze_sweep_and_plots(examples, tmp_path):
    plugin = "examples/my_distribution.py"
    lomax = examples["my_distribution.py"].Lomax(mean=0.02, shape=4.0)
    delay = {"dist": "lomax", "mean": 0.02, "shape": 4.0}
    workers = [{"count": 2, "per_sample_s": 0.001, "delay": delay}]  # 50 samples each: 50 ms, plus a delay
    raw = scenario_dict(workers, global_batch=100, steps_per_epoch=200, epochs=2,
                        network={"kind": "constant", "time_s": 0.005})  # fmt: skip
    scenario = write(tmp_path / "delays.toml", raw)
    exact = 0.05 + lomax.expected_max_of_two() + 0.005  # the step: both compute 50 ms, the larger delay, the exchange
    within = 4 * _max_of_two_sd(lomax) / math.sqrt(400)  # 4 standard errors of a 400-step mean

    (summary,) = json.loads(hetsim(plugin, "simulate", scenario, "--policy", "equal", "--json"))
    assert summary["steps"] == 400 and abs(summary["mean_step_s"] - exact) < within

    (row,) = json.loads(hetsim(plugin, "analyze", scenario, "--policy", "equal", "--json"))
    assert row["predicted_step_s"] == pytest.approx(exact, rel=1e-7)
    assert row["simulated_step_s"] == summary["mean_step_s"]
    assert agrees(row)

    spec = {"name": "delays", "base": "delays.toml", "policies": ["equal"], "replications": 2,
            "grid": {"workers.0.delay.mean": [0.01, 0.02]}}  # fmt: skip
    _, run, rows = sweep(plugin, tmp_path, spec)
    assert [r["workers.0.delay.mean"] for r in rows] == ["0.01", "0.02"]
    for r in rows:
        d = lomax.__class__(mean=float(r["workers.0.delay.mean"]), shape=4.0)
        assert abs(float(r["mean_step_s"]) - (0.055 + d.expected_max_of_two())) < 4 * _max_of_two_sd(d) / math.sqrt(800)
    check_plots(run)


# ----------------------------------------------------------------------------- the cost model


def test_the_cost_model_examples_batch_within_is_the_exact_inverse_of_time_s(examples):
    power = examples["my_cost_model.py"].Power
    batches = np.arange(1.0, 2049.0)
    for exponent in (0.5, 0.8, 1.0, 1.7):
        cost = power(overhead_s=0.01, per_sample_s=0.002, exponent=exponent)
        times = cost.time_s(batches)
        assert np.all(np.diff(times) > 0)
        back = np.array([cost.batch_within(float(t)) for t in times])
        assert np.allclose(back, batches, rtol=1e-12, atol=0.0)
        assert np.allclose(cost.time_s(back), times, rtol=1e-14, atol=0.0)
        assert cost.batch_within(0.01) == cost.batch_within(0.005) == 0.0  # no sample fits in the overhead
        assert cost.affine_terms() == ((0.01, 0.002) if exponent == 1.0 else None)
    assert power(per_sample_s=0.001, exponent=0.5).time_s(400) == pytest.approx(0.02, rel=1e-15)


def brute_force_split(costs: list[Any], total: int) -> tuple[tuple[int, int], float]:
    """The integer split of ``total`` over two workers with the smallest largest time (a worker
    without samples takes no time), by trying every split."""

    def slowest(b0: int) -> float:
        return max(float(c.time_s(b)) if b else 0.0 for c, b in zip(costs, (b0, total - b0)))

    best = min(range(total + 1), key=slowest)
    return (best, total - best), slowest(best)


@pytest.mark.slow
def test_the_cost_model_example_through_simulate_analyze_sweep_and_plots(examples, tmp_path):
    plugin = "examples/my_cost_model.py"
    power = examples["my_cost_model.py"].Power
    curves = [{"overhead_s": 0.01, "per_sample_s": 0.001, "exponent": 0.5},
              {"overhead_s": 0.01, "per_sample_s": 0.004, "exponent": 0.5}]  # fmt: skip
    costs = [power(**c) for c in curves]
    workers = [{"cost": {"model": "power", **c}} for c in curves]
    raw = scenario_dict(workers, global_batch=100, steps_per_epoch=50, epochs=2,
                        network={"kind": "constant", "time_s": 0.002})  # fmt: skip
    scenario = write(tmp_path / "power.toml", raw)
    split, slowest = brute_force_split(costs, 100)
    assert split == (95, 5)  # 0.001 sqrt(b0) = 0.004 sqrt(b1) at b0 = 16 b1: 94.1 and 5.9, rounded by min-max

    equal, optimal = json.loads(hetsim(plugin, "simulate", scenario, "--policy", "equal,optimal", "--json"))
    assert equal["mean_step_s"] == pytest.approx(float(costs[1].time_s(50)) + 0.002, rel=1e-12)
    assert optimal["final_batches"] == list(split)
    assert optimal["mean_step_s"] == pytest.approx(slowest + 0.002, rel=1e-12)

    noisy = lognormal_noise(0.1, 2)
    rows = json.loads(hetsim(plugin, "analyze", scenario, "--policy", "equal,optimal", "--json", *noisy))
    assert [agrees(r) for r in rows] == [True, True]
    assert rows[1]["prediction"]["final_batches"] == list(split)  # the split of the expected costs
    # E[max(t0 X0, t1 X1)] for mean-1 lognormal factors of sigma 0.1: int_0^inf 1 - F0(t) F1(t) dt
    scales = [float(c.time_s(b)) for c, b in zip(costs, split)]
    cdfs = [stats.lognorm(s=0.1, scale=t * math.exp(-0.005)) for t in scales]
    e_max = integrate.quad(lambda t: 1.0 - cdfs[0].cdf(t) * cdfs[1].cdf(t), 0.0, np.inf, epsrel=1e-11)[0]
    assert rows[1]["predicted_step_s"] == pytest.approx(e_max + 0.002, rel=1e-7)

    grid = {"workers.1.cost.exponent": [0.5, 1.0]}
    spec = {"name": "power", "base": "power.toml", "policies": ["optimal"], "grid": grid}
    _, run, cells = sweep(plugin, tmp_path, spec)
    for cell in cells:  # exponent 1 takes the affine (closed-form) path: the same optimum as brute force
        second = power(**{**curves[1], "exponent": float(cell["workers.1.cost.exponent"])})
        _, slowest = brute_force_split([costs[0], second], 100)
        assert float(cell["mean_step_s"]) == pytest.approx(slowest + 0.002, rel=1e-12)
    assert [c["workers.1.cost.exponent"] for c in cells] == ["0.5", "1.0"]
    check_plots(run)


# ----------------------------------------------------------------------------- the network model

LATENCY_S, BANDWIDTH_GBPS, GRADIENT_MB = 1e-4, 10.0, 10.0
HOP_S = LATENCY_S + GRADIENT_MB * 1e6 * 8 / (BANDWIDTH_GBPS * 1e9)  # 0.1 ms + 8 ms: one message of the gradient


def test_the_network_examples_allreduce_is_its_formula(examples):
    tree = examples["my_network.py"].Tree(latency_s=LATENCY_S, bandwidth_gbps=BANDWIDTH_GBPS)
    hops = {1: 0, 2: 2, 3: 4, 4: 4, 5: 6, 8: 6, 9: 8, 16: 8, 17: 10, 1024: 20, 1025: 22}  # 2 ceil(log2 n)
    for n, h in hops.items():
        assert tree.allreduce_s(n, GRADIENT_MB) == pytest.approx(h * HOP_S, rel=1e-15), n
    assert tree.allreduce_among(4, GRADIENT_MB, None) == tree.allreduce_s(4, GRADIENT_MB)
    assert tree.exchange_s(GRADIENT_MB) == 2 * HOP_S  # an async update: the two-party all-reduce
    with pytest.raises(ConfigError) as caught:
        tree.__class__(bandwidth_gbps=0.0)
    assert str(caught.value) == "bandwidth_gbps: must be > 0, got 0"


@pytest.mark.slow
def test_the_network_example_through_simulate_analyze_sweep_and_plots(tmp_path):
    plugin = "examples/my_network.py"
    network = {"kind": "tree", "latency_s": LATENCY_S, "bandwidth_gbps": BANDWIDTH_GBPS}
    workers = [{"count": 5, "overhead_s": 0.01, "per_sample_s": 0.001}]
    raw = scenario_dict(workers, global_batch=120, steps_per_epoch=10, epochs=2, network=network,
                        gradient_mb=GRADIENT_MB)  # fmt: skip
    scenario = write(tmp_path / "tree.toml", raw)

    def step_s(n: int) -> float:  # 120/n samples each, then 2 ceil(log2 n) hops
        return 0.01 + 0.001 * 120 / n + 2 * math.ceil(math.log2(n)) * HOP_S

    (summary,) = json.loads(hetsim(plugin, "simulate", scenario, "--policy", "equal", "--json"))
    assert summary["mean_step_s"] == pytest.approx(step_s(5), rel=1e-12) == 0.034 + 6 * 0.0081
    (row,) = json.loads(hetsim(plugin, "analyze", scenario, "--policy", "equal", "--json"))
    assert row["prediction"]["allreduce_s"] == pytest.approx(6 * HOP_S, rel=1e-15)
    assert row["predicted_step_s"] == pytest.approx(step_s(5), rel=1e-12) == row["simulated_step_s"]

    spec = {"name": "tree", "base": "tree.toml", "policies": ["equal"], "grid": {"workers.0.count": [2, 5]}}
    _, run, cells = sweep(plugin, tmp_path, spec)
    assert [(int(c["workers.0.count"]), float(c["mean_step_s"])) for c in cells] == [
        (2, pytest.approx(step_s(2), rel=1e-12)), (5, pytest.approx(step_s(5), rel=1e-12))]  # fmt: skip
    check_plots(run)


# ----------------------------------------------------------------------------- the policy

THREE = [{"per_sample_s": 0.001}, {"per_sample_s": 0.002}, {"per_sample_s": 0.004}]  # 1000, 500, 250 samples/s


def test_the_policy_example_splits_over_all_but_the_slowest(examples):
    from hetsim.model.costs import Affine

    hints = [WorkerHint(cost=Affine(per_sample_s=w["per_sample_s"])) for w in THREE]
    for leave_out, split in ((0, (69, 34, 17)), (1, (80, 40, 0)), (2, (120, 0, 0))):
        policy = make_policy("drop-slowest", {"leave_out": leave_out})
        policy.reset(3, 120, hints)
        assert policy.initial_split() == split
    with pytest.raises(ConfigError) as caught:
        make_policy("drop-slowest", {"leave_out": 3}, n_workers=3)
    assert str(caught.value) == "policy.leave_out: 3 would leave none of the 3 workers"
    assert POLICIES["drop-slowest"].closed_form and not POLICIES["drop-slowest"].resplits


def test_the_re_splitting_policy_example_moves_samples_each_epoch_on_both_engines(examples):
    from hetsim.run.metrics import summarize
    from hetsim.run.simulate import simulate

    raw = scenario_dict([{"per_sample_s": 0.001}, {"per_sample_s": 0.003}], global_batch=100, steps_per_epoch=5,
                        epochs=4, network={"kind": "constant", "time_s": 0.01})  # fmt: skip
    trace = simulate(load_scenario(raw), make_policy("shift", {"samples": 5}), engine=SimPyEngine())
    # 50/50, then 5 samples a epoch from the 3 ms worker to the 1 ms one: 55/45, 60/40, 65/35
    assert trace.per_step("local_batch")[::5, 0].tolist() == [50, 55, 60, 65]
    assert summarize(trace).mean_step_s == pytest.approx((0.15 + 0.135 + 0.12 + 0.105) / 4 + 0.01, rel=1e-12)
    assert simulate(load_scenario(raw), make_policy("shift", {"samples": 5}), engine=VectorEngine()) == trace
    noisy = load_scenario({**raw, "workers": [{**w, "noise": {"dist": "lognormal", "sigma": 0.3}} for w in THREE]})
    assert simulate(noisy, make_policy("shift"), engine=VectorEngine()) == simulate(
        noisy, make_policy("shift"), engine=SimPyEngine()
    )  # to the last bit
    with pytest.raises(ConfigError, match=r"^policy: give a Policy object \(Shift\(\)\), not the name 'shift'$"):
        simulate(noisy, "shift")  # type: ignore[arg-type]  # its class as the user names it, not the loader's module


@pytest.mark.slow
def test_the_policy_examples_through_simulate_analyze_sweep_and_plots(tmp_path):
    plugin = "examples/my_policies.py"
    raw = {**scenario_dict(THREE, global_batch=120, steps_per_epoch=100, epochs=2,
                           network={"kind": "constant", "time_s": 0.01}),
           "policy": {"name": "drop-slowest", "leave_out": 1}}  # fmt: skip
    scenario = write(tmp_path / "three.toml", raw)
    policies = "equal,drop-slowest,shift"

    equal, drop, shift = json.loads(hetsim(plugin, "simulate", scenario, "--policy", policies, "--json"))
    assert equal["mean_step_s"] == pytest.approx(0.16 + 0.01, rel=1e-12)  # the slowest: 40 samples at 4 ms
    assert drop["final_batches"] == [80, 40, 0] and drop["mean_step_s"] == pytest.approx(0.08 + 0.01, rel=1e-12)
    assert drop["speedup_vs_equal"] == pytest.approx(0.17 / 0.09, rel=1e-12)
    # shift: 40/40/40 in epoch 0 (160 ms), then 4 samples from the slowest to the quickest: 44/40/36 (144 ms)
    assert shift["final_batches"] == [44, 40, 36] and shift["mean_step_s"] == pytest.approx(0.162, rel=1e-12)

    sigma = 0.2
    rows = json.loads(hetsim(plugin, "analyze", scenario, "--policy", policies, "--json", *lognormal_noise(sigma, 3)))
    assert [agrees(r) for r in rows] == [True, True, True]
    assert rows[2]["runs"] == 10  # shift resplits: its interval is over seeded replications
    # two workers of 80 ms each (the third sits out), each times a mean-1 lognormal factor:
    # E[max(X1, X2)] = 2 Phi(sigma / sqrt 2)
    assert rows[1]["predicted_step_s"] == pytest.approx(0.08 * 2 * special.ndtr(sigma / math.sqrt(2)) + 0.01, rel=1e-7)

    spec = {"name": "drop", "base": "three.toml", "policies": policies.split(","),
            "grid": {"policy.leave_out": [1, 2]}, "replications": 1}  # fmt: skip
    out, run, cells = sweep(plugin, tmp_path, spec)
    assert (
        "| 1 | 1.000 | 1.889 | 1.049 |" in out and "| 2 | 1.000 | 1.308 | 1.049 |" in out
    )  # 0.17 / (0.09, 0.13, 0.162)
    steps = {(c["policy.leave_out"], c["policy"]): float(c["mean_step_s"]) for c in cells}
    assert steps == {
        (leave_out, policy): pytest.approx(step_s)
        for leave_out, drop_s in (("1", 0.09), ("2", 0.13))
        for policy, step_s in (("equal", 0.17), ("drop-slowest", drop_s), ("shift", 0.162))
    }
    check_plots(run)


# ----------------------------------------------------------------------------- all four at once


@pytest.mark.slow
def test_the_four_examples_together(examples, tmp_path):
    """The four files in one ``HETSIM_PLUGINS`` (separated as paths are): a scenario using each."""
    plugins = os.pathsep.join(f"examples/{file}" for file in EXAMPLES)
    power = {"model": "power", "overhead_s": 0.005, "per_sample_s": 0.002, "exponent": 0.8}
    workers = [{"cost": power, "delay": {"dist": "lomax", "mean": 0.01, "shape": 3.0}},
               {"cost": {**power, "per_sample_s": 0.004}}, {"cost": {**power, "per_sample_s": 0.008}}]  # fmt: skip
    raw = {**scenario_dict(workers, global_batch=60, steps_per_epoch=100, epochs=2, gradient_mb=1.0,
                           network={"kind": "tree", "latency_s": 1e-4, "bandwidth_gbps": 10.0}),
           "policy": {"name": "drop-slowest"}}  # fmt: skip
    (row,) = json.loads(hetsim(plugins, "analyze", write(tmp_path / "all.toml", raw), "--policy", "drop-slowest",
                               "--json"))  # fmt: skip
    hints = [WorkerHint(cost=COSTS["power"](**{k: v for k, v in w["cost"].items() if k != "model"}),
                        delay_s=0.01 if i == 0 else 0.0) for i, w in enumerate(workers)]  # fmt: skip
    policy = make_policy("drop-slowest")
    policy.reset(3, 60, hints)
    assert row["prediction"]["final_batches"] == list(policy.initial_split())
    # the all-reduce is among all 3 workers (the one without samples sends zeros): 2 ceil(log2 3) = 4 hops
    assert row["prediction"]["allreduce_s"] == pytest.approx(4 * (1e-4 + 1e6 * 8 / 10e9), rel=1e-12)
    assert agrees(row)
