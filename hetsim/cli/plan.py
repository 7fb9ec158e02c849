"""Command-line wiring of ``plan`` (:mod:`hetsim.plan.planner`): the answer for one cluster, as a table,
as one JSON object (``--json``), or written for a trainer to read (``--out plan.json``).

:func:`add_subcommands` adds it to ``hetsim.cli.main``'s subparsers; :data:`COMMANDS` maps its name
to the handler. Every input is checked before the plan is made (the scenario, its workers, the
seed, the objective, ``--batch-range``, then ``--out``), each refusal one line and exit status 2
with nothing written; the handler imports the planner (numpy, scipy) only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from hetsim.cli.common import (
    add_scenario_options,
    check_out_file,
    check_seed,
    say_unfitted,
    scenario_of,
    scenario_policies,
)
from hetsim.core.console import path_argument
from hetsim.core.errors import ConfigError
from hetsim.core.files import check_new_file, json_text, write_json
from hetsim.core.options import SPEEDUP_METRICS

if TYPE_CHECKING:
    from hetsim.plan.planner import Plan
    from hetsim.plan.rows import Estimate, PolicyRow
    from hetsim.policies.base import Policy

T = TypeVar("T")
WAITS_FOR_FEWER = "its steps do not wait for every worker (--wait-for-all)"
VARIES_BATCH = "its global batch changes as it trains, and a trainer from plan.json keeps the plan's (--wait-for-all)"
REFUSED = {  # a policy named with --policy that --wait-for-all leaves out
    WAITS_FOR_FEWER: "{name} does not wait for every worker each step, which --wait-for-all asks",
    VARIES_BATCH: "{name} changes the global batch as it trains, and --wait-for-all plans for a trainer that keeps "
    "the plan's (--batch-range chooses one)",
}


def add_subcommands(sub: Any) -> None:
    """Add ``plan`` to an argparse subparsers object."""
    pl = sub.add_parser("plan", help="the policy, split and global batch for one cluster, and how fragile they are")
    add_scenario_options(pl, "print the plan as one JSON object (what --out writes)")
    pl.add_argument(
        "--objective",
        choices=tuple(SPEEDUP_METRICS),
        default="throughput",
        help="what the recommendation is best at: throughput (samples per second; the default) or "
        "time_to_target (needs [workload.efficiency] with target_steps)",
    )
    pl.add_argument(
        "--batch-range",
        default=None,
        metavar="LO,HI",
        help="also choose the global batch: the best on the objective of LO, HI and the powers of two and "
        "1.5 times them in between (default: the scenario's)",
    )
    pl.add_argument(
        "--wait-for-all",
        action="store_true",
        help="plan only over what a DDP trainer runs from plan.json (validation.uneven): policies whose every "
        "step waits for every worker, at the plan's global batch (async, backup and ksync left out, and goodput, "
        "whose batch changes as it trains: --batch-range chooses one instead)",
    )
    pl.add_argument(
        "--cost-error",
        type=float,
        default=0.0,
        metavar="E",
        help="how far off the scenario's costs may be, per worker (a relative error, e.g. 0.1 for a profile): "
        "every policy averaged over true costs off by that much, a policy that reads the costs told the "
        "scenario's (default 0: the costs as given; --batch-range still chooses the batch on the costs as given)",
    )
    pl.add_argument(
        "--out", type=path_argument, default=None, metavar="plan.json", help="write the plan here (atomically)"
    )


def parse_batch_range(text: str, option: str = "--batch-range") -> tuple[int, int]:
    """``LO,HI`` -> two increasing positive integers (the scenario's limits are the planner's)."""
    parts = [p.strip() for p in text.split(",")]
    problem = f"expected two increasing positive integers LO,HI, got {text!r}"
    if len(parts) != 2 or not all(p.isdecimal() and p.isascii() for p in parts):
        raise ConfigError(option, problem)
    try:
        lo, hi = int(parts[0]), int(parts[1])
    except ValueError:  # more digits than Python converts
        raise ConfigError(option, problem) from None
    if not 0 < lo < hi:
        raise ConfigError(option, problem)
    return lo, hi


def waiting_for_all(given: Mapping[str, Policy], notes: bool) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """The names of the policies in ``given`` (name: its object) a trainer from plan.json runs
    (``--wait-for-all``: each step waits for every worker, at the plan's global batch), and those
    left out with why: with a note each (the default list), or refused (named with ``--policy``)."""
    from hetsim.policies.base import waits_for_every_worker

    kept, left = [], []
    for name, policy in given.items():
        cls = type(policy)
        why = WAITS_FOR_FEWER if not waits_for_every_worker(cls) else VARIES_BATCH if cls.varies_batch else None
        if why is None:
            kept.append(name)
        elif notes:
            print(f"note: {name} left out: {why}", file=sys.stderr)
            left.append((name, why))
        else:
            raise ConfigError("--policy", REFUSED[why].format(name=name))
    return kept, tuple(left)


def cmd_plan(args: argparse.Namespace) -> int:
    from hetsim.core.provenance import provenance
    from hetsim.plan.planner import check_batch_range, check_cluster, check_objective, plan
    from hetsim.plan.robust import check_cost_error
    from hetsim.policies.base import waits_for_every_worker

    scenario = scenario_of(args)
    check_cluster(scenario)
    given = scenario_policies(args.policy, scenario) if args.policy is not None else None  # built once
    if given is not None and args.wait_for_all:
        waiting_for_all(given, notes=False)
    check_seed(args.seed)
    try:
        check_objective(args.objective, scenario, "--objective")
    except ConfigError as exc:  # the table came from --efficiency: name the file that lacks target_steps
        raise (exc if args.efficiency is None else ConfigError(exc.field, f"{exc.problem} ({args.efficiency} has "
                                                               "none)")) from None  # fmt: skip
    check_cost_error(args.cost_error, "--cost-error")
    batch_range = None if args.batch_range is None else parse_batch_range(args.batch_range)
    if batch_range is not None:
        check_batch_range(batch_range, scenario, "--batch-range")
    if args.out is not None:
        check_out_file(args.out, {".json": "json"}, "--out")
        check_new_file(args.out, "--out")
    say_unfitted(scenario.unfitted())
    skipped: tuple[tuple[str, str], ...] = ()
    if given is None:
        given, skipped = scenario.runnable_policies()
        for name, why in skipped:
            print(f"note: {name} left out: {why}", file=sys.stderr)
        if args.wait_for_all:
            kept, left = waiting_for_all(given, notes=True)
            given, skipped = {name: given[name] for name in kept}, skipped + left
    result = plan(scenario, args.objective, batch_range=batch_range, seed=args.seed, policies=list(given.values()),
                  left_out=skipped, cost_error=args.cost_error)  # fmt: skip
    chosen = result.recommended.policy
    if not args.wait_for_all and result.varies_batch:
        print(f"note: {chosen} is recommended, and {VARIES_BATCH.removesuffix(' (--wait-for-all)')}: "
              f"`validation run --policies {chosen}` runs it; --wait-for-all recommends among the policies a "
              "trainer from plan.json runs", file=sys.stderr)  # fmt: skip
    elif not args.wait_for_all and not waits_for_every_worker(type(given[chosen])):
        print(f"note: {chosen} is recommended, and {WAITS_FOR_FEWER}: a DDP trainer (validation.uneven's among "
              f"them) cannot run it; --wait-for-all recommends among the policies that can"
              + ("" if args.objective == "time_to_target" else f", and {args.objective} counts its stale or "
                 "dropped gradients as progress (--objective time_to_target weighs them)"),
              file=sys.stderr)  # fmt: skip
    data = {**provenance(), **result.to_dict()}  # the command and the commit beside the plan's own record
    if args.out is not None:
        write_json(args.out, data)
    if args.json:
        print(json_text(data))
    else:
        print(plan_text(result))
        if args.out is not None:
            print(f"wrote {args.out}")
    return 0


# ----------------------------------------------------------------------------- the table


def _ms(e: Estimate) -> tuple[str, str]:
    return f"{e.value * 1e3:.3f}", f"{e.low * 1e3:.3f}-{e.high * 1e3:.3f}"


def _sps(e: Estimate) -> tuple[str, str]:
    return f"{e.value:.1f}", f"{e.low:.1f}-{e.high:.1f}"


def _s(e: Estimate | None) -> tuple[str, str]:
    return ("-", "-") if e is None else (f"{e.value:.2f}", f"{e.low:.2f}-{e.high:.2f}")


def policy_table(rows: Sequence[PolicyRow], with_target: bool) -> str:
    """The rows: how each was predicted, then each figure and its interval ("exact" for a closed form)."""
    from hetsim.core.console import text_table
    from hetsim.plan.rows import CLOSED_FORM, EXPECTED_PATH

    header = ["policy", "how", "step ms", "95% CI", "samples/s", "95% CI"] + (["to target s", "95% CI"] * with_target)
    body = []
    for r in rows:
        cells = [*_ms(r.step_s), *_sps(r.throughput_sps)] + (list(_s(r.time_to_target_s)) if with_target else [])
        if r.how in (CLOSED_FORM, EXPECTED_PATH):  # (one averaged over draws of costs has its interval)
            label = "exact" if r.how == CLOSED_FORM else "approx."
            cells[1::2] = [label if c != "-" else "-" for c in cells[1::2]]
        body.append((r.policy, r.how, *cells))
    return text_table(header, body, left=(0, 1))


def runs(names: Sequence[str], values: Sequence[T]) -> list[tuple[str, int, T]]:
    """Consecutive workers of one kind (the name before ``#``) with the same value, as
    (``first..last``, how many, value)."""
    out: list[tuple[str, str, T, int]] = []  # first, last, value, count
    for name, value in zip(names, values):
        if out and out[-1][0].split("#")[0] == name.split("#")[0] and out[-1][2] == value:
            first, _, _, count = out[-1]
            out[-1] = (first, name, value, count + 1)
        else:
            out.append((name, name, value, 1))
    return [(first if count == 1 else f"{first}..{last}", count, value) for first, last, value, count in out]


def _workers(label: str, count: int) -> str:
    return label if count == 1 else f"{label} ({count})"


def _recommended_lines(result: Plan) -> list[str]:
    rec = result.recommended
    gain = "" if result.gain_over_equal is None else f": {result.gain_over_equal:.2f}x equal's {result.objective}"
    if gain and result.equal_batch != result.global_batch:
        gain += " at that batch"
    lines = [
        f"recommended: {rec.policy} ({rec.how}) at global batch {result.recommended_batch}{gain}"
        + (
            ""
            if result.recommended_batch == result.global_batch
            else f" (its own choice, as its final split; the plan's global batch {result.global_batch})"
        ),
        f"  predicted step {rec.step_s.value * 1e3:.3f} ms, {rec.throughput_sps.value:.1f} samples/s"
        + ("" if rec.time_to_target_s is None else f", {rec.time_to_target_s.value:.2f} s to target")
        + _interval_words(result.target_interval),
        "  split (samples per step):",
    ]
    names = [w.name for w in result.scenario.workers]
    lines += [f"    {_workers(label, count)}: {value}" for label, count, value in runs(names, rec.split)]
    lines.append(f"  left out: {', '.join(result.left_out_workers) or 'none'}")
    if (lr := result.learning_rate) is not None:  # the time to target holds at the rate the efficiency was fitted with
        lines.append(f"  learning rate: {_rate_line(lr)} (the {lr['rule']} rule the efficiency was fitted under)")
    return lines + _without_lines(result)


def _interval_words(interval: dict[str, float] | None) -> str:
    """The time to target's intervals from the efficiency's fit, in words ('' without one)."""
    if interval is None:
        return ""
    one_run = (
        f"; one run {interval['one_run_low']:.2f}-{interval['one_run_high']:.2f} s" if "one_run_low" in interval else ""
    )
    return f" (95% from the efficiency's fit: {interval['low']:.2f}-{interval['high']:.2f} s{one_run})"


def _rate_line(lr: dict[str, Any]) -> str:
    """The recommended learning rate in words: the rate set at the efficiency's base batch, scaled."""
    base = "the one" if lr["base_lr"] is None else f"{lr['base_lr']:.4g}"
    set_at = f"{base}{'' if lr['optimizer'] is None else ' with ' + lr['optimizer']} set at global batch"
    if lr["factor"] == 1:
        return f"{set_at} {lr['base_batch']}, unscaled"
    scaled = "" if lr["lr"] is None else f" = {lr['lr']:.6g}"
    return f"{set_at} {lr['base_batch']} times {lr['factor']:.3g}{scaled}"


def _without_lines(result: Plan) -> list[str]:
    """The cluster without the workers left out: they take part in every exchange."""
    other = result.without
    if other is None:
        return []
    mine, theirs = result.recommended.value(result.objective), other.value(result.objective)
    ratio = "" if not mine or not theirs else f" ({theirs / mine:.3f}x the recommendation's {result.objective})"
    target = "" if other.time_to_target_s is None else f", {other.time_to_target_s.value:.2f} s to target"
    head = "  without them in the job (they take part in every exchange, with no samples):"
    return [f"{head} {other.policy} {other.step_s.value * 1e3:.3f} ms, {other.throughput_sps.value:.1f} samples/s"
            f"{target}{ratio}"]  # fmt: skip


def _fragility_lines(result: Plan) -> list[str]:
    if (why := result.why_no_fragility()) is not None:
        return [f"fragility: not computed ({why})"]
    from hetsim.core.console import text_table
    from hetsim.plan.fragility import FRAGILITY_MAX

    names = [f.name for f in result.fragility]
    keyed = [(f.factor, f.holds_to, f.change, f.computed_for) for f in result.fragility]
    body = []
    for label, count, (factor, holds, change, _) in runs(names, keyed):
        at = f"beyond {FRAGILITY_MAX:g}x" if factor is None else f"{factor:.3g}x (holds at {holds:.3g}x)"
        body.append((_workers(label, count), at, change or "-"))
    head = f"fragility: the slowdown of one worker (its cost times a factor, bisection in [1, {FRAGILITY_MAX:g}])"
    table = text_table(("worker", "factor", "change"), body, left=(0, 2))
    return [f"{head} at which the recommendation changes:", table]


def plan_text(result: Plan) -> str:
    """The plan as text: the policies' table, the recommendation, the fragility, the notes."""
    s, wl = result.scenario, result.scenario.workload
    target = wl.efficiency is not None and wl.efficiency.target_steps is not None
    lines = [
        f"{s.name}: {s.n_workers} workers, global batch {result.global_batch}, {wl.epochs} epochs, "
        f"objective {result.objective}, seed {result.seed}",
        policy_table(result.rows, target),
    ]
    if target:  # the columns' intervals are the predictions' own; the efficiency fit's is another
        lines.append(
            "(95% CI: of each prediction, exact for a closed form; the efficiency fit's own uncertainty is "
            "not in them: the recommended line gives it, where the table holds the fit's covariance)"
        )
    if result.batch_range is not None:
        tried = ", ".join(f"{b} ({'-' if p is None else p})" for b, p, _ in result.batch_search)
        why = (f"; for {result.objective}, one that does not reach the target in {wl.epochs} epochs has none (raise "
               "workload.epochs)") if result.objective == "time_to_target" else ""  # fmt: skip
        none = f"; -: no policy with a closed form has a value there (the search weighs closed forms only{why})" if any(
            p is None for _, p, _ in result.batch_search) else ""  # fmt: skip
        lines.append(f"global batches tried in {result.batch_range[0]}..{result.batch_range[1]}: {tried}{none}")
    lines += _recommended_lines(result) + _fragility_lines(result)
    lines += [f"{r.policy}: {r.note}" for r in result.rows if r.note]
    lines += [f"note: {result.extrapolation}"] if result.extrapolation else []
    lines += [f"note: {line}" for line in (*result.cost_extrapolation, *result.cost_unfitted)]
    if target and wl.efficiency is not None and wl.efficiency.measured_on:  # another model's table plans nonsense
        lines.append(f"note: the time to target is that of an efficiency measured on {wl.efficiency.measured_on}")
    return "\n".join(lines)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"plan": cmd_plan}
