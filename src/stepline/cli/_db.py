"""``stepline db init``: create the project's database (or bring its schema up to date)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from ..store.sqlite import path_from_url
from ._common import State, json_option, pass_state, print_json, run_async


@click.group("db")
def db() -> None:
    """Create the database. Client commands never create one; workers and `run` do too."""


async def _init(state: State) -> tuple[int, int]:
    async with state.engine() as engine:
        # Opening created the file or schema and applied the migrations it lacked.
        versions = engine.store.schema_versions
    assert versions is not None  # set by every store's open
    return versions


def _postgres_schema(url: str) -> str:
    # Imported here: only a PostgreSQL URL needs the PostgreSQL store (and psycopg).
    split_url = importlib.import_module("stepline.store.postgres").split_url
    return str(split_url(url)[1])


@db.command("init")
@json_option
@pass_state
def init(state: State, as_json: bool) -> None:
    """Create the project's database, or apply pending migrations to an existing one.

    A SQLite file is created with its directories; a PostgreSQL database must exist (its
    schema is created). Idempotent: it says whether it created the schema, upgraded it or
    found it up to date, and its version.
    """
    url = state.project.database
    before, after = run_async(_init(state))
    shown: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        where = str(Path(path_from_url(url)).absolute())
        shown["database"] = where
    else:
        schema = _postgres_schema(url)
        shown["database"] = "the PostgreSQL database"
        shown["schema"] = schema
        where = f'schema "{schema}" of the PostgreSQL database'
    if as_json:
        print_json({**shown, "created": before == 0, "version": after, "previous_version": before})
        return
    source = state.database_source()
    if before == 0:
        said = f"🗄 Created {where}, schema version {after} ({source})"
    elif before < after:
        said = f"🗄 Upgraded {where} from schema version {before} to {after} ({source})"
    else:
        said = f"🗄 Schema up to date in {where}: version {after} ({source})"
    state.out.print(Text(said))
