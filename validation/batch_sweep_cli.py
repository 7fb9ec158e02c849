"""The ``batch-sweep`` command's options and handler (:mod:`validation.batch_sweep` runs it).
Adding the options imports nothing heavy: the handler imports torch and the fit when it runs."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from hetsim.core.console import path_argument, sigterm_as_interrupt
from validation.workloads.plugins import FORMS
from validation.workloads.sweep_defaults import UNDECLARED

MAX_FIRST_SEED = 2**31 - 1 - 100  # --first-seed: seeds K..K+99 (--seeds is at most 100) within int32


# hetsim.model.efficiency's OPTIMIZERS and LR_RULES (and the keys of batch_sweep_train.OPTIMIZERS),
# written out so that adding the options imports neither numpy nor torch; a test keeps them equal.
OPTIMIZER_NAMES = ("sgd", "adam")
LR_RULE_NAMES = ("sqrt", "linear", "none")


def add_parser(sub: Any) -> None:
    """Add ``batch-sweep`` to validation's subparsers."""
    parser = sub.add_parser("batch-sweep", help="train to a target accuracy at a ladder of global batches, over seeds")
    parser.add_argument("--workload", default="digits-cnn", metavar="WORKLOAD",
                        help=f"a workload's name or {FORMS} (default digits-cnn; a workload that declares its sweep "
                             "defaults, as the built-in digits-cnn and transformer do, fills the options below, "
                             "any other needs --base-batch, --lr and --target)")  # fmt: skip
    parser.add_argument("--batches", default="1,2,4,8", metavar="K,...",
                        help="multiples of the base batch (default 1,2,4,8)")  # fmt: skip
    parser.add_argument("--base-batch", type=int, default=None, help="the base global batch (default per workload)")
    parser.add_argument("--optimizer", default=None, choices=OPTIMIZER_NAMES,
                        help="SGD (momentum 0.9) or Adam (default: the workload's; digits-cnn sgd, transformer "
                             "adam)")  # fmt: skip
    parser.add_argument("--lr", type=float, default=None, help="learning rate at the base batch (default per workload)")
    parser.add_argument("--lr-scaling", default="sqrt", choices=LR_RULE_NAMES,
                        help="how --lr grows from the base batch to the others (default sqrt)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=3,
                        help="N seeds at every batch: 0..N-1, or from --first-seed (default 3)")  # fmt: skip
    parser.add_argument("--first-seed", type=int, default=0, metavar="K",
                        help="seeds K..K+N-1 (a second set of seeds beside a first; default 0)")  # fmt: skip
    parser.add_argument("--target", type=float, default=None, metavar="ACC",
                        help="held-out accuracy to reach (default per workload)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="fewer steps at most per run")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help=f"the most steps a run may take (default: the workload's, else {UNDECLARED.max_steps}, "
                             f"{UNDECLARED.quick_max_steps} with --quick)")  # fmt: skip
    parser.add_argument("--eval-gap", type=int, default=None, metavar="K",
                        help="the fewest steps between held-out evaluations, where an evaluation costs many steps: "
                             "a run's steps to the target are known to that many (default: the workload's, else "
                             f"{UNDECLARED.eval_gap})")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, one process and one core each (default 1: the recorded times have the "
                             "machine to themselves; the steps to the target do not depend on it)")  # fmt: skip
    parser.add_argument("--out", type=path_argument, default=None, metavar="DIR",
                        help="results folder (default runs/batch-sweep-<date>-<time>)")  # fmt: skip


def cmd_batch_sweep(args: argparse.Namespace) -> int:
    from hetsim.core.files import check_out_folder, check_own_folder
    from validation.batch_sweep import RESULT_FILES, RunFailed, build_config, run_sweep, summary, write_results
    from validation.batch_sweep_resume import check_same_settings

    config = build_config(args)
    check_out_folder(config.out)
    check_own_folder(config.out, "--out", RESULT_FILES, "batch-sweep")  # its own folder resumes
    check_same_settings(config)  # resumed only with the settings its kept runs were run with

    def echo(line: str) -> None:
        print(f"validation: {line}", file=sys.stderr, flush=True)

    try:
        with sigterm_as_interrupt():  # SIGTERM ends the sweep as Ctrl-C does
            found = run_sweep(config, echo)
    except RunFailed as exc:  # the workload's code raised: one line, the finished runs kept
        from validation.batch_sweep_resume import kept_runs

        finished = kept_runs(config)
        kept = f": its {finished} finished run{'s' * (finished != 1)} are kept in {config.out}" if finished else ""
        print(f"validation: error: the run at batch {exc.batch} seed {exc.seed} failed: {exc}; fix the workload, "
              f"then run the same command again{kept}", file=sys.stderr)  # fmt: skip
        return 1
    except BrokenProcessPool as exc:  # a run's process died (killed, out of memory): the finished runs are kept
        print(f"validation: error: a run's process died ({exc}); the finished runs are kept in {config.out}: "
              "run the same command again to resume", file=sys.stderr)  # fmt: skip
        return 1
    data = write_results(config, *found)
    print(summary(data))
    print(f"wrote {config.out}")
    return 0
