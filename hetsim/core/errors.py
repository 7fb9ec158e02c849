"""The exception types a command turns into one line on stderr.

Every check of user input raises :class:`ConfigError` with the dotted path of the offending
field, so the CLI can print exactly one line (``error: <field>: <problem>``) and exit 2. A sweep
cell that fails for any other reason (a bug, in hetsim or in a plug-in) raises
:class:`CellFailed`, which names the cell and the error in one line and ends the command with
exit status 1; both pickle, so they cross from a worker process or a Dask worker unchanged.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid user input; ``field`` is the dotted path of what is wrong ('' for the whole input)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(field, problem)  # its args rebuild it (SimPy re-raises a process's error so)

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}" if self.field else self.problem

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        return ConfigError, (self.field, self.problem)  # so an error in a worker process reaches the parent


class CellFailed(RuntimeError):
    """A sweep cell raised something that is not bad input: ``message`` names the cell and the error."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def __reduce__(self) -> tuple[type[CellFailed], tuple[str]]:
        return CellFailed, (self.message,)
