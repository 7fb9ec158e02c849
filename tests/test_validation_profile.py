"""``python -m validation profile``: the network fitted to all-reduce times, the trainer's steps
and the tables, the scenario hetsim reads back and runs, bad input refused in one line, and one
short real profile of 2 CPU ranks (the batch grid: tests/test_profile_grid.py)."""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hetsim.model.network import Ring
from hetsim.policies import Optimal
from hetsim.run.simulate import simulate_summary
from hetsim.scenario.config import load_scenario
from tests.refusals import check_refused
from validation import profile_output
from validation.cli import main
from validation.launch import child_pids
from validation.profile_config import ProfileConfig

ROOT = Path(__file__).resolve().parents[1]


@given(st.floats(1e-6, 1e-3), st.floats(0.5, 400.0), st.integers(2, 8))
@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_the_network_fit_recovers_a_ring(latency_s, bandwidth_gbps, world):
    assume(0.16 * 8e-3 / bandwidth_gbps > 0.05 * 2 * latency_s)  # a size term of some weight (else: constant)
    ring = Ring(latency_s=latency_s, bandwidth_gbps=bandwidth_gbps)
    sizes = [1, 2_500, 10_000, 40_000]  # float32 elements
    times = {str(k): [ring.allreduce_s(world, 4 * k / 1e6)] * 3 for k in sizes}
    fitted = profile_output.fit_network(times, world, 0.16)
    assert fitted["kind"] == "ring"
    assert fitted["latency_s"] == pytest.approx(latency_s, rel=1e-4)
    assert fitted["bandwidth_gbps"] == pytest.approx(bandwidth_gbps, rel=1e-4)


def test_the_network_is_what_the_trainers_steps_took_beyond_the_slowest_compute():
    """The scenario's network is the trainer's mean step less the slowest rank's compute that the
    tables and noise expect at the steps' split: exact without noise, E[max] of the lognormals
    with it (against sampling); the mean communication is kept beside it, and the all-reduce's
    own fit is the network without such steps."""
    raw = {"name": "t", "workload": {"global_batch": 48, "dataset_size": 960, "epochs": 1, "gradient_mb": 0.16},
           "workers": [{"name": "a", "cost": {"model": "table", "points": [[1, 0.001], [64, 0.020]]}},
                       {"name": "b", "cost": {"model": "table", "points": [[1, 0.002], [64, 0.040]]}}]}  # fmt: skip
    in_step = {"batch": 32, "split": [32, 16], "comm_s": [0.011, 0.030, 0.012], "mean_step_s": 0.030}
    results = [
        {"in_step": in_step, "allreduce": {"1": [0.002] * 3}},
        {"in_step": {**in_step, "batch": 16, "comm_s": [0.015, 0.013, 0.014]}, "allreduce": {"1": [0.002] * 3}},
    ]
    slowest_s = max(0.001 + 31 * 0.019 / 63, 0.002 + 15 * 0.038 / 63)
    assert profile_output.step_overhead_s(results, raw) == pytest.approx(0.030 - slowest_s)
    network = {"kind": "constant", "time_s": float(f"{0.030 - slowest_s:.6g}")}
    assert profile_output.network_table(results, raw) == network
    assert profile_output.exposed_comm_s(results) == pytest.approx(0.095 / 6)
    noisy = {**raw, "workers": [{**w, "noise": {"dist": "lognormal", "sigma": 0.2}} for w in raw["workers"]]}
    rng = np.random.default_rng(5)
    means = [0.001 + 31 * 0.019 / 63, 0.002 + 15 * 0.038 / 63]  # mean-1 noise: the table is the mean
    sampled = np.maximum(*(m * rng.lognormal(-0.02, 0.2, 400_000) for m in means)).mean()
    assert 0.030 - profile_output.step_overhead_s(results, noisy) == pytest.approx(sampled, rel=2e-3)
    fast = [{**r, "in_step": {**in_step, "mean_step_s": 0.001}} for r in results]  # faster than the tables say
    assert profile_output.step_overhead_s(fast, raw) == pytest.approx(0.001 - slowest_s)
    assert profile_output.network_table(fast, raw) == {"kind": "constant", "time_s": 0.0}
    for r in results:
        r["in_step"] = {"batch": 0, "comm_s": []}
    assert profile_output.exposed_comm_s(results) is None
    assert profile_output.network_table(results, raw) == {"kind": "constant", "time_s": 0.002}


def test_the_trainers_steps_run_at_the_split_that_balances_the_tables():
    """Two ranks of 1 and 2 s a sample (and a third whose cap is its table's end): the split of
    90 evens out the slowest time, 60/30; a cap binds; a rank whose one sample costs more than
    the others' whole share is left out."""
    one, two = [[1, 1.0], [100, 100.0]], [[1, 2.0], [100, 200.0]]
    assert profile_output.balanced_split([one, two], 90, [100, 100]) == (60, 30)
    assert profile_output.balanced_split([one, two], 90, [50, 100]) == (50, 40)
    slow = [[1, 500.0], [100, 600.0]]
    assert profile_output.balanced_split([one, two, slow], 90, [100, 100, 100]) == (60, 30, 0)


def test_a_ranks_noise_is_its_compute_in_the_trainers_steps_when_it_ran_enough_of_them():
    """The trainer's steps at the rank's local batch set its noise (their spread is the run's);
    with too few of them, or none at a batch of 0, the repeats of every batch pooled do."""
    rng = np.random.default_rng(3)
    samples = {str(b): list(np.exp(rng.normal(0, 0.3, 40)) * b * 1e-3) for b in (1, 8, 64)}
    in_step = list(np.exp(rng.normal(0, 0.05, 40)) * 0.05)
    pooled = profile_output.noise_sigma(samples)
    assert pooled == pytest.approx(0.3, rel=0.2)
    result = {"samples": samples, "in_step": {"batch": 50, "compute_s": in_step}}
    assert profile_output.rank_noise_sigma(result) == profile_output.noise_sigma({"50": in_step})
    assert profile_output.rank_noise_sigma(result) == pytest.approx(0.05, rel=0.3)
    few = {"samples": samples, "in_step": {"batch": 50, "compute_s": in_step[: profile_output.MIN_IN_STEP - 1]}}
    idle = {"samples": samples, "in_step": {"batch": 0, "compute_s": in_step}}
    assert profile_output.rank_noise_sigma(few) == profile_output.rank_noise_sigma(idle) == pooled


@pytest.mark.slow  # about a second or more: out of make test-fast
def test_the_table_is_the_mean_step_read_robustly_from_the_medians():
    """A rank's table is each batch's median times one ratio, the mean over the median pooled over
    its repeats by time: exact on a hand case, and on steps that an interruption of a fixed length
    hits at a rate in time it recovers each batch's mean where the median alone falls short."""
    hand = {"2": [1.0, 1.0, 4.0], "4": [2.0, 2.0, 2.0, 2.0], "8": [9.0, 9.0]}  # 8: too few repeats
    assert profile_output.mean_over_median(hand) == pytest.approx((6.0 + 8.0) / (3.0 + 8.0))
    assert profile_output.mean_over_median({"2": [1.0, 2.0]}) == 1.0
    in_step = {"batch": 3, "compute_s": [2.0, 2.0, 5.0]}  # the trainer's mean over the table at 3, itself a mean
    scale = (6.0 + 8.0) / (3.0 + 8.0)
    ratio = profile_output.trainer_compute_ratio({"samples": hand, "in_step": in_step}, profile_output.rank_table(hand))
    assert ratio == pytest.approx(3.0 / (1.5 * scale))
    rng = np.random.default_rng(7)
    samples = {}
    for b in (4, 16, 64, 128):
        base_s = 0.5e-3 + 0.1e-3 * b
        hit = rng.random(4000) < base_s / 0.04  # one 5 ms pause every 40 ms of computing, on average
        samples[str(b)] = list(base_s * np.exp(rng.normal(0, 0.02, 4000)) + 5e-3 * hit)
    table = dict((int(b), t) for b, t in profile_output.rank_table(samples))
    for b, ts in samples.items():
        mean_s, median_s = float(np.mean(ts)), float(np.median(ts))
        assert abs(table[int(b)] - mean_s) / mean_s < 0.02 and (mean_s - median_s) / mean_s > 0.05


@given(deadline=st.floats(0.0, 1e6), budget_s=st.floats(0.1, 1e4))
@pytest.mark.slow  # over 0.15 s of CPU here: out of make test-fast
def test_the_trainers_blocks_start_at_shares_of_the_budget_the_same_on_every_rank(deadline, budget_s):
    """The blocks' bounds depend only on the shared deadline and budget (not on when a rank's
    grid ended): equal shares of the budget, the last at the deadline."""
    from validation.profile_rank import TRAINER_BLOCKS, block_bounds

    bounds = block_bounds(deadline, budget_s)
    assert len(bounds) == TRAINER_BLOCKS and bounds[-1] == deadline
    gaps = np.diff([deadline - budget_s, *bounds])
    assert np.allclose(gaps, budget_s / TRAINER_BLOCKS, rtol=1e-9, atol=1e-6)


def test_the_trainers_steps_take_a_share_of_the_budget_within_bounds():
    from validation.profile_rank import MAX_TRAINER_STEPS, TRAINER_SHARE, trainer_step_count

    config = ProfileConfig(budget_s=10.0, repeats=7)
    assert trainer_step_count(config, 0.020) == min(MAX_TRAINER_STEPS, int(TRAINER_SHARE * 10.0 / 0.020))
    assert trainer_step_count(config, 1e-6) == MAX_TRAINER_STEPS
    assert trainer_step_count(config, 5.0) == 7  # never fewer than --repeats


@pytest.mark.slow  # over ~0.15 s here: out of make test-fast
def test_an_emulated_slower_device_sleeps_its_factor_less_one_times_the_step(monkeypatch):
    """``--slowdown`` in the profile's step, and the trainer's ``slowdown_delay``: a factor f
    sleeps (f - 1) x what was measured, and nothing at a local batch of 0; 1 emulates nothing;
    below 1 is refused."""
    import time

    import torch
    from torch import nn

    from validation.profile_measure import Stepper
    from validation.uneven import slowdown_delay
    from validation.workloads.base import Workload

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    assert slowdown_delay(1.0) is None
    delay = slowdown_delay(3.0)
    assert delay is not None
    delay(16, 0.25)
    delay(0, 0.25)  # a rank with no samples: nothing to slow down
    assert slept == [0.5]
    with pytest.raises(ValueError, match="slowdown: must be at least 1"):
        slowdown_delay(0.5)
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g))
    workload = Workload.from_parts("tiny", lambda: nn.Linear(4, 3), data, data, nn.functional.cross_entropy)
    slept.clear()
    step_s = Stepper(workload, 0, torch.device("cpu"), 0, slowdown=2.5).step_s(8)
    assert len(slept) == 1 and 0 < slept[0] <= 1.5 * step_s  # 1.5 x the step before it (sleep() recorded, not slept)
    slept.clear()
    Stepper(workload, 0, torch.device("cpu"), 0).step_s(8)
    assert slept == []


def test_a_flat_all_reduce_is_a_constant_network():
    fitted = profile_output.fit_network({"1": [0.002] * 3, "40000": [0.002] * 3}, 2, 0.16)
    assert fitted == {"kind": "constant", "time_s": 0.002}


def hinge(floor_s, overhead_s, per_sample_s):
    return lambda b: max(floor_s, overhead_s + per_sample_s * b)


def fake_results(rng: np.random.Generator) -> list[dict]:
    """Two ranks' results as profile_rank sends them: a hinge and a line, with lognormal noise."""
    curves = [hinge(0.004, 0.001, 1e-4), hinge(0.0, 0.002, 3e-4)]
    out = []
    for rank, curve in enumerate(curves):
        batches = [1, 3, 11, 30, 38, 45, 64]
        samples = {str(b): [curve(b) * float(rng.lognormal(0, 0.05)) for _ in range(7)] for b in batches}
        allreduce = {str(k): [2e-4 + 4 * k / 1e6 * 8e-3 / 10.0 for _ in range(5)] for k in (1, 2392, 9570, 38282)}
        rows = [{"rank": rank, "kind": "step", "batch": int(b), "size_mb": float("nan"), "repeat": k,
                 "seconds": t, "fits": True} for b, ts in samples.items() for k, t in enumerate(ts)]  # fmt: skip
        out.append({"rank": rank, "device": "cpu", "max_batch": 64, "parameters": 38282, "gradient_mb": 0.153128,
                    "samples": samples, "allreduce": allreduce, "rows": rows,
                    "placement": {"threads": 1, "cpus": [0]}})  # fmt: skip
    return out


def test_the_scenario_reads_back_in_hetsim_and_runs(tmp_path):
    config = ProfileConfig(global_batch=96, dataset_size=1438, seed=3, out=tmp_path / "p")
    results = fake_results(np.random.default_rng(0))
    scenario = profile_output.build(config, results, "digits-cnn")
    info = profile_output.meta(config, results, scenario, 1.0)
    profile_output.write(config.out, scenario, profile_output.rows(results), info)
    assert sorted(p.name for p in config.out.iterdir()) == ["meta.json", "profile.csv", "scenario.toml"]
    text = (config.out / "scenario.toml").read_text()
    assert tomllib.loads(text) == scenario
    assert text.startswith(f"# command: {info['command']}\n# hetsim_version: {info['hetsim_version']}\n# git_commit: ")
    loaded = load_scenario(config.out / "scenario.toml")
    assert (loaded.n_workers, loaded.workload.global_batch, loaded.workload.dataset_size) == (2, 96, 1438)
    assert loaded.workload.gradient_mb == 0.153128 and loaded.seed == 3
    for worker, r in zip(loaded.workers, results):
        assert worker.cap == 64
        scale = profile_output.mean_over_median(r["samples"])
        medians = {int(b): scale * float(np.median(ts)) for b, ts in r["samples"].items()}
        table = dict((int(b), t) for b, t in scenario["workers"][r["rank"]]["cost"]["points"])
        assert all(t1 <= t2 for t1, t2 in zip(list(table.values()), list(table.values())[1:]))
        close = [abs(table[b] - medians[b]) / medians[b] for b in medians]
        assert max(close) < (0.05 if r["rank"] == 0 else 1e-5)  # rank 1's medians rise: the table is them
    assert scenario["network"]["kind"] == "ring"
    assert scenario["network"]["bandwidth_gbps"] == pytest.approx(10.0 * 2 / 2, rel=1e-3)  # 2(n-1)/n = 1
    assert info["allreduce"]["at_gradient_fitted_s"] == pytest.approx(info["allreduce"]["at_gradient_measured_s"])
    equal, optimal = (simulate_summary(loaded, loaded.named_policy(p)) for p in ("equal", "optimal"))
    assert optimal.mean_step_s < equal.mean_step_s  # rank 1 is 3x slower per sample: the split must move
    csv = pd.read_csv(config.out / "profile.csv")
    assert len(csv) == 2 * 7 * 7 + 2 * 4 * 5 and set(csv["kind"]) == {"step", "allreduce"}


BAD = [
    (["--devices", "tpu,cpu"], "--devices: unknown device 'tpu' (use cpu, cuda or cuda:N)"),
    (
        ["--devices", "cpu,cuda:3", "--comm", "flat"],
        "--devices: rank 1 wants cuda:3 but this machine has 0 CUDA device(s)",
    ),
    (
        ["--devices", "cuda:0,cpu"],
        "--comm: ddp needs every rank on one kind of device; use --comm flat for mixed devices",
    ),
    (["--out", "{tmp}/a-file/out"], "--out: {tmp}/a-file is a file, not a folder"),
    (["--out", "{tmp}/a-run"], "--out: {tmp}/a-run holds trace.csv, not a profile's file: give a new folder"),
    (["--workload", "{tmp}/missing.py:WORKLOAD"], "--workload: {tmp}/missing.py: no such file"),
    (
        ["--workload", "no_such_module:WORKLOAD"],
        "--workload: cannot import no_such_module: ModuleNotFoundError: No module named 'no_such_module'",
    ),  # fmt: skip
    (["--budget-s", "0"], "--budget-s: must be in (0, 86400], got 0"),
    (["--threads", "2,1,1"], "--threads: 3 values for 2 ranks (one per rank, or RANK=VALUE items)"),
    (["--threads", "0=2,0=1"], "--threads: rank 0 is given twice"),
    (["--max-batch", "1,,2"], "--max-batch: an empty item in '1,,2' (a stray comma?)"),
    (["--max-batch", "1"], "--max-batch: must be in [2, 1438], got 1"),
    (["--max-batch", "40,40"], "--max-batch: the ranks hold at most 80 samples, less than the global batch 128"),
    (["--slowdown", "1,0.5"], "--slowdown: must be in [1, 1000], got 0.5"),
    (["--slowdown", "1=fast"], "--slowdown: must be a number, got a string ('fast')"),
]


@pytest.mark.parametrize(("argv", "line"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_refused_in_one_line(argv, line, tmp_path, capsys):
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    (tmp_path / "a-run").mkdir()  # a validation run's folder: a profile replaced its meta.json
    for name in ("meta.json", "trace.csv"):
        (tmp_path / "a-run" / name).write_text("{}", encoding="utf-8")
    if "cpu,cuda:3" in argv:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    out = [] if "--out" in argv else ["--out", "{tmp}/out"]
    check_refused(main, ["profile", *argv, *out], line, tmp_path, capsys, prog="validation")


HUGE = """
import torch
from torch import nn
from validation.workloads.base import Workload

class Huge(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        torch.empty(2**60)  # more memory than any machine has: the CPU allocator refuses it
        return self.linear(x)

g = torch.Generator().manual_seed(0)
WORKLOAD = Workload.from_parts("huge", Huge, (torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g)),
                               (torch.randn(10, 4), torch.randint(0, 3, (10,))), nn.functional.cross_entropy)
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_ranks_that_find_bad_input_end_in_one_line(tmp_path, capsys):
    """A model that does not fit at one sample, and a budget that cannot hold two batch sizes:
    found by the ranks (whichever finds it first names itself), reported in one line, exit
    status 2, nothing written, no process left."""
    (tmp_path / "huge.py").write_text(HUGE)
    refusals = [
        (["--workload", f"{tmp_path}/huge.py:WORKLOAD", "--global-batch", "8"],
         r"--workload: huge does not fit on rank [01] \(cpu\) even at a local batch of 1 \(out of memory\)"),
        (["--budget-s", "1e-6", "--max-batch", "64"],
         r"--budget-s: rank [01] \(cpu\): 1e-06 s cannot hold two batch sizes \(about [0-9.e-]+ s needed\)"),
    ]  # fmt: skip
    for argv, pattern in refusals:
        capsys.readouterr()
        before, children = sorted(tmp_path.rglob("*")), set(child_pids(os.getpid()))  # earlier tests' are not ours
        status = main(["profile", *argv, "--out", f"{tmp_path}/out"])
        captured = capsys.readouterr()
        assert status == 2 and captured.out == ""
        assert re.fullmatch(f"validation: error: {pattern}\n", captured.err), captured.err
        assert sorted(tmp_path.rglob("*")) == before and set(child_pids(os.getpid())) <= children


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.serial  # --budget-s 1.5 must hold two measured batch sizes (refused under load)
def test_a_real_profile_of_two_cpu_ranks(tmp_path, capsys):
    out = tmp_path / "profile"
    argv = ["profile", "--devices", "cpu,cpu", "--budget-s", "1.5", "--max-batch", "16,32", "--global-batch", "32",
            "--seed", "4", "--out", str(out)]  # fmt: skip
    children = set(child_pids(os.getpid()))  # what earlier tests left is not this profile's
    assert main(argv) == 0
    assert set(child_pids(os.getpid())) <= children
    printed = capsys.readouterr().out
    assert f"python -m hetsim plan {out}/scenario.toml" in printed
    scenario = load_scenario(out / "scenario.toml")
    raw = tomllib.loads((out / "scenario.toml").read_text())
    assert [w.cap for w in scenario.workers] == [16, 32]
    assert scenario.workload.gradient_mb == pytest.approx(38282 * 4 / 1e6)  # digits-cnn's parameters, float32
    assert (scenario.workload.global_batch, scenario.workload.dataset_size, scenario.seed) == (32, 1438, 4)
    steps = pd.read_csv(out / "profile.csv")
    meta = json.loads((out / "meta.json").read_text())
    for rank, cap in enumerate((16, 32)):
        points = raw["workers"][rank]["cost"]["points"]
        batches = [b for b, _ in points]
        assert batches[0] == 1 and batches[-1] == cap and len(batches) >= 2  # both ends, always
        timed = steps[(steps["rank"] == rank) & (steps["kind"] == "step")]
        assert sorted(set(timed["batch"])) == batches
        assert all((timed["batch"] == b).sum() >= 7 for b in batches)  # --repeats, at least
        warm = steps[(steps["rank"] == rank) & (steps["kind"] == "warmup")]
        assert set(warm["batch"]) == set(batches)  # a warm-up at every new batch size
        curve = meta["ranks"][rank]["curve"]
        assert all(c["ci_low_s"] <= c["median_s"] <= c["ci_high_s"] for c in curve)
    assert set(steps[steps["kind"] == "allreduce"]["size_mb"].round(6)) == {
        round(4 * k / 1e6, 6) for k in (1, 38282 // 16, 38282 // 4, 38282)}  # fmt: skip
    assert meta["seed"] == 4 and meta["git_commit"] and meta["config"]["devices"] == ["cpu", "cpu"]
    assert simulate_summary(scenario, Optimal()).mean_step_s > 0
    from validation.profile_rank import TRAINER_BLOCKS

    trainer = steps[steps["kind"] == "trainer_comm"]
    per_rank = trainer.groupby("rank").size()
    assert list(per_rank.index) == [0, 1] and per_rank.iloc[0] == per_rank.iloc[1]
    assert per_rank.iloc[0] % TRAINER_BLOCKS == 0  # the same steps in every block
    a = meta["allreduce"]
    assert a["trainer_step_s"] > 0 and raw["network"]["time_s"] == float(f"{max(0.0, a['step_overhead_s']):.6g}")


def test_a_doubtful_profile_says_why_in_a_line_each():
    """A network set to 0 because the trainer's steps ran faster than the tables expect, a rank
    whose steps spread widely, a load above the CPUs: each a warning (a review's profile at load
    5.8 wrote a network of 0 and printed nothing of it)."""
    from validation.profile import profile_warnings

    def info(overhead_s: float | None, sigmas: tuple[float, ...]) -> dict:
        return {"allreduce": {"step_overhead_s": overhead_s},
                "ranks": [{"rank": r, "noise_sigma": s} for r, s in enumerate(sigmas)]}  # fmt: skip

    assert profile_warnings(info(0.0021, (0.1, 0.2)), 1.2, 2) == []
    assert profile_warnings(info(None, (0.1, 0.2)), 1.2, 2) == []
    lines = profile_warnings(info(-0.00825, (0.5, 0.2)), 5.8, 2)
    assert len(lines) == 3
    assert lines[0].startswith("the trainer's steps took 8.25 ms less than the slowest compute")
    assert lines[1].startswith("rank 0's steps spread widely (noise sigma 0.50, above 0.3)")
    assert lines[2] == "the load average is 5.8 on 2 CPUs: other work shared the ranks' cores"
    skewed = info(0.0021, (0.1, 0.2))
    skewed["ranks"][1]["mean_over_median"] = 1.83  # a review's profile beside a busy job
    assert profile_warnings(skewed, 1.2, 2) == [
        "rank 1's mean step is 1.83x its median (above 1.25): some steps were interrupted for long, and its table "
        "(means) is that much above the medians printed"
    ]
