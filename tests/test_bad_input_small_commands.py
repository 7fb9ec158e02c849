"""``hetsim`` itself and its small commands (``scenarios``, ``show``, ``profiles``, ``costs``):
every bad or hostile input and the one line it gets (exit status 2, nothing written, no process
left: :func:`tests.test_bad_input.check_refused`)."""

from __future__ import annotations

import pytest

from hetsim.cli.main import main
from tests.refusals import HUGE, ONE, case, check_refused, deep, toml, write_files

COMMANDS = (
    "'scenarios', 'show', 'simulate', 'sweep', 'report', 'analyze', 'calibrate', 'profiles', 'costs', 'plan', "
    "'import-trace', 'import-logs', 'export-trace', 'calibrate-efficiency'"
)
ENORMOUS = 10**400  # beyond a float

CASES = [
    # hetsim
    case("no-command", [], "the following arguments are required: command"),
    case("unknown-command", ["frobnicate"],
         f"argument command: invalid choice: 'frobnicate' (choose from {COMMANDS})"),
    case("unknown-option", ["--bogus"], "the following arguments are required: command"),
    # scenarios, profiles
    case("scenarios-argument", ["scenarios", "extra"], "unrecognized arguments: extra"),
    case("scenarios-option", ["scenarios", "--json"], "unrecognized arguments: --json"),
    case("profiles-option", ["profiles", "--csv"], "unrecognized arguments: --csv"),
    case("profiles-argument", ["profiles", "extra"], "unrecognized arguments: extra"),
    # show
    case("show-nothing", ["show"], "hetsim show: the following arguments are required: scenario"),
    case("show-unknown", ["show", "nope"], "scenario: 'nope' is neither a file nor a built-in scenario ({builtins})"),
    case("show-bad-set", ["show", "paper", "--set", "workload.global_batch=0"],
         "workload.global_batch: must be in [1, 1099511627776], got 0"),
    case("show-unknown-key", ["show", "paper", "--set", "colour=1"],
         "colour: unknown key (allowed: name, description, seed, workload, network, workers, policy)"),
    case("show-set-without-equals", ["show", "paper", "--set", "seed"], "--set: expected PATH=VALUE, got 'seed'"),
    case("show-a-device", ["show", "/dev/null"], "/dev/null: not a regular file (a device, pipe or socket)"),
    case("show-not-toml", ["show", "{tmp}/s.toml"],
         "{tmp}/s.toml: not valid TOML: Expected '=' after a key in a key/value pair (at line 1, column 6)",
         {"s.toml": "this is not = = toml"}),
    case("show-json-list", ["show", "{tmp}/s.json"], "{tmp}/s.json: the file must hold a table (object) at the top",
         {"s.json": "[1, 2]"}),
    case("show-bom", ["show", "{tmp}/s.toml"],
         "{tmp}/s.toml: starts with a byte-order mark (BOM): save it as UTF-8 without one",
         {"s.toml": "\ufeff" + toml(ONE)}),
    case("show-deep", ["show", "{tmp}/deep.toml"], "{tmp}/deep.toml: not valid TOML: nested too deeply",
         {"deep.toml": deep(".toml")}),
    case("show-policy-parameter", ["show", "paper", "--set", "policy={name='adaptive', forgetting=5}"],
         "policy.forgetting: must be in (0, 1], got 5"),
    # costs
    case("costs-no-batch", ["costs", "paper"], "hetsim costs: the following arguments are required: --batch"),
    case("costs-text", ["costs", "paper", "--batch", "16,zero"], "--batch: must be an integer, got a string ('zero')"),
    case("costs-zero", ["costs", "paper", "--batch", "0"], "--batch: must be in [1, 1099511627776], got 0"),
    case("costs-negative", ["costs", "paper", "--batch", "-4"], "--batch: must be in [1, 1099511627776], got -4"),
    case("costs-empty", ["costs", "paper", "--batch", ""], "--batch: no batch size given"),
    case("costs-commas", ["costs", "paper", "--batch", ",,"], "--batch: no batch size given"),
    case("costs-size-left-out", ["costs", "paper", "--batch", "1,,2"], "--batch: an empty size in '1,,2'"),
    case("costs-float", ["costs", "paper", "--batch", "1e3"], "--batch: must be an integer, got a string ('1e3')"),
    case("costs-nan", ["costs", "paper", "--batch", "nan"], "--batch: must be an integer, got a string ('nan')"),
    case("costs-unknown-scenario", ["costs", "nope", "--batch", "16"],
         "scenario: 'nope' is neither a file nor a built-in scenario ({builtins})"),
    case("costs-bad-set", ["costs", "paper", "--batch", "16", "--set", "workers.0.per_sample_s=-1"],
         "workers.0.per_sample_s: must be > 0, got -1"),
    case("costs-unknown-device", ["costs", "paper", "--batch", "16", "--set",
                                  "workers.0={cost={model='profile', device='tpu', workload='resnet'}}"],
         "workers.0.cost.device: unknown device 'tpu' (known: k80, p100, v100)"),
    case("costs-huge", ["costs", "paper", "--batch", str(HUGE)], f"--batch: must be in [1, 1099511627776], got {HUGE}"),
    case("costs-beyond-a-float", ["costs", "mixed-gpus", "--batch", str(ENORMOUS)],
         "--batch: must be in [1, 1099511627776], got an integer of about 400 digits"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line", "files"), CASES)
def test_small_commands_refuse_bad_input(argv, line, files, tmp_path, capsys, monkeypatch):
    write_files(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    check_refused(main, argv, line, tmp_path, capsys)
