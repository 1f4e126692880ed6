"""Stores: where instances, steps and events live. :func:`open_store` picks one by URL."""

from __future__ import annotations

from collections.abc import Callable

from .base import Store
from .sqlite import SqliteStore

__all__ = ["SqliteStore", "Store", "create_store"]


def create_store(url: str, clock: Callable[[], float]) -> Store:
    """A store for ``url``: ``sqlite:///file.db`` or ``postgresql://user@host/db``."""
    if url.startswith("sqlite:"):
        return SqliteStore(url, clock)
    if url.startswith(("postgresql:", "postgres:")):
        from .postgres import PostgresStore

        return PostgresStore(url, clock)
    raise ValueError(
        f"unsupported database URL {url!r}: use sqlite:///path/to/file.db or "
        "postgresql://user:password@host:5432/dbname"
    )
