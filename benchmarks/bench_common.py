"""What the benchmark scripts share: how runs are timed, and how repeated measurements are summarised.

Every figure a benchmark prints is summarised over repetitions as the README and
docs/benchmarks.md report it: mean, median and 90th percentile of single runs (never the best
run). Speeds that are compared are timed by :func:`time_rounds`: rounds in which each method
runs once, in an order rotated from round to round, so that a ratio is taken within a round (both
runs saw the same load) and then summarised over the rounds. Standard library only, so that a
start-up benchmark can import it without importing numpy.
Run a benchmark from the repository root as ``python benchmarks/NAME.py``: its folder is then on
``sys.path`` and ``from bench_common import stats`` finds this module.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

MAX_ROUNDS = 100  # time_rounds: at most this many rounds where more fit in its budget


def refuse(prog: str, line: str) -> NoReturn:
    """A benchmark's bad input: ``prog: error: line`` and exit status 2, as the commands do."""
    print(f"{prog}: error: {line}", file=sys.stderr)
    raise SystemExit(2)


class Parser(argparse.ArgumentParser):
    """A benchmark's options: a usage error is one line and exit status 2, as the commands'."""

    def error(self, message: str) -> NoReturn:
        refuse(self.prog, message)


def count(text: str) -> int:
    """argparse ``type`` of a count (runs, rounds, seeds, epochs, ...): a whole number, at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def out_path(text: str) -> Path:
    """argparse ``type`` of an output folder: absolute, as typed from the working folder (a
    benchmark starts its commands in the repository's root, where a relative one would land)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: name a folder")
    return Path(text).resolve()


def overridden(defaults: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``defaults`` (``--option value`` pairs, or a flag alone) then ``extra``, a default the
    extras give again left out: a command refuses an option given twice, and the user's wins."""
    given = {a.split("=", 1)[0] for a in extra if a.startswith("--")}
    kept: list[str] = []
    skip = False
    for k, arg in enumerate(defaults):
        if skip:
            skip = False
            continue
        if arg.startswith("--") and arg.split("=", 1)[0] in given:
            skip = "=" not in arg and k + 1 < len(defaults) and not defaults[k + 1].startswith("--")
            continue
        kept.append(arg)
    return [*kept, *extra]


def entry(main: Callable[[], int | None], prog: str) -> NoReturn:
    """Run a benchmark's ``main`` and exit with its status: a ConfigError (a command it started
    refused, or its own check) is one line and status 2, Ctrl-C one line and 130."""
    try:
        status = main()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as exc:
        if type(exc).__name__ != "ConfigError":  # hetsim's, named so that this module needs only the standard library
            raise
        refuse(prog, str(exc))
    raise SystemExit(status or 0)


def checked_seed(prog: str, seed: int, option: str = "--seed", most: int | None = None) -> int:
    """A benchmark's seed, refused as the commands refuse one (negative, or past ``most``, by
    default TOML's largest integer) before anything runs, not after its runs when the seed is
    first drawn from or a command it starts refuses it."""
    from hetsim.core.params import MAX_SEED  # here: the start-up benchmark imports this module bare

    most = MAX_SEED if most is None else most
    if not 0 <= seed <= most:
        refuse(prog, f"{option}: must be in [0, {most}], got {seed}")
    return seed


def stats(values: Iterable[float]) -> dict[str, float]:
    """Mean, median and 90th percentile of ``values`` (the percentile linear between order
    statistics, as numpy's default and ``statistics.quantiles(method="inclusive")``)."""
    x = [float(v) for v in values]
    if not x:
        raise ValueError("no measurements to summarise")
    p90 = statistics.quantiles(x, n=10, method="inclusive")[8] if len(x) > 1 else x[0]
    return {"mean": statistics.fmean(x), "median": statistics.median(x), "p90": p90}


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """``names`` in the order round ``round_index`` runs them: rotated left by the round's index,
    so that in any ``len(names)`` consecutive rounds each name runs first once."""
    if not names:
        return []
    k = round_index % len(names)
    return [*names[k:], *names[:k]]


@dataclass
class Rounds:
    """What :func:`time_rounds` measured: each method's seconds, one single run per round, in
    round order; and the kept methods' results from the first round (to check them)."""

    seconds: dict[str, list[float]]
    first: dict[str, object] = field(default_factory=dict)

    def rates(self, name: str, work: float) -> list[float]:
        """Round by round, ``work`` per second of ``name``'s single run."""
        return [work / s for s in self.seconds[name]]

    def ratios(self, num: str, den: str, work_num: float = 1.0, work_den: float = 1.0) -> list[float]:
        """Round by round, the rate of ``num`` (``work_num`` per run) over the rate of ``den``
        (``work_den`` per run), both from that round's single runs: the figure to read on a
        shared machine, as both saw the same load."""
        return [(work_num / sn) / (work_den / sd) for sn, sd in zip(self.seconds[num], self.seconds[den], strict=True)]


def chosen(names: Sequence[str], which: bool | Collection[str]) -> list[str]:
    """The ``names`` that ``which`` picks: all (``True``), none (``False``) or those it lists."""
    return list(names) if which is True else [] if which is False else [n for n in names if n in which]


def time_rounds(
    methods: Mapping[str, Callable[[], object]],
    rounds: int,
    warmup: bool | Collection[str] = True,
    budget_s: float = 0.0,
    max_rounds: int = MAX_ROUNDS,
    keep: bool | Collection[str] = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Rounds:
    """Time rounds in which every method runs once (a single run, timed on its own, never the
    best of several), the order rotated from round to round (:func:`rotated`) so that none always
    runs first (on a fresh cache, or right after the slowest). ``rounds`` rounds, and more while
    the timed runs so far took under ``budget_s`` seconds, at most ``max_rounds`` (where a round
    takes milliseconds, a hundred of them cost little and steady the median).

    With ``warmup``, one untimed run of each first (or of the methods it names): a method's first
    call pays for imports, caches and the operating system mapping new memory, which is not its
    speed. Each result is let go as soon as its run is timed (outside the timed span), but the
    first round's of the methods ``keep`` names: results held from round to round and replaced
    one at a time would leave the allocator in a different state for each method (a run that
    followed the release of a result of its size reused that memory, at twice the speed of one
    that did not)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    names = list(methods)
    for name in chosen(names, warmup):
        methods[name]()
    kept = set(chosen(names, keep))
    out = Rounds({name: [] for name in names})
    spent, r = 0.0, 0
    while r < rounds or (spent < budget_s and r < max_rounds):
        for name in rotated(names, r):
            start = clock()
            result = methods[name]()
            elapsed = clock() - start
            out.seconds[name].append(elapsed)
            if r == 0 and name in kept:
                out.first[name] = result
            del result  # released here, outside the timed span
            spent += elapsed
        r += 1
    return out


def validation_run(out: Path, argv: Sequence[str], cwd: Path) -> None:
    """``python -m validation run ARGV --out OUT`` (one OpenMP thread a rank), unless ``out``
    already holds a complete run (:func:`validation.matrix.is_complete`): a rerun of a benchmark
    resumes, and an unfinished folder of an interrupted one is run again. A failed run ends the
    benchmark with the run's last line."""
    from validation.matrix import is_complete  # only the benchmarks that run validation need it

    if is_complete(out):
        return
    if out.exists():
        print(f"{out}: unfinished, running it again", file=sys.stderr)
        shutil.rmtree(out)
    command = [sys.executable, "-m", "validation", "run", *argv, "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"run {out} failed: {done.stderr.strip().splitlines()[-1:]}")
