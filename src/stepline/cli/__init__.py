"""The ``stepline`` command-line interface (``stepline --help``).

Built with click (commands, options, shell completion) and rich (tables, colours on a terminal,
the live view of ``stepline run``). Every list, describe and status command takes ``--json``.
"""

from ._app import cli, main

__all__ = ["cli", "main"]
