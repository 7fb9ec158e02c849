"""The benchmarks' shared single-run timer (benchmarks/bench_common.py) and how the engine and
scale benchmarks read its rounds: every method once per round, the order rotated, ratios taken
within a round, targets judged on the median over rounds (never the best run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import bench_engines
import bench_scale
import pytest
from bench_common import Rounds, rotated, stats, time_rounds


def test_each_name_runs_first_once_in_as_many_rounds_as_names():
    names = ["a", "b", "c"]
    orders = [rotated(names, r) for r in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert sorted(o[0] for o in orders[:3]) == names
    assert rotated([], 5) == []


class FakeClock:
    """A clock that each method moves on by its own duration, so every single run's seconds are exact."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def method(self, name: str, seconds: float):
        def run() -> str:
            self.calls.append(name)
            self.now += seconds
            return f"{name}-{len(self.calls)}"

        return run


def test_time_rounds_times_each_method_once_per_round_in_rotated_order_after_a_warmup():
    clock = FakeClock()
    methods = {"slow": clock.method("slow", 2.0), "fast": clock.method("fast", 0.5), "mid": clock.method("mid", 1.0)}
    timed = time_rounds(methods, 3, clock=clock)
    warmup, rounds = clock.calls[:3], clock.calls[3:]
    assert warmup == ["slow", "fast", "mid"]
    assert rounds == ["slow", "fast", "mid", "fast", "mid", "slow", "mid", "slow", "fast"]
    assert timed.seconds == {"slow": [2.0] * 3, "fast": [0.5] * 3, "mid": [1.0] * 3}  # single runs, warm-up left out
    assert timed.first == {"slow": "slow-4", "fast": "fast-5", "mid": "mid-6"}  # the first timed round's results
    kept = time_rounds(methods, 2, warmup=False, keep=("mid",), clock=clock)
    assert kept.first == {"mid": "mid-15"}


def test_time_rounds_without_warmup_and_with_no_rounds():
    clock = FakeClock()
    timed = time_rounds({"x": clock.method("x", 1.0)}, 2, warmup=False, clock=clock)
    assert clock.calls == ["x", "x"] and timed.seconds == {"x": [1.0, 1.0]}
    with pytest.raises(ValueError, match="at least 1"):
        time_rounds({"x": clock.method("x", 1.0)}, 0)


def test_time_rounds_adds_rounds_while_under_its_budget_up_to_its_most():
    def rounds_run(rounds: int, budget_s: float, max_rounds: int = 100) -> int:
        clock = FakeClock()
        methods = {"a": clock.method("a", 1.0), "b": clock.method("b", 1.0)}  # 2 s a round
        timed = time_rounds(methods, rounds, warmup=False, budget_s=budget_s, max_rounds=max_rounds, clock=clock)
        assert len(clock.calls) == 2 * len(timed.seconds["a"]) == 2 * len(timed.seconds["b"])
        return len(timed.seconds["a"])

    assert rounds_run(2, 0.0) == 2  # no budget: the rounds asked for
    assert rounds_run(2, 3.0) == 2  # 4 s spent in 2 rounds: over the budget already
    assert rounds_run(2, 7.0) == 4  # 6 s after 3 rounds is under 7: a 4th round
    assert rounds_run(2, 7.0, max_rounds=3) == 3
    assert rounds_run(5, 7.0, max_rounds=3) == 5  # the rounds asked for, whatever the most


def test_rates_and_ratios_are_taken_round_by_round():
    timed = Rounds({"a": [1.0, 2.0, 4.0], "b": [4.0, 4.0, 2.0]})
    assert timed.rates("a", 8.0) == [8.0, 4.0, 2.0]
    assert timed.ratios("a", "b") == [4.0, 2.0, 0.5]  # a's rate over b's, the same work: b's seconds over a's
    assert timed.ratios("a", "b", work_num=10.0, work_den=1.0) == [40.0, 20.0, 5.0]
    # the ratio of each round's pair, not of the best times (the best-of ratio here would be 2.0)
    assert stats(timed.ratios("a", "b"))["median"] == 2.0


def test_the_engine_targets_are_judged_on_the_median_ratio():
    def size(vector_simpy: dict[str, float]) -> bench_engines.Size:
        ok = {"mean": 1.0, "median": 1.0, "p90": 1.0}
        ratios = {"vector/simpy": vector_simpy, "simpy/bare_simpy": ok, "vector/numpy_draws": ok}
        return {"rounds": 7, "rates": {}, "ratios": {**ratios, "vector/numpy_streams": ok}}

    high_tail = {"mean": 60.0, "median": 49.0, "p90": 90.0}  # the best rounds meet 50x, the median does not
    assert bench_engines.targets({"256": size(high_tail)})["vector >= 50x simpy at 256"] is False
    assert bench_engines.targets({"256": size({**high_tail, "median": 50.0})})["vector >= 50x simpy at 256"] is True


def test_the_scale_ratios_weigh_each_run_by_its_worker_steps():
    seconds = {name: [1.0, 2.0] for name in bench_scale.RUNS}
    seconds["dynamic at 100000"] = [10.0, 10.0]  # 10^7 worker-steps in 10 s: 1 M/s
    figures = bench_scale.rounds_figures(Rounds(seconds))
    assert [f["dynamic at 100000 / at 1024 workers"] for f in figures] == pytest.approx([1 / 1.024, 2 / 1.024])
    assert [f["adaptive / dynamic at 1024 workers"] for f in figures] == [1.0, 1.0]
    assert [f["dynamic at 1024, M/s"] for f in figures] == pytest.approx([1.024, 0.512])


def test_time_rounds_warms_up_only_the_methods_it_names():
    clock = FakeClock()
    methods = {"a": clock.method("a", 1.0), "b": clock.method("b", 1.0), "c": clock.method("c", 1.0)}
    timed = time_rounds(methods, 1, warmup=("c", "a", "unknown"), clock=clock)
    assert clock.calls == ["a", "c", "a", "b", "c"] and timed.seconds == {"a": [1.0], "b": [1.0], "c": [1.0]}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "option", "value", "most"),
    [("batch_scaling.py", "--seed", "-1", 2**63 - 1), ("batch_scaling.py", "--first-seed", "-1", 2**31 - 101),
     ("batch_scaling.py", "--first-seed", str(2**31), 2**31 - 101),  # batch-sweep's bound: it ended in a traceback
     ("cold_step.py", "--seed", "-1", 2**63 - 1), ("calibration_profiles.py", "--seed", "-1", 2**63 - 1)],
)  # fmt: skip
def test_a_benchmark_refuses_a_bad_seed_before_it_runs(script, option, value, most):
    """batch_scaling took --seed -1 and ran its sweeps before the resampling refused it; cold_step
    and calibration_profiles ended in a traceback."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / script
    done = subprocess.run([sys.executable, str(bench), option, value], capture_output=True, text=True, timeout=60)
    prog = script.removesuffix(".py")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{prog}: error: {option}: must be in [0, {most}], got {value}\n"


@pytest.mark.slow  # a process each: over ~0.15 s here
@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--rounds", "0"], "bench_engines.py: error: argument --rounds: must be at least 1, got 0"),  # a division by 0
        (["--rounds", "two"], "bench_engines.py: error: argument --rounds: expected a whole number, got 'two'"),
        (["--bogus"], "bench_engines.py: error: unrecognized arguments: --bogus"),
    ],
)
def test_a_benchmarks_bad_option_is_one_line_and_status_2(argv, line):
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_engines.py"
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (2, line + "\n", "")


def test_a_benchmarks_output_folder_is_where_it_was_typed(tmp_path, monkeypatch):
    """A benchmark starts its commands in the repository's root: a relative --out is made absolute
    from the working folder first (it was written under the root and then read from here)."""
    from bench_common import out_path

    monkeypatch.chdir(tmp_path)
    assert out_path("runs/x") == tmp_path / "runs" / "x"


def test_entry_says_one_line_for_ctrl_c_and_for_a_refusal(capsys):
    from bench_common import entry

    from hetsim.core.errors import ConfigError

    def stopped() -> None:
        raise KeyboardInterrupt

    def refused() -> None:
        raise ConfigError("--x", "bad")

    for main, status, line in ((stopped, 130, "b: interrupted\n"), (refused, 2, "b: error: --x: bad\n")):
        with pytest.raises(SystemExit) as exited:
            entry(main, "b")
        assert exited.value.code == status and capsys.readouterr().err == line


def test_an_option_the_extras_give_again_replaces_the_default():
    """A benchmark's defaults then the user's options after --: a command refuses an option given
    twice, so the user's replaces the default (value and all; a flag alone; --opt=value too)."""
    from bench_common import overridden

    defaults = ["--comm", "ddp", "--epochs", "2", "--noise-scale", "--seed", "3", "--lr=0.1"]
    assert overridden(defaults, ["--epochs", "5", "--noise-scale", "--lr", "0.2"]) == [
        "--comm", "ddp", "--seed", "3", "--epochs", "5", "--noise-scale", "--lr", "0.2"]  # fmt: skip
    assert overridden(defaults, []) == defaults
