"""The embedded SQLite store: ``store`` (the contract's operations), ``transactions`` (its
writes), ``sql`` (every statement) and ``db`` (the connection and the group commit)."""

from __future__ import annotations

from .store import SqliteStore, path_from_url

__all__ = ["SqliteStore", "path_from_url"]
