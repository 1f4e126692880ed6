"""Stores: where instances, steps and events live. :func:`create_store` picks one by URL."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from .base import Store
from .sqlite import SqliteStore

__all__ = ["SqliteStore", "Store", "create_store"]


def create_store(
    url: str,
    clock: Callable[[], float] | None = None,
    *,
    create: bool = True,
    read_only: bool = False,
) -> Store:
    """A store for ``url``: ``sqlite:///file.db`` or ``postgresql://user@host/db``.

    ``clock``: the time the store follows (a test's manual clock); None for real time (the
    PostgreSQL server's clock on PostgreSQL).

    ``create=False``: a SQLite file that does not exist is an error when the store is opened,
    instead of being created (a PostgreSQL database always has to exist; its schema is created
    either way).

    ``read_only=True``: the store can only read (the database refuses its writes), and opening
    it migrates nothing: a schema behind this code's is a ``StoreError`` (what a check of a
    production database opens; a missing SQLite file is an error too).

    The PostgreSQL store is imported only when a PostgreSQL URL is used: importing psycopg
    is slow enough to notice, and every ``stepline`` command on the embedded SQLite database
    would otherwise pay for it (this is start-up time, not a way around an import cycle).
    """
    if url.startswith("sqlite:"):
        return SqliteStore(url, clock, create=create, read_only=read_only)
    if url.startswith(("postgresql:", "postgres:")):
        module = importlib.import_module(".postgres", __name__)
        return cast(Store, module.PostgresStore(url, clock, read_only=read_only))
    raise ValueError(
        f"unsupported database URL {url!r}: use sqlite:///path/to/file.db or "
        "postgresql://user:password@host:5432/dbname"
    )
