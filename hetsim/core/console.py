"""What any command line built on hetsim shares (``python -m hetsim``, ``python -m validation``,
a user's own tool): the one-line error contract (:class:`OneLineParser`, :func:`run_main`), lists
of policy names, and plain-text tables. It sits below hetsim's command-line and report modules,
which ``validation`` does not import.

Importing it costs nothing beyond the standard library and hetsim's dependency-free modules: the
policy registry, whose plug-ins import numpy and scipy, loads them when names are checked.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hetsim.core.errors import CellFailed, ConfigError
from hetsim.core.registry import POLICIES

SEEN = "_hetsim_options_seen"  # the namespace's record, during one parse, of the options given


class _Once:
    """An action of one value (or a flag) that refuses a second occurrence, as argparse itself
    parsed it (``--jobs=2``, an abbreviation ``--job 2``, an attached ``-o2``): argparse would let
    the later replace the earlier, so ``--policy equal --policy dynamic`` ran dynamic alone. Only
    in a :class:`OneLineParser` (a plain parser given one as a parent keeps argparse's way)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        if not isinstance(parser, OneLineParser) or not parser.refuse_repeats:
            super().__call__(parser, namespace, values, option_string)  # type: ignore[misc]
            return
        seen = namespace.__dict__.setdefault(SEEN, set())
        if self in seen:
            options = "/".join(self.option_strings)  # type: ignore[attr-defined]
            parser.error(f"argument {options}: given twice (give it once)")
        seen.add(self)
        super().__call__(parser, namespace, values, option_string)  # type: ignore[misc]


ONCE = {
    name: type(f"Once{base.__name__}", (_Once, base), {})
    for name, base in (
        ("store", argparse._StoreAction),
        ("store_const", argparse._StoreConstAction),
        ("store_true", argparse._StoreTrueAction),
        ("store_false", argparse._StoreFalseAction),
    )
}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as a ConfigError: one line and exit status 2; and
    refuses an option of one value given twice (:class:`_Once`), which argparse would let the
    later replace: every option added by ``add_argument`` with argparse's own store actions (not
    one added with an action class of its own, or from a plain parser given as a parent).

    An option's metavar can be left to a function (:meth:`defer_metavar`), called only when
    this parser's usage or help is shown: names that only a heavy module lists (calibrate's
    models, beside scipy) then cost nothing to a command line that does not show them."""

    def __init__(self, *args: Any, refuse_repeats: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, action in ONCE.items():
            self.register("action", name, action)
        self.register("action", None, ONCE["store"])  # add_argument's default action
        self._deferred: list[tuple[argparse.Action, Callable[[], str]]] = []
        self.refuse_repeats = refuse_repeats  # False for a command line a program composes (a later option wins)

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.partition(" ")[2]  # a subcommand's parser names it; the program's own is said once
        raise ConfigError("", f"{self.prog}: {message}" if command else message)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace = argparse.Namespace() if namespace is None else namespace
        try:
            return super().parse_known_args(args, namespace)
        finally:  # a subcommand's namespace too, before argparse copies it into the command's
            namespace.__dict__.pop(SEEN, None)

    def defer_metavar(self, action: argparse.Action, metavar: Callable[[], str]) -> None:
        """Show ``metavar()`` as ``action``'s metavar (which needs one meanwhile: argparse
        formats it once as the option is added)."""
        self._deferred.append((action, metavar))

    def format_usage(self) -> str:
        self._fill_metavars()
        return super().format_usage()

    def format_help(self) -> str:
        self._fill_metavars()
        return super().format_help()

    def _fill_metavars(self) -> None:
        for action, metavar in self._deferred:
            action.metavar = metavar()
        self._deferred.clear()


def path_argument(text: str) -> Path:
    """argparse ``type`` of every path option: an empty one (``--out ''``, a variable that was not
    set) is refused, not read as the working folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: name a file or folder")
    return Path(text)


class Terminated(KeyboardInterrupt):
    """A signal other than Ctrl-C's (SIGTERM) that a command ends on as it does on Ctrl-C: what
    runs stops and what was finished is kept (raise it from the signal's handler)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_terminated(signum: int, frame: object) -> None:
    """A signal handler that raises :class:`Terminated`."""
    raise Terminated(signum)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` (Ctrl-C's KeyboardInterrupt, with
    the signal), so that the command's ``finally`` blocks stop what it started and it ends as on
    Ctrl-C, saying so; the handler before is restored after. Only in the main thread, where
    handlers can be set (elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_signal(stopped: KeyboardInterrupt) -> signal.Signals:
    """The signal that stopped a command: :class:`Terminated`'s, else Ctrl-C's SIGINT."""
    return signal.Signals(stopped.signum if isinstance(stopped, Terminated) else signal.SIGINT)


def stop_status(stopped: KeyboardInterrupt) -> int:
    """The exit status of a command stopped by ``stopped``: 128 + its signal, as a shell reports a
    death by it (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + int(stop_signal(stopped))


def run_main(prog: str, run: Callable[[], int]) -> int:
    """Run a command; bad input (and a path that cannot be read or written) ends in one line on
    stderr, ``<prog>: error: ...``, and exit status 2; a sweep cell that failed otherwise in one
    line and exit status 1; Ctrl-C in one line and exit status 130 (SIGTERM, where the command
    turns it into :class:`Terminated`: 143)."""
    try:
        return run()
    except KeyboardInterrupt as stopped:
        how = "interrupted" if stop_signal(stopped) == signal.SIGINT else f"terminated ({stop_signal(stopped).name})"
        print(f"\n{prog}: {how}", file=sys.stderr)
        return stop_status(stopped)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
    except CellFailed as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            return 0
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or exc}", file=sys.stderr)
    return 2


def parse_counts(text: str, option: str) -> tuple[int, ...]:
    """``A,B,...`` -> whole numbers >= 1, distinct, in the order given (``--batches``): plain
    ASCII digits only, as int() also takes ``1_0`` (10), `` 2`` and other scripts' digits;
    ConfigError on ``option``."""
    parts = text.split(",")
    if not all(p.isdecimal() and p.isascii() for p in parts):
        raise ConfigError(option, f"expected whole numbers separated by commas, got {text!r}")
    if any(len(p) > 15 for p in parts):  # past any batch, and int() refuses thousands of digits
        raise ConfigError(option, f"a value of more than 15 digits in {text!r}")
    out = tuple(int(p) for p in parts)
    if min(out) < 1:
        raise ConfigError(option, f"every value must be >= 1, got {text!r}")
    if len(set(out)) != len(out):
        raise ConfigError(option, f"{next(v for i, v in enumerate(out) if v in out[:i])} is given twice in {text!r}")
    return out


def parse_policies(value: object, option: str = "--policy", reserved: Mapping[str, str] | None = None) -> list[str]:
    """``a,b,c`` (or a list of names) -> names, each checked against the registry and listed
    once; a name in ``reserved`` is refused with its problem."""
    if not isinstance(value, (str, list, tuple)):
        raise ConfigError(option, f"expected a comma-separated string or a list of policy names, got {value!r}")
    names = [p.strip() for p in value.split(",")] if isinstance(value, str) else [str(p).strip() for p in value]
    if not any(names):
        raise ConfigError(option, "no policy given")
    if not all(names):  # a name left out between commas, or a stray comma: say so rather than guess
        raise ConfigError(option, f"an empty name in {','.join(names)!r}")
    for name in names:
        if reserved and name in reserved:
            raise ConfigError(option, reserved[name])
        POLICIES.lookup(name, option)  # the registry imports the built-in policies (and scipy) on first use
    if len(set(names)) != len(names):
        raise ConfigError(option, "a policy is listed twice")
    return names


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: Collection[int] = (0,)) -> str:
    """Columns padded to width, right-aligned but for the ``left`` ones, with a rule under the header."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
