"""The per-rank entry point: ``python -m validation.train [run options]``, started by torchrun or by
``python -m validation run`` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT from the
environment).

Owns the rank's process: its command line and environment, the process group (started here and,
once started, always destroyed), and how the process ends: one line on stderr and exit status 2
for bad input, 1 when the rendezvous or a collective failed (most often another rank died), and
CRASH_STATUS for the hidden ``--crash-at`` hook. The training is :class:`validation.trainer.RankTrainer`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hetsim.core.console import OneLineParser
from hetsim.core.errors import ConfigError
from validation import heartbeat
from validation.backend import RankEnv, exit_now, init_process_group, resolve_device, select_backend, torch_device
from validation.config import RunConfig, build_config
from validation.options import add_run_options, default_out
from validation.placement import apply_placement, placement_in_effect
from validation.summary_text import held_out
from validation.trainer import InjectedCrash, RankTrainer

__all__ = ["CRASH_STATUS", "OWN_FAILURE", "RankFailure", "build_parser", "main", "run_rank"]

CRASH_STATUS = 17


OWN_FAILURE = 3  # this rank failed by itself (out of device memory, say): the launcher names it first
USEFUL_CHARS = 2000  # an error's text kept in the one line: NCCL's reason, not the C++ stack
_PEER = re.compile(r"gloo|nccl|connection|peer|timed? ?out|socket|closed|reset by|broken pipe|store", re.IGNORECASE)


def useful_error(cause: BaseException) -> str:
    """The error's text on one line: every line before the C++ stack ("Exception raised from",
    "frame #N"), joined by " | ", at most :data:`USEFUL_CHARS` characters."""
    lines = []
    for line in str(cause).splitlines():
        text = line.strip()
        if text.startswith(("Exception raised from", "frame #")):
            break
        if text:
            lines.append(text)
    joined = " | ".join(lines) or type(cause).__name__
    return joined if len(joined) <= USEFUL_CHARS else joined[: USEFUL_CHARS - 3] + "..."


def out_of_memory(cause: BaseException) -> bool:
    """A device out-of-memory error (torch's type, or its text when wrapped in another)."""
    return isinstance(cause, torch.OutOfMemoryError) or "out of memory" in str(cause).lower()


class RankFailure(Exception):
    """A step, a collective or the rendezvous failed: the whole useful error and its likely cause.
    ``own``: this rank's own failure (out of memory, an error in the model), not a peer's."""

    def __init__(self, rank: int, where: str, cause: BaseException) -> None:
        if out_of_memory(cause):
            self.own, why = True, "this rank ran out of device memory: a smaller --global-batch or share for it"
        elif isinstance(cause, (dist.DistError, OSError)) or _PEER.search(str(cause)):
            self.own, why = False, "another rank died or timed out"
        else:
            self.own, why = True, "an error on this rank"
        super().__init__(f"rank {rank}: failed during {where}: {useful_error(cause)} ({why})")


def build_parser() -> argparse.ArgumentParser:
    """The run options of ``python -m validation run``; a usage error is a ConfigError."""
    parser = OneLineParser(
        prog="validation.train",
        description="One rank of a validation run (start it with torchrun or python -m validation run).",
        refuse_repeats=False,  # the launcher appends its own --out to the command line it was given
    )
    add_run_options(parser)
    return parser


def rank_env() -> RankEnv:
    """This rank's place in the world, from the environment torchrun (or the launcher) set."""
    env = RankEnv.from_environ()
    if env is None:
        raise ConfigError("RANK", "not set: start ranks with `python -m validation run` or torchrun")
    return env


def local_world_size(env: RankEnv) -> int:
    """Ranks on this machine: torchrun's (and the launcher's) LOCAL_WORLD_SIZE, else the world."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "")))
    except ValueError:
        return env.world_size


def stall_guard(
    rank: int, doing: Callable[[], str], limit_s: float, poll_s: float = 1.0, end: Callable[[int], object] = os._exit
) -> threading.Thread:
    """A daemon thread that ends the rank (status 1, with a "failed during" line) when what it is
    doing has not changed for ``limit_s``. Under NCCL a rank whose peer died can block in device
    synchronisation (the kernel waits for the peer for ever; torch.cuda.synchronize releases the
    GIL, so this thread still runs) until NCCL's watchdog aborts the process without a word;
    ``limit_s`` is past the process-group timeout, so any collective that could still finish has."""

    def run() -> None:
        last, since = doing(), time.monotonic()
        while True:
            time.sleep(poll_s)
            now = doing()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > limit_s:
                print(
                    f"validation: rank {rank}: failed during {now}: no progress for {limit_s:g} s, past the "
                    "process-group timeout: a collective or the GPU never finished (another rank died or timed out)",
                    file=sys.stderr,
                    flush=True,
                )
                end(1)
                return

    thread = threading.Thread(target=run, name="stall-guard", daemon=True)
    thread.start()
    return thread


def print_summary(summary: dict[str, Any]) -> None:
    """One line on stderr per policy of the finished run (rank 0's summary; empty elsewhere)."""
    for entry in summary["policies"]:
        target = entry.get("target_accuracy")
        reached = "" if target is None else (
            f", accuracy {target:g} reached after {entry['time_to_target_s']:.2f} s"
            if entry.get("time_to_target_s") is not None else f", accuracy {target:g} not reached"
        )  # fmt: skip
        print(
            f"validation: {entry['policy']}: {entry['steps']} steps in {entry['total_time_s']:.2f} s, final split "
            f"{'/'.join(map(str, entry['final_batches']))}, held-out {held_out(entry)}" + reached,
            file=sys.stderr,
            flush=True,
        )


def run_rank(config: RunConfig, env: RankEnv, out: Path) -> None:
    """Start the process group, run the trainer, and always destroy the group. An injected crash
    ends the process at once, with neither the closing barrier nor the teardown, as a killed rank does."""
    apply_placement(config.threads.get(env.rank, 1), config.cpus.get(env.rank))
    torch.set_num_threads(config.threads.get(env.rank, 1))
    if env.rank in config.threads or env.rank in config.cpus:
        placed = placement_in_effect()
        print(
            f"validation: rank {env.rank}: threads {placed['threads']}, cpus {placed['cpus']}",
            file=sys.stderr,
            flush=True,
        )
    device = torch_device(resolve_device(config.devices[env.rank], env.local_rank))
    started: list[RankTrainer] = []  # what the heartbeat reports: the trainer's step, once it exists
    doing = lambda: started[0].where if started else "start-up"  # noqa: E731
    heartbeat.start(env.rank, doing)
    backend = select_backend(config.devices)
    if backend == "nccl":
        stall_guard(env.rank, doing, 2 * config.timeout_s + 10.0)
    try:
        init_process_group(backend, env, device, config.timeout_s)
    except (RuntimeError, OSError) as exc:
        raise RankFailure(env.rank, "the rendezvous", exc) from exc
    trainer: RankTrainer | None = None
    try:
        trainer = RankTrainer(config, env)
        started.append(trainer)
        print_summary(trainer.run(out))
        trainer.where = "shutdown"
        dist.barrier()  # leave together: a rank tearing gloo down while a peer still talks to it aborts
    except InjectedCrash as exc:
        say(f"validation: {exc}")
        os._exit(CRASH_STATUS)
    except (RuntimeError, OSError) as exc:
        raise RankFailure(env.rank, trainer.where if trainer is not None else "start-up", exc) from exc
    finally:
        dist.destroy_process_group()


def say(line: str) -> None:
    """``line`` on stderr in one write: the ranks share the launcher's stderr, unbuffered
    (PYTHONUNBUFFERED), and print's text and newline, two writes, let two ranks' lines run together."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """One rank: 0 when it finished, 2 for bad input, 1 when it or another rank failed."""
    env: RankEnv | None = None
    try:
        args = build_parser().parse_args(argv)
        env = rank_env()
        config = build_config(args, world_size_env=env.world_size, local=local_world_size(env))
        run_rank(config, env, config.out or default_out())
    except ConfigError as exc:
        where = f"rank {env.rank}: " if env is not None else ""
        say(f"validation: {where}error: {exc}")
        return 2
    except RankFailure as exc:
        say(f"validation: {exc}")
        return OWN_FAILURE if exc.own else 1
    return 0


if __name__ == "__main__":
    exit_now(main())
