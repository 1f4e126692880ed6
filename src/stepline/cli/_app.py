"""The ``stepline`` command: global options and the command tree."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import click

from .. import __version__
from . import (
    _messages,  # noqa: F401 - registers query, update and subscribe
    _replay,  # noqa: F401 - registers workflows replay-check
    _schedule_edits,  # noqa: F401 - registers schedules create, update and delete
)
from ._bulk import bulk
from ._common import State
from ._consume import consume
from ._db import db
from ._instances import instances
from ._run import run, worker
from ._schedules import schedules
from ._tokens import tokens
from ._workers import workers
from ._workflows import workflows

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

LAZY_COMMANDS = {"serve": "stepline.http.command:serve_command"}
"""Commands imported only when used, so other commands do not pay for their imports (the HTTP
server's starlette and uvicorn)."""


class LazyGroup(click.Group):
    """A group whose :data:`LAZY_COMMANDS` load on first use (click's documented pattern for
    lazily loaded subcommands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            module, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{LAZY_COMMANDS[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--database",
    metavar="URL",
    help="Database URL (overrides STEPLINE_DATABASE_URL and stepline.toml), e.g. "
    "sqlite:///stepline.db or postgresql://user@host/db.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Use this stepline.toml (or pyproject.toml) instead of searching upwards from the "
    "current directory.",
)
@click.version_option(__version__, "--version", prog_name="stepline")
@click.pass_context
def cli(ctx: click.Context, database: str | None, config_path: Path | None) -> None:
    """Stepline: durable workflows for Python.

    Configuration comes from the nearest stepline.toml (or [tool.stepline] in pyproject.toml).
    Shell completion: eval "$(_STEPLINE_COMPLETE=bash_source stepline)" (zsh_source, fish_source).
    """
    # The database driver's retry warnings would repeat what the one-line error says.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    ctx.obj = State(database=database, config_path=config_path)


workflows.add_command(instances)
cli.add_command(workflows)
cli.add_command(worker)
cli.add_command(consume)
cli.add_command(workers)
cli.add_command(schedules)
cli.add_command(tokens)
cli.add_command(run)
cli.add_command(db)
cli.add_command(bulk)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="stepline")
