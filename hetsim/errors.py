"""The one exception type for bad input.

Every check of user input raises :class:`ConfigError` with the dotted path of the offending
field, so the CLI can print exactly one line (``error: <field>: <problem>``) and exit 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid user input; ``field`` is the dotted path of what is wrong ('' for the whole input)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        return ConfigError, (self.field, self.problem)  # so an error in a worker process reaches the parent
