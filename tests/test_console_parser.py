"""``OneLineParser``'s refusal of an option of one value given twice (:class:`hetsim.core.console._Once`):
as argparse itself reads the command line, in subcommands too, and never left on a namespace."""

from __future__ import annotations

import argparse

import pytest

from hetsim.core.console import SEEN, OneLineParser
from hetsim.core.errors import ConfigError


def _parser(refuse_repeats: bool = True) -> OneLineParser:
    parser = OneLineParser(prog="p", refuse_repeats=refuse_repeats)
    parser.add_argument("-o", "--out")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tag", action="append", default=[])
    return parser


@pytest.mark.parametrize(
    "argv",
    [
        ["--jobs", "1", "--jobs=2"],
        ["--jobs", "1", "--job", "2"],
        ["-oa", "-ob"],
        ["-o", "a", "--out=b"],
        ["--json", "--json"],
    ],  # fmt: skip
    ids=["equals", "abbreviated", "attached", "short-and-long", "flag"],
)
def test_an_option_of_one_value_given_twice_is_refused(argv):
    with pytest.raises(ConfigError, match=r"given twice \(give it once\)$"):
        _parser().parse_args(argv)


def test_what_may_repeat_repeats_and_nothing_is_left_on_the_namespace():
    args = _parser().parse_args(["--tag", "a", "--tag", "b", "--jobs", "3"])
    assert vars(args) == {"out": None, "jobs": 3, "json": False, "tag": ["a", "b"]}
    assert vars(_parser(refuse_repeats=False).parse_args(["--jobs", "1", "--jobs", "2"]))["jobs"] == 2  # the later wins
    given = argparse.Namespace()
    with pytest.raises(ConfigError):
        _parser().parse_args(["--jobs", "1", "--jobs", "2"], given)
    assert SEEN not in vars(given)


def test_a_subcommand_and_a_plain_parser_built_on_one_keep_no_record():
    parser = OneLineParser(prog="p")
    sub = parser.add_subparsers(dest="command").add_parser("run")
    sub.add_argument("--jobs", type=int)
    assert vars(parser.parse_args(["run", "--jobs", "2"])) == {"command": "run", "jobs": 2}
    with pytest.raises(ConfigError, match="p run: argument --jobs: given twice"):
        parser.parse_args(["run", "--jobs", "2", "--jobs", "3"])
    plain = argparse.ArgumentParser(parents=[_parser()], add_help=False)  # argparse's own way there
    assert vars(plain.parse_args(["--jobs", "1", "--jobs", "2"])) == {"out": None, "jobs": 2, "json": False, "tag": []}
