"""The embedded SQLite store: ``store`` (the contract's operations), ``transactions`` (its
writes), ``sql`` (every statement) and ``db`` (the connection and the group commit)."""

from __future__ import annotations

from .db import directory_message
from .store import SqliteStore, path_from_url

__all__ = ["SqliteStore", "directory_message", "path_from_url"]
