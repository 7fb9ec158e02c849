"""Closed forms of the first-k policies (backup, K-sync): their progress and time to target by
hand, and their ties, against simulation (split from tests/test_analytic.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from hetsim.analysis.analytic import predict
from hetsim.engines import VectorEngine
from hetsim.policies import Backup, Equal
from hetsim.run.metrics import summarize
from hetsim.run.simulate import simulate
from hetsim.scenario.config import load_scenario
from tests.helpers import scenario_dict


def _three_speeds(global_batch: int, noise: dict[str, Any] | None = None, noise_scale: Any = 20) -> Any:
    """Workers of 1, 2 and 4 ms a sample, no overhead, a 5 ms all-reduce; one epoch of 50 steps;
    gain(B) = (B / 10) (20 + 10) / (20 + B) steps at base batch 10 (noise scale 20), target 30."""
    per_sample = (0.001, 0.002, 0.004)
    workers = [{"overhead_s": 0.0, "per_sample_s": p, **({"noise": noise} if noise else {})} for p in per_sample]
    raw = scenario_dict(workers, global_batch=global_batch, steps_per_epoch=50, epochs=1,
                        network={"kind": "constant", "time_s": 0.005})  # fmt: skip
    raw["workload"]["efficiency"] = {"noise_scale": noise_scale, "base_batch": 10, "target_steps": 30}
    return load_scenario(raw)


@pytest.mark.parametrize(
    ("global_batch", "policy", "params", "progress", "time_s"),
    [
        # 10 samples each: 10, 20 and 40 ms. backup (k = 2) keeps workers 0 and 1, whose plain mean
        # of gradients is worth 2^2 / (1/10 + 1/10) = 20 samples: gain 2 * 30/40 = 1.5 a step, 75
        # over 50 steps; 30 is reached at step 20, each step 20 + 5 ms: 0.5 s.
        (30, "backup", {}, 75.0, 0.5),
        (30, "ksync", {"k": 2}, 75.0, 0.5),
        # k = 1 keeps worker 0 alone: 10 samples, gain 1, 50 in all, the target at step 30 of 15 ms.
        (30, "ksync", {"k": 1}, 50.0, 0.45),
        # 31 samples split 11/10/10 (11, 20, 40 ms): workers 0 and 1 kept, 4 / (1/11 + 1/10) = 440/21
        # samples, gain 3 (440/21) / (20 + 440/21) = 66/43 a step: 50 * 66/43 over the run; 30 needs
        # 30 * 43/66 = 19.5 steps, so 20 steps of 25 ms.
        (31, "backup", {}, 50 * 66 / 43, 0.5),
        # k = 1: worker 0's 11 samples, gain 1.1 * 30/31 = 33/31; 30 needs 28.2 steps: 29 of 16 ms.
        (31, "ksync", {"k": 1}, 50 * 33 / 31, 29 * 0.016),
    ],
)
def test_first_k_progress_and_time_to_target_by_hand(global_batch, policy, params, progress, time_s):
    scenario = _three_speeds(global_batch)
    p = predict(scenario, scenario.named_policy(policy, params))
    s = summarize(simulate(scenario, scenario.named_policy(policy, params)), scenario)
    assert p.progress == pytest.approx(progress, rel=1e-12) and s.progress == pytest.approx(progress, rel=1e-12)
    assert p.time_to_target_s == pytest.approx(time_s, rel=1e-12)
    assert s.time_to_target_s == pytest.approx(time_s, rel=1e-12)


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_first_k_expected_gain_of_exponential_workers_by_hand():
    """Exponential times of means 11, 20 and 40 ms (rates a, b, c); backup drops the last.
    Worker 0 is last with probability b/(a+b+c) * c/(a+c) + c/(a+b+c) * b/(a+b): then 10 + 10
    samples are kept (gain(20) = 1.5), else 11 + 10 (gain(440/21) = 66/43), whichever of 1 and
    2 is dropped. The expected progress is 50 steps of the expected gain; the target (30) is met
    at step 20 whatever is kept (19 steps give at most 29.2, 20 at least 30), so the time to it
    is 20 expected steps. The simulator's, over seeds, agree within their standard errors."""
    scenario = _three_speeds(31, {"dist": "exponential", "mean": 1.0})
    a, b, c = 1 / 0.011, 1 / 0.020, 1 / 0.040
    last = b / (a + b + c) * c / (a + c) + c / (a + b + c) * b / (a + b)
    expected = 50 * (last * 1.5 + (1 - last) * 66 / 43)
    p = predict(scenario, Backup())
    assert p.progress == pytest.approx(expected, rel=1e-6)
    assert p.time_to_target_s == pytest.approx(20 * p.mean_step_s, rel=1e-12)
    runs = [summarize(simulate(scenario, Backup(), seed=seed, engine=VectorEngine()), scenario) for seed in range(100)]
    for predicted, measured in ((expected, "progress"), (p.time_to_target_s, "time_to_target_s")):
        x = np.array([getattr(r, measured) for r in runs], dtype=float)
        assert abs(x.mean() - predicted) <= 4 * x.std(ddof=1) / math.sqrt(x.size)


def test_first_k_progress_under_a_noise_scale_schedule_is_the_expected_gains_recurrence():
    """As above, the noise scale growing from 20 to 80 over the first 30 steps of progress: each
    step adds the expected gain at the noise scale of the expected progress before it."""
    scenario = _three_speeds(31, {"dist": "exponential", "mean": 1.0}, noise_scale=[[0, 20], [30, 80]])
    a, b, c = 1 / 0.011, 1 / 0.020, 1 / 0.040
    last = b / (a + b + c) * c / (a + c) + c / (a + b + c) * b / (a + b)
    done = 0.0
    for _ in range(50):
        noise = float(np.interp(done, [0, 30], [20, 80]))
        gain = [(x / 10) * (noise + 10) / (noise + x) for x in (20.0, 440 / 21)]
        done += last * gain[0] + (1 - last) * gain[1]
    assert predict(scenario, Backup()).progress == pytest.approx(done, rel=1e-6)


def test_first_k_ties_on_noise_free_workers_go_to_the_lower_index_as_simulated():
    # identical noise-free workers finish together: exactly k gradients are kept, the lowest-indexed
    workers = [{"overhead_s": 0.01, "per_sample_s": 0.001}] * 4
    scenario = load_scenario(scenario_dict(workers, global_batch=400, steps_per_epoch=5, epochs=1))
    equal = predict(scenario, Equal()).throughput_sps
    for name, params, k in (("backup", {"backups": 1}, 3), ("ksync", {"k": 2}, 2)):
        p = predict(scenario, scenario.named_policy(name, params))
        assert p.throughput_sps == pytest.approx(equal * k / 4, rel=1e-12)
        simulated = summarize(simulate(scenario, scenario.named_policy(name, params))).throughput_sps
        assert p.throughput_sps == pytest.approx(simulated, rel=1e-12)
