"""``hetsim analyze``: every bad or hostile input and the one line it gets (exit status 2,
nothing written, no process left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import pytest

from hetsim.cli.main import main
from tests.refusals import BACKUP_ALONE, HUGE, ONE, case, check_refused, deep, toml, write_files

CASES = [
    case("unknown-policy", ["paper", "--policy", "nope"], "--policy: unknown policy 'nope' (known: {policies})"),
    case("no-policy", ["paper", "--policy", ""], "--policy: no policy given"),
    case("policy-twice", ["paper", "--policy", "equal,equal"], "--policy: a policy is listed twice"),
    case("seed-negative", ["paper", "--seed", "-1"], "--seed: must be >= 0, got -1"),
    case("seed-text", ["paper", "--seed", "abc"], "hetsim analyze: argument --seed: invalid int value: 'abc'"),
    case("option-of-simulate", ["paper", "--out", "x"], "unrecognized arguments: --out x"),
    case("batch-zero", ["paper", "--set", "workload.global_batch=0"],
         "workload.global_batch: must be in [1, 1099511627776], got 0"),
    case("batch-huge", ["paper", "--set", f"workload.global_batch={HUGE}"],
         f"workload.global_batch: must be in [1, 1099511627776], got {HUGE}"),
    case("per-sample-nan", ["paper", "--set", "workers.0.per_sample_s=nan"],
         "workers.0.per_sample_s: must be finite, got nan"),
    case("unknown-key", ["paper", "--set", "colour=1"],
         "colour: unknown key (allowed: name, description, seed, workload, network, workers, policy)"),
    case("too-many-steps", ["paper", "--set", "workload.epochs=100000000"],
         "workload: 19500000000 steps, more than the 6.71e+07 a run can summarise"),
    case("goodput-without-efficiency", ["paper", "--policy", "goodput"],
         "workload.efficiency: missing: policy 'goodput' chooses the global batch by statistical efficiency "
         "(give noise_scale and base_batch)"),
    case("backup-one-worker", ["{tmp}/one.toml", "--policy", "backup"],
         BACKUP_ALONE, {"one.toml": toml(ONE)}),
    case("policy-parameter-other-policy", ["paper", "--set", "policy={name='adaptive', forgetting=5}", "--policy",
                                           "equal", "--set", "workload.epochs=1"],
         "policy.forgetting: must be in (0, 1], got 5"),
    case("no-such-scenario", ["nope"], "scenario: 'nope' is neither a file nor a built-in scenario ({builtins})"),
    case("not-toml", ["{tmp}/s.toml"],
         "{tmp}/s.toml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, column 6)",
         {"s.toml": "this is not = = toml"}),
    case("json-list", ["{tmp}/s.json"], "{tmp}/s.json: the file must hold a table (object) at the top",
         {"s.json": "[1, 2]"}),
    case("byte-order-mark", ["{tmp}/s.toml"],
         "{tmp}/s.toml: starts with a byte-order mark (BOM): save it as UTF-8 without one",
         {"s.toml": "\ufeff" + toml(ONE)}),
    case("deep-json", ["{tmp}/deep.json"], "{tmp}/deep.json: not valid JSON: nested too deeply",
         {"deep.json": deep(".json")}),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_analyze_refuses_bad_input(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    check_refused(main, ["analyze", *argv], line, tmp_path, capsys)
