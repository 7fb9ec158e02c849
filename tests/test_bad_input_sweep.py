"""``hetsim sweep`` (and ``sweep --resume``): every bad or hostile sweep file, option and results
folder, and the one line it gets (exit status 2, no results folder made or changed, no process
left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pandas as pd
import pytest

from hetsim.cli.main import main
from hetsim.core.errors import ConfigError
from tests.refusals import (
    BACKUP_ALONE,
    HUGE,
    WORKER_KEYS,
    case,
    check_refused,
    copy_results_folder,
    deep,
    edit,
    overwrite,
    small_scenario,
    small_sweep,
    toml,
    write_files,
)


def sweep_file(**fields: object) -> dict[str, str]:
    """``sweep.toml``: :func:`small_sweep` with ``fields``."""
    return {"sweep.toml": toml(small_sweep(**fields))}


def with_base(**fields: object) -> dict[str, object]:
    """The small scenario with top-level ``fields`` replaced (``workload`` entries merged)."""
    base = copy.deepcopy(small_scenario())
    for key, value in fields.items():
        if key == "workload":
            base["workload"] = {**base["workload"], **value}
        else:
            base[key] = value
    return base


SWEEP = "{tmp}/sweep.toml"
BAD_POLICY = {"name": "adaptive", "forgetting": 5}

CASES = [
    # the sweep file's own fields
    case("unknown-key", [SWEEP],
         "colour: unknown key (allowed: name, base, base_dir, policies, grid, replications, seed, plots, engine)",
         sweep_file(colour=1)),
    case("name-int", [SWEEP], "name: must be a string, got int (5)", sweep_file(name=5)),
    case("base-dir-int", [SWEEP], "base_dir: must be a string, got int (5)", sweep_file(base_dir=5)),
    case("unknown-policy", [SWEEP], "policies.0: unknown policy 'fastest' (known: {policies})",
         sweep_file(policies=["fastest"])),
    case("no-policies", [SWEEP], "policies: must be a non-empty list of policy names", sweep_file(policies=[])),
    case("policies-string", [SWEEP], "policies: must be a non-empty list of policy names",
         sweep_file(policies="equal")),
    case("replications-zero", [SWEEP], "replications: must be in [1, 100000], got 0", sweep_file(replications=0)),
    case("replications-huge", [SWEEP], f"replications: must be in [1, 100000], got {HUGE}",
         sweep_file(replications=HUGE)),
    case("seed-negative", [SWEEP], f"seed: must be in [0, {2**63 - 1}], got -1", sweep_file(seed=-1)),
    case("seed-past-toml", [SWEEP], f"seed: must be in [0, {2**63 - 1}], got {2**63}", sweep_file(seed=2**63)),
    case("unknown-engine", [SWEEP], "engine: unknown engine 'warp' (known: simpy, vector, auto)",
         sweep_file(engine="warp")),
    # the grid
    case("grid-list", [SWEEP], "grid: must be a table, got a list", sweep_file(grid=[1])),
    case("axis-string", [SWEEP], "grid.workers.0.count: must be a list, got a string ('abc')",
         sweep_file(grid={"workers.0.count": "abc"})),
    case("empty-axis", [SWEEP], "grid.workers.0.count: empty axis: give at least one value",
         sweep_file(grid={"workers.0.count": []})),
    case("axis-lengths", [SWEEP], "grid.n.workers.0.count: has 1 values for 2 labels",
         sweep_file(grid={"n": {"values": [1, 2], "workers.0.count": [2]}})),
    case("axis-without-values", [SWEEP], "grid.n.values: must be a list, got NoneType (None)",
         sweep_file(grid={"n": {"workers.0.count": [2]}})),
    # a setting twice: its cells pooled as one with twice the replications (the interval too narrow)
    case("too-many-points", [SWEEP],  # refused from the counts: a million grid points were each built
         "grid: 100 x 100 x 100 = 1,000,000 grid points, more than 100,000: split the sweep",
         sweep_file(grid={"workers.0.per_sample_s": [1e-3 * (i + 1) for i in range(100)],
                          "workers.0.overhead_s": [1e-3 * i for i in range(100)],
                          "workload.epochs": list(range(1, 101))})),
    case("too-many-runs", [SWEEP], "replications: 1,000 grid points x 1 policies x 1,001 replications = 1,001,000 "
         "runs, more than 1,000,000: split the sweep or give fewer replications",
         sweep_file(replications=1001, grid={"workers.0.per_sample_s": [1e-3 * (i + 1) for i in range(1000)]})),
    case("policy-twice", [SWEEP], "policies.1: 'equal' is listed twice (more runs of one setting: replications)",
         sweep_file(policies=["equal", "equal"])),
    case("axis-value-twice", [SWEEP],
         "grid.workers.0.count.2: 2 is listed twice (more runs of one setting: replications)",
         sweep_file(grid={"workers.0.count": [1, 2, 2]})),
    case("axis-label-twice", [SWEEP], "grid.n.values.1: 'a' is listed twice (more runs of one setting: replications)",
         sweep_file(grid={"n": {"values": ["a", "a"], "workers.0.count": [1, 2]}})),
    case("two-axes-one-path", [SWEEP],  # every cell ran the later axis's value, labelled with the earlier's
         "grid.n.workers.0.per_sample_s: also set by grid.workers.0.per_sample_s: it would overwrite that in every "
         "cell, labelled with values that never ran; set each path on one axis",
         sweep_file(grid={"workers.0.per_sample_s": [1e-3, 2e-3],
                          "n": {"values": ["a", "b"], "workers.0.per_sample_s": [3e-3, 4e-3]}})),
    case("two-axes-one-path-spelled-two-ways", [SWEEP],
         "grid.workers.00.per_sample_s: also set by grid.workers.0.per_sample_s: it would overwrite that in every "
         "cell, labelled with values that never ran; set each path on one axis",
         sweep_file(grid={"workers.0.per_sample_s": [1e-3, 2e-3], "workers.00.per_sample_s": [3e-3, 4e-3]})),
    case("a-table-over-an-axis-inside-it", [SWEEP],
         "grid.workers.0.delay: holds workers.0.delay.value, set by grid.workers.0.delay.value: it would overwrite "
         "that in every cell, labelled with values that never ran; set each path on one axis",
         sweep_file(grid={"workers.0.delay.value": [0.0, 0.1], "workers.0.delay": [{"dist": "constant", "value": 0}]})),
    case("axis-labels-of-two-kinds", [SWEEP],  # one results column: Parquet refused it after every cell had run
         "grid.n.values.1: is a text where the axis's first value is a number: give one kind of value (a number, "
         "a text or a boolean)", sweep_file(grid={"n": {"values": [1, "b"], "workers.0.count": [1, 2]}})),
    case("axis-values-of-two-kinds", [SWEEP],
         "grid.workload.epochs.1: is a text where the axis's first value is a number: give one kind of value (a "
         "number, a text or a boolean)", sweep_file(grid={"workload.epochs": [1, [2]]})),
    case("axis-without-paths", [SWEEP], "grid.n: a named axis needs at least one dotted path besides 'values'",
         sweep_file(grid={"n": {"values": [2]}})),
    case("axis-name-taken", [SWEEP], "grid.seed: this name is taken by a result column; rename the axis",
         sweep_file(grid={"seed": [1, 2]})),
    case("unknown-path", [SWEEP],
         f"grid.workers.0.colour: unknown key (allowed: {WORKER_KEYS}) (at workers.0.colour=1)",
         sweep_file(grid={"workers.0.colour": [1]})),
    case("bad-value", [SWEEP], "grid.workers.0.per_sample_s: must be > 0, got -1 (at workers.0.per_sample_s=-1)",
         sweep_file(grid={"workers.0.per_sample_s": [0.001, -1]})),
    case("policy-cannot-run-a-cell", [SWEEP, "--jobs", "2"],
         f"grid.{BACKUP_ALONE} (at workers.0.count=1)",
         sweep_file(policies=["equal", "backup"], grid={"workers.0.count": [2, 1]})),
    case("goodput-without-efficiency", [SWEEP],
         "grid.workload.efficiency: missing: policy 'goodput' chooses the global batch by statistical efficiency "
         "(give noise_scale and base_batch) (at workers.0.count=2)", sweep_file(policies=["goodput"])),
    case("plots-x", [SWEEP], "plots.x: 'nope' is not a grid axis (workers.0.count)", sweep_file(plots={"x": "nope"})),
    case("plots-cell-axis", [SWEEP], "plots.cell: must map grid axes (workers.0.count) to values",
         sweep_file(plots={"cell": {"nope": 1}})),
    case("plots-cell-value", [SWEEP], "plots.cell.workers.0.count: 9 is not one of [2, 3]",
         sweep_file(plots={"cell": {"workers.0.count": 9}})),
    # the base scenario
    case("base-unknown", [SWEEP], "base.scenario: 'nope' is neither a file nor a built-in scenario ({builtins})",
         sweep_file(base="nope")),
    case("base-type", [SWEEP], "base.workload.global_batch: must be an integer, got a string ('big')",
         sweep_file(base=with_base(workload={"global_batch": "big"}))),
    case("base-noise-scale-zero", [SWEEP], "base.workload.efficiency.noise_scale: must be > 0, got 0",
         sweep_file(base=with_base(workload={"efficiency": {"noise_scale": 0, "base_batch": 8}}))),
    case("base-policy-parameter-swept", [SWEEP], "base.policy.forgetting: must be in (0, 1], got 5",
         sweep_file(base=with_base(policy=BAD_POLICY), policies=["adaptive"])),
    case("base-policy-parameter-not-swept", [SWEEP], "base.policy.forgetting: must be in (0, 1], got 5",
         sweep_file(base=with_base(policy=BAD_POLICY))),
    # the file itself
    case("no-such-file", ["{tmp}/nope.toml"], "{tmp}/nope.toml: no such file"),
    case("empty-file-name", [""], "sweep: empty: give a sweep file"),  # not the working folder
    case("not-toml", [SWEEP], "{tmp}/sweep.toml: not valid TOML: Invalid statement (at line 1, column 1)",
         {"sweep.toml": "{{{"}),
    case("empty", [SWEEP], "base: missing (required)", {"sweep.toml": ""}),
    case("json-list", ["{tmp}/sweep.json"], "{tmp}/sweep.json: the file must hold a table (object) at the top",
         {"sweep.json": "[1]"}),
    case("byte-order-mark", [SWEEP],
         "{tmp}/sweep.toml: starts with a byte-order mark (BOM): save it as UTF-8 without one",
         {"sweep.toml": "\ufeff" + toml(small_sweep())}),
    case("deep-toml", [SWEEP], "{tmp}/sweep.toml: not valid TOML: nested too deeply", {"sweep.toml": deep(".toml")}),
    case("deep-json", ["{tmp}/sweep.json"], "{tmp}/sweep.json: not valid JSON: nested too deeply",
         {"sweep.json": deep(".json")}),
    # options
    case("jobs-zero", [SWEEP, "--jobs", "0"], "--jobs: must be in [1, 256], got 0", sweep_file()),
    case("option-twice", [SWEEP, "--jobs", "1", "--jobs=2"],
         "hetsim sweep: argument --jobs: given twice (give it once)", sweep_file()),
    case("option-twice-abbreviated", [SWEEP, "--jobs", "1", "--job", "2"],
         "hetsim sweep: argument --jobs: given twice (give it once)", sweep_file()),
    case("show-default-and-a-file", [SWEEP, "--show-default"],
         "--show-default: prints the embedded sweep and runs nothing: give no sweep to run", sweep_file()),
    case("runs-with-resume", ["--resume", "{tmp}/nowhere", "--runs", "{tmp}/r"],
         "--runs: not with --resume: the sweep goes on in {tmp}/nowhere"),
    case("jobs-negative", [SWEEP, "--jobs", "-3"], "--jobs: must be in [1, 256], got -3", sweep_file()),
    case("jobs-text", [SWEEP, "--jobs", "two"], "hetsim sweep: argument --jobs: invalid int value: 'two'",
         sweep_file()),
    case("jobs-huge", [SWEEP, "--jobs", "100000000000"], "--jobs: must be in [1, 256], got 100000000000",
         sweep_file()),
    case("timeout-negative", [SWEEP, "--scheduler", "local", "--connect-timeout-s", "-1"],
         "--connect-timeout-s: must be > 0, got -1", sweep_file()),
    case("timeout-nan", [SWEEP, "--scheduler", "tcp://127.0.0.1:1", "--connect-timeout-s", "nan"],
         "--connect-timeout-s: must be finite, got nan", sweep_file()),
    case("scheduler-nonsense", [SWEEP, "--scheduler", "nonsense"],
         "--scheduler: cannot reach nonsense: missing port number in address 'nonsense'", sweep_file(),
         marks=pytest.mark.slow),  # dask.distributed imported: 0.5 s
    case("metric-without-target", [SWEEP, "--metric", "time_to_target"],
         "--metric: time_to_target needs [workload.efficiency] with target_steps in the sweep's scenario",
         sweep_file()),
    case("unknown-metric", [SWEEP, "--metric", "speed"],
         "hetsim sweep: argument --metric: invalid choice: 'speed' (choose from 'throughput', 'time_to_target')",
         sweep_file()),
    case("unknown-engine-option", [SWEEP, "--engine", "warp"],  # checked as the command starts (see simulate's)
         "--engine: unknown engine 'warp' (known: simpy, vector, auto)", sweep_file()),
    case("unknown-trace", [SWEEP, "--trace", "some"],
         "hetsim sweep: argument --trace: invalid choice: 'some' (choose from 'full', 'sample', 'none')", sweep_file()),
    case("sample-every-zero", [SWEEP, "--trace", "sample", "--sample-every", "0"],
         "--sample-every: must be in [1, 1099511627776], got 0", sweep_file()),
    # --sample-every is checked whatever --trace says, as simulate checks it
    case("sample-every-zero-without-sample", [SWEEP, "--sample-every", "0"],
         "--sample-every: must be in [1, 1099511627776], got 0", sweep_file()),
    case("sample-every-without-sample", [SWEEP, "--trace", "none", "--sample-every", "3"],  # was ignored
         "--sample-every: only with --trace sample (it keeps every K-th step's rows)", sweep_file()),
    case("connect-timeout-without-scheduler", [SWEEP, "--connect-timeout-s", "5"],  # was ignored
         "--connect-timeout-s: only with --scheduler (how long to try reaching it)", sweep_file()),
    case("sample-every-huge", [SWEEP, "--trace", "sample", "--sample-every", "1099511627777"],
         "--sample-every: must be in [1, 1099511627776], got 1099511627777", sweep_file()),
    case("sample-every-text", [SWEEP, "--trace", "sample", "--sample-every", "two"],
         "hetsim sweep: argument --sample-every: invalid int value: 'two'", sweep_file()),
    case("runs-in-a-file", [SWEEP, "--runs", "{tmp}/file/runs"], "--runs: cannot make {tmp}/file/runs: Not a directory",
         {**sweep_file(), "file": "x"}),
    case("runs-is-a-file", [SWEEP, "--runs", "{tmp}/file"], "--runs: cannot make {tmp}/file: File exists",
         {**sweep_file(), "file": "x"}),
    case("file-and-resume", [SWEEP, "--resume", "{tmp}"], "--resume: give either a sweep file or --resume, not both",
         sweep_file()),
    case("resume-not-a-results-folder", ["--resume", "{tmp}/nothing"],
         "--resume: {tmp}/nothing is not a sweep results folder (no sweep.toml)"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_sweep_refuses_bad_input(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    runs = [] if "--runs" in argv or "--resume" in argv else ["--runs", "{tmp}/runs"]  # a resumed sweep has its own
    jobs = [] if "--jobs" in argv else ["--jobs", "1"]
    check_refused(main, ["sweep", *argv, *runs, *jobs], line, tmp_path, capsys)


# ----------------------------------------------------------------------------- --resume


SEEDS_EDITED = ("{run}/sweep.toml: edited since the sweep began (its finished cells were run from the sweep as it "
                "was): restore it, or start a new sweep from the edited file")  # fmt: skip


def replace_with_a_file(name: str):
    def damage(run: Path) -> None:
        shutil.rmtree(run / name)
        (run / name).write_text("x")

    return damage


def replace_with_a_folder(name: str):
    def damage(run: Path) -> None:
        (run / name).unlink()
        (run / name).mkdir()

    return damage


RESUME = [
    pytest.param(edit("sweep.toml", "seed = 11", "seed = 12"), [], SEEDS_EDITED, id="seed-edited"),
    pytest.param(edit("sweep.toml", "replications = 1", "replications = 0"), [],
                 "replications: must be in [1, 100000], got 0", id="replications-zero"),
    pytest.param(edit("sweep.toml", '"equal"', '"fastest"'), [],
                 "policies.0: unknown policy 'fastest' (known: {policies})", id="policy-edited"),
    pytest.param(overwrite("sweep.toml", "not toml {"), [],
                 "{run}/sweep.toml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, column 5)",
                 id="sweep-toml-garbage"),
    pytest.param(edit("sweep.toml", "name =", "\ufeffname ="), [],
                 "{run}/sweep.toml: starts with a byte-order mark (BOM): save it as UTF-8 without one",
                 id="sweep-toml-bom"),
    pytest.param(lambda run: (run / "sweep.toml").unlink(), [],
                 "--resume: {run} is not a sweep results folder (no sweep.toml)", id="sweep-toml-gone"),
    pytest.param(replace_with_a_file("parts"), [],  # a cell ran before the write failed
                 "--resume: {run}/parts is not a folder (the finished cells are kept there)", id="parts-a-file"),
    pytest.param(replace_with_a_folder("summary.csv"), [],
                 "--resume: {run}/summary.csv is a folder, where the report writes a file", id="summary-a-folder"),
    pytest.param(lambda run: None, ["--jobs", "0"], "--jobs: must be in [1, 256], got 0", id="jobs-zero"),
    pytest.param(lambda run: None, ["--metric", "time_to_target"],
                 "--metric: time_to_target needs [workload.efficiency] with target_steps in the sweep's scenario",
                 id="metric-without-target"),
    pytest.param(lambda run: None, ["--trace", "none"],
                 "--trace: {run} was started with --trace full: resume it without --trace, or with the same",
                 id="trace-conflict"),
    pytest.param(lambda run: None, ["--sample-every", "0"], "--sample-every: must be in [1, 1099511627776], got 0",
                 id="sample-every-zero"),
    pytest.param(lambda run: None, ["--sample-every", "3"],  # was ignored: the folder keeps its mode
                 "--sample-every: {run} was started with --trace full: resume it without --sample-every, or with "
                 "the same", id="sample-every-on-a-full-folder"),
    pytest.param(edit("meta.json", '"trace": "full"', '"trace": "partial"'), [],
                 "{run}/meta.json: trace: must be one of 'full', 'sample', 'none', got 'partial'",
                 id="meta-trace-edited"),
    pytest.param(overwrite("meta.json", "{"), [],
                 "{run}/meta.json: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
                 "(char 1)", id="meta-json-garbage"),
]  # fmt: skip


@pytest.mark.parametrize(("damage", "extra", "line"), RESUME)
def test_resume_refuses_a_results_folder_it_cannot_trust(damage, extra, line, finished, tmp_path, capsys):
    run = copy_results_folder(finished, tmp_path / "run")
    seeds = pd.read_parquet(run / "parts" / "cell-00000.parquet")["seed"].tolist()
    damage(run)
    line = line.replace("{run}", str(run)).replace("{seeds}", str(seeds))
    jobs = [] if "--jobs" in extra else ["--jobs", "1"]
    check_refused(main, ["sweep", "--resume", str(run), *jobs, *extra], line, tmp_path, capsys)


def test_a_part_of_a_table_set_earlier_is_a_refinement_and_old_folders_still_load():
    from hetsim.sweep.spec import load_sweep, point_scenario

    worker = {"per_sample_s": 0.002, "max_batch": 300}
    grid = {"workers.1": [worker, worker | {"per_sample_s": 0.004}], "workers.1.max_batch": [200, 250]}
    raw = {"base": "paper", "policies": ["equal"], "grid": grid}
    spec = load_sweep(raw)  # the table first, then a part of it: both take effect
    assert [(w.cost.time_s(1), w.max_batch) for w in point_scenario(spec, (1, 0)).workers[1:]] == [(0.004, 200)]
    overlapping = raw | {"grid": {"workers.1.max_batch": [200, 250], "workers.1": [worker]}}
    with pytest.raises(ConfigError):
        load_sweep(overlapping)
    assert len(load_sweep(overlapping, new=False).axes) == 2  # a results folder begun before the check


@pytest.mark.slow  # runs the sweep: out of make test-fast
def test_a_cell_with_an_unfitted_worker_is_said_whichever_cell_is_plotted(tmp_path, capsys):
    """A grid can bring in a calibrated worker kept unfitted in a cell that is not the plotted
    one (only the plotted cell was looked at): each such line is said once, before the run."""
    guess = {"per_sample_s": 0.001, "unfitted": "a guess"}
    grid = {"workers.0": [{"per_sample_s": 0.001, "count": 2}, guess | {"count": 2}, guess | {"count": 3}]}
    (tmp_path / "sweep.toml").write_text(toml(small_sweep(grid=grid)), encoding="utf-8")
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--runs", str(tmp_path / "runs"), "--jobs", "1"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert said == ["hetsim: warning: workers.0 (w0): a guess"]
