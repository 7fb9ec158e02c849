"""validation: single-process pieces (sharding, backend and device selection, option parsing,
injection; the trace rows and the writer: tests/test_trace_rows.py). No process group here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsim.core.errors import ConfigError
from hetsim.model.distributions import Constant, Exponential, Uniform
from validation.backend import RankEnv, parse_devices, resolve_device, select_backend
from validation.cli import main
from validation.config import DEFAULT_POLICIES, RunConfig
from validation.inject import Injector, parse_delay_spec
from validation.record import RankTiming, RunWriter, step_rows
from validation.sharding import epoch_permutation, local_indices, shard_bounds, steps_per_epoch

# ----------------------------------------------------------------------------- sharding


@given(st.lists(st.integers(0, 40), min_size=1, max_size=6).filter(lambda s: sum(s) > 0), st.integers(0, 3))
def test_shards_are_disjoint_and_cover_the_epoch(split, seed):
    total = sum(split)
    n = total * 5 + min(3, total - 1)  # an epoch of 5 steps and a few left over
    perm = epoch_permutation(seed, 0, n)
    steps = steps_per_epoch(n, total)
    assert steps == 5
    seen = [local_indices(perm, k, split, r) for k in range(steps) for r in range(len(split))]
    union = np.concatenate(seen)
    assert union.size == steps * total
    assert np.unique(union).size == union.size  # disjoint
    assert set(union.tolist()) == set(perm[: steps * total].tolist())  # cover the epoch's steps
    for r, b in enumerate(split):
        assert local_indices(perm, 0, split, r).size == b


def test_shard_bounds_are_contiguous_in_rank_order():
    assert [shard_bounds((5, 0, 13), r) for r in range(3)] == [(0, 5), (5, 5), (5, 18)]


def test_permutation_is_shared_and_changes_per_epoch():
    a, b = epoch_permutation(0, 1, 100), epoch_permutation(0, 1, 100)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, epoch_permutation(0, 2, 100))
    assert not np.array_equal(a, epoch_permutation(0, 1, 100, stream=2))


def test_a_step_past_the_epoch_is_refused():
    with pytest.raises(ValueError):
        local_indices(epoch_permutation(0, 0, 10), 1, (3, 4), 0)


# ----------------------------------------------------------------------------- backend and devices


@pytest.mark.parametrize(
    ("text", "world", "expected"),
    [
        ("cpu", 3, ("cpu", "cpu", "cpu")),
        ("cuda", 2, ("cuda", "cuda")),
        ("cuda:0, cuda:1", 2, ("cuda:0", "cuda:1")),
        ("CPU,cuda:1", 2, ("cpu", "cuda:1")),
    ],
)
def test_parse_devices(text, world, expected):
    assert parse_devices(text, world) == expected


@pytest.mark.parametrize("text", ["", "gpu", "cuda:x", "cpu:0", "cuda:0,cuda:1,cuda:2"])
def test_parse_devices_rejects(text):
    with pytest.raises(ConfigError) as err:
        parse_devices(text, 2)
    assert err.value.field == "--devices"


def test_backend_is_nccl_only_when_every_rank_is_on_cuda():
    assert select_backend(("cuda:0", "cuda:1")) == "nccl"
    assert select_backend(("cuda", "cuda")) == "nccl"
    assert select_backend(("cuda:0", "cpu")) == "gloo"
    assert select_backend(("cpu", "cpu")) == "gloo"


def test_resolve_device_uses_the_local_rank_for_bare_cuda():
    assert resolve_device("cuda", 3) == "cuda:3"
    assert resolve_device("cuda:1", 3) == "cuda:1"
    assert resolve_device("cpu", 3) == "cpu"


def test_rank_env_from_torchrun_variables():
    assert RankEnv.from_environ({}) is None
    assert RankEnv.from_environ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == RankEnv(3, 4, 1)
    assert RankEnv.from_environ({"RANK": "1", "WORLD_SIZE": "2"}) == RankEnv(1, 2, 1)
    with pytest.raises(ConfigError):
        RankEnv.from_environ({"RANK": "2", "WORLD_SIZE": "2"})


# ----------------------------------------------------------------------------- injection


def test_parse_delay_spec():
    assert parse_delay_spec("0.02") == Constant(0.02)
    assert parse_delay_spec("exponential:0.02") == Exponential(0.02)
    assert parse_delay_spec("uniform:0.01,0.03") == Uniform(0.01, 0.03)
    assert parse_delay_spec("empirical:0.01,0.02").mean() == pytest.approx(0.015)


@pytest.mark.parametrize("text", ["fast", "-1", "exponential:", "exponential:1,2", "weibull:1", "uniform:0.3,0.1"])
def test_parse_delay_spec_rejects(text):
    with pytest.raises(ConfigError):
        parse_delay_spec(text)


def test_injector_adds_delay_per_sample_and_slowdown_only_with_samples():
    inj = Injector(Constant(0.01), per_sample_s=0.001, slowdown=3.0)
    assert inj.extra_s(10, 0.005) == pytest.approx(0.01 + 0.01 + 0.01)
    assert inj.extra_s(0, 0.005) == 0.0
    assert Injector().extra_s(10, 0.005) == 0.0
    with pytest.raises(ValueError, match="random delay needs the rank's generator"):  # no seed behind one's back
        Injector(parse_delay_spec("exponential:0.01"))


def test_injector_random_delays_are_seeded_per_rank():
    def draws(rank):
        return [
            Injector.for_rank(rank, 2, 7, {0: "exponential:0.01", 1: "exponential:0.01"}, {}, {}).extra_s(1, 0)
            for _ in range(1)
        ]

    assert draws(0) == draws(0)
    assert draws(0) != draws(1)


# ----------------------------------------------------------------------------- gradient weights


def test_default_config():
    config = RunConfig()
    assert config.world_size == 2 and config.devices == ("cpu",)
    assert config.policies == DEFAULT_POLICIES
    assert 1 in config.delay
    assert all(0 < f <= 1 for f in config.probe_fractions)


def test_run_file_keys_are_checked(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text("epochs = 2\nspeed = 3\n")
    assert main(["run", str(path)]) == 2
    assert "speed" in capsys.readouterr().err


def test_compare_needs_a_run_folder(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "meta.json" in capsys.readouterr().err


def test_run_file_and_options_combine(tmp_path):
    from validation.cli import build_parser
    from validation.config import build_config

    path = tmp_path / "run.toml"
    path.write_text(
        'world_size = 3\nepochs = 2\ndevices = ["cpu", "cpu", "cpu"]\n[delay]\n1 = "exponential:0.003"\n'
        "[slowdown]\n2 = 1.5\n"
    )
    args = build_parser().parse_args(["run", str(path), "--epochs", "4", "--delay", "2=0.01", "--delay", "1=0"])
    config = build_config(args)
    assert (config.world_size, config.epochs) == (3, 4)
    assert dict(config.delay) == {2: "0.01"}  # 1=0 removed the file's delay
    assert dict(config.slowdown) == {2: 1.5}
    assert config.devices == ("cpu", "cpu", "cpu")
    with pytest.raises(ConfigError, match="3 devices for 4 ranks"):  # torchrun's WORLD_SIZE wins, and is checked
        build_config(args, world_size_env=4)


def test_example_run_file_is_valid():
    from pathlib import Path

    from validation.cli import build_parser
    from validation.config import build_config

    example = Path(__file__).resolve().parents[1] / "examples" / "validation" / "random-delay.toml"
    config = build_config(build_parser().parse_args(["run", str(example)]))
    assert config.world_size == 3 and "optimal" in config.policies


def test_local_cuda_devices_are_checked(monkeypatch):
    import torch

    from validation.cli import check_local_devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_local_devices(("cuda:0",))
    check_local_devices(("cpu", "cpu"))
    with pytest.raises(ConfigError, match="rank 1 wants cuda:1"):
        check_local_devices(("cuda:0", "cuda:1"))
    with pytest.raises(ConfigError, match="rank 1 wants cuda"):
        check_local_devices(("cuda", "cuda"))


def test_probe_schedule_spreads_the_rounds_evenly_with_one_at_the_start():
    from validation.probe import probe_schedule

    assert probe_schedule(10, 4) == [2, 2, 2, 2, 2]
    assert probe_schedule(10, 10) == [1] * 10 + [0]
    assert probe_schedule(7, 5) == [2, 1, 1, 1, 1, 1]
    assert probe_schedule(2, 5) == [1, 0, 0, 1, 0, 0]
    assert probe_schedule(1, 4) == [1, 0, 0, 0, 0]
    assert probe_schedule(0, 3) == [0, 0, 0, 0]
    for rounds in range(1, 30):
        for epochs in range(1, 12):
            plan = probe_schedule(rounds, epochs)
            assert sum(plan) == rounds and plan[0] >= 1 and max(plan) - min(plan[: min(rounds, epochs + 1)]) <= 1


def test_compare_refuses_a_run_with_nothing_to_compare_even_with_a_tolerance(tmp_path, capsys):
    meta = {"global_batch": 8, "steps_per_epoch": 2, "epochs": 1, "world_size": 2, "gradient_mb": 0.1,
            "policies": ["equal"]}  # fmt: skip
    writer = RunWriter(tmp_path, meta)
    for step, split in enumerate([(2, 6), (6, 2), (4, 4), (1, 7)]):  # the probe ran; no policy finished an epoch
        timings = [RankTiming(0.001 * split[0], 0.001, 0.001), RankTiming(0.001 * split[1], 0.001, 0.001)]
        writer.add_steps(step_rows("probe", 0, step, 0.01 * step, split, timings))
    writer.flush()
    assert main(["compare", str(tmp_path), "--tolerance", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err == f"validation: error: run_dir: {tmp_path} has no policy with a finished epoch to compare\n"


def test_a_one_rank_run_is_possible_from_the_command_line():
    from validation.cli import build_parser
    from validation.config import build_config

    config = build_config(build_parser().parse_args(["run", "--world-size", "1"]))
    assert config.world_size == 1 and dict(config.delay) == {} and dict(config.per_sample_delay) == {}


def test_time_to_accuracy_is_the_elapsed_time_of_the_first_evaluation_that_reached_it():
    from validation.record import time_to_accuracy

    evals = pd.DataFrame({"test_accuracy": [0.4, 0.75, 0.7, 0.9], "elapsed_s": [1.0, 2.0, 3.0, 4.0]})
    assert time_to_accuracy(evals, 0.7) == 2.0  # not the later evaluation that dipped back to 0.7
    assert time_to_accuracy(evals, 0.9) == 4.0
    assert time_to_accuracy(evals, 0.95) is None
    assert time_to_accuracy(evals, None) is None


def test_a_block_of_steps_within_an_epoch_sees_the_whole_epoch(monkeypatch):
    # --eval-every runs an epoch as blocks: the policy must still see each step's place in the whole
    # epoch (where it ends: adaptive and goodput re-decide there) and take that step's samples
    import validation.uneven.run as uneven_run
    from hetsim.policies import StepInfo

    monkeypatch.setattr(uneven_run.dist, "get_rank", lambda: 0)

    class Recorder:  # the Controller's part that run_steps drives
        step = 5  # steps of the segment written before this block

        def __init__(self) -> None:
            self.seen: list[tuple[StepInfo, list[int], tuple[int, ...]]] = []

        def step_with(self, stepper, info, samples, loss_of, fixed):
            self.seen.append((info, samples(fixed).tolist(), fixed))

        def end_block(self):
            return []

    ctrl, perm = Recorder(), np.arange(100, 140)
    uneven_run.run_steps(ctrl, None, 3, 2, lambda k: (perm, k), None, fixed=[(2, 2), (3, 1)], first=4, per_epoch=10)
    assert ctrl.seen == [
        (StepInfo(5, 3, 4, 10), [116, 117], (2, 2)),  # step 4 of the epoch: samples 16-19, rank 0's half
        (StepInfo(6, 3, 5, 10), [120, 121, 122], (3, 1)),
    ]


@pytest.mark.parametrize(
    ("lengths", "every", "expected"),
    [
        ((10, 10), 0, [9, 19]),  # the epochs' ends only
        ((10, 10), 3, [2, 5, 8, 9, 12, 15, 18, 19]),  # every third step of each epoch, and its end
        ((4, 7), 3, [2, 3, 6, 9, 10]),  # epochs of different lengths (goodput's): each counts from its start
        ((6,), 2, [1, 3, 5]),  # an end that is also a multiple
        ((5,), 9, [4]),  # every > an epoch: its end alone
    ],
)
def test_the_predicted_time_to_target_is_read_where_the_run_evaluates(lengths, every, expected):
    from validation.time_to_target import evaluated_steps

    epochs = np.repeat(np.arange(len(lengths)), lengths)
    assert np.flatnonzero(evaluated_steps(epochs, every)).tolist() == expected


def test_a_predicted_time_to_target_past_the_runs_epochs_is_not_reached():
    """The simulation of a policy that raises its batch (goodput) runs the steps of the run's
    epochs at the base batch, which hold more epochs of its own: a target it reaches after the
    run's last epoch was predicted as a time (a review: 1.371 s for a run of 0.935 s)."""
    from hetsim.model.efficiency import Efficiency
    from hetsim.policies import Equal
    from hetsim.run.simulate import simulate
    from hetsim.scenario.config import build_scenario
    from tests.helpers import scenario_dict
    from validation.time_to_target import _evaluation_reaching

    worker = {"name": "w", "count": 2, "cost": {"model": "affine", "overhead_s": 0.01, "per_sample_s": 0.001}}
    trace = simulate(build_scenario(scenario_dict([worker], global_batch=8, steps_per_epoch=5, epochs=4)), Equal())
    efficiency = Efficiency(1e9, 8, 12.0)  # one step of progress a step: the target at step 11, in epoch 2
    step_s = 0.01 + 0.001 * 4  # every step: 4 samples a worker, no exchange
    assert _evaluation_reaching(trace, efficiency, True, 0, 4) == pytest.approx(15 * step_s)  # read at epoch 2's end
    assert _evaluation_reaching(trace, efficiency, True, 0, 3) == pytest.approx(15 * step_s)
    assert _evaluation_reaching(trace, efficiency, True, 0, 2) is None  # the run had two epochs


def test_the_noise_scale_estimator_recovers_a_known_one_from_uneven_batches():
    """Per-sample gradients G + noise (d dimensions, variance s^2 each): B_noise = d s^2 / |G|^2.
    Uneven local batches and their union, as a step of the weighted combine gives them."""
    from validation.noise_scale import NoiseScale, estimate, pair_estimates

    rng = np.random.default_rng(7)
    d, s, true = 50, 0.5, np.full(50, 0.1)  # B_noise = 50 * 0.25 / 0.5 = 25
    sums = NoiseScale()
    for _ in range(400):
        split = (int(rng.integers(1, 40)), int(rng.integers(1, 40)), 0)
        samples = [true + s * rng.standard_normal((b, d)) for b in split]
        local = [float(np.sum(x.mean(axis=0) ** 2)) if len(x) else 0.0 for x in samples]
        union = np.concatenate(samples).mean(axis=0)
        sums.add_step(local, split, float(np.sum(union**2)))
    value = sums.value()
    assert value is not None and value == pytest.approx(25.0, rel=0.15)
    assert sums.pairs == 800  # the rank without samples gives no pair
    g, t = pair_estimates(local_sq=0.6, local_batch=10, global_sq=0.55, global_batch=30)
    assert g == pytest.approx((30 * 0.55 - 10 * 0.6) / 20) and t == pytest.approx(0.05 / (1 / 10 - 1 / 30))
    assert estimate([(None, (4, 4), 1.0)]) is None  # no norms recorded: no estimate
    running = NoiseScale(grad_sq=2.0, trace=100.0, pairs=3)  # a running estimate forgets half at each epoch
    running.decay(0.5)
    running.add_step([0.6], (10, 20), 0.55)
    g, t = pair_estimates(0.6, 10, 0.55, 30)
    assert running.value() == pytest.approx((50.0 + t) / (1.0 + g))


def test_an_older_torch_is_refused_in_one_line_before_any_rank_starts(monkeypatch, capsys, tmp_path):
    import torch
    from torch.torch_version import TorchVersion

    from validation.cli import main

    monkeypatch.setattr(torch, "__version__", TorchVersion("2.7.1+cu126"))
    assert main(["run", "--epochs", "1", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("validation: error: torch: 2.7.1+cu126 is older than 2.8, which validation's ranks need (their "
                   "store takes over the launcher's socket): install torch>=2.8")  # fmt: skip
    assert not (tmp_path / "run").exists()
    from validation.backend import check_torch_version

    for fine in ("2.8.0a0+5228986c39.nv25.06", "2.10.0", "3.0.0"):  # a container's build of 2.8 is 2.8
        monkeypatch.setattr(torch, "__version__", TorchVersion(fine))
        check_torch_version()
