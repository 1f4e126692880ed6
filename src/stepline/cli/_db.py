"""``stepline db init``: create the project's database (or bring its schema up to date)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from ..store.sqlite import path_from_url
from ._common import State, json_option, pass_state, print_json, run_async


@click.group("db")
def db() -> None:
    """Create the database. Client commands never create one; workers and `run` do too."""


async def _init(state: State) -> None:
    async with state.engine():
        pass  # opening creates the file and applies the migrations


@db.command("init")
@json_option
@pass_state
def init(state: State, as_json: bool) -> None:
    """Create the project's database, or apply pending migrations to an existing one.

    A SQLite file is created with its directories; a PostgreSQL database must exist (its
    schema is created). Idempotent.
    """
    existed = state.database_exists()
    url = state.project.database
    run_async(_init(state))
    where = (
        str(Path(path_from_url(url)).absolute())
        if url.startswith("sqlite:")
        else "the PostgreSQL database"
    )
    if as_json:
        print_json({"database": where, "created": not existed})
        return
    what = "Created" if not existed else "Schema up to date in"
    state.out.print(Text(f"🗄 {what} {where} ({state.database_source()})"))
