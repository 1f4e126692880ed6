"""Retention on SQLite: the finished instances whose ``delete_at`` has come (or, past the
workers' one retention, that ended long enough ago) deleted a batch at a time, with their steps,
events, updates and streams (:meth:`Store.purge_expired`)."""

from __future__ import annotations

import sqlite3

from .transactions import delete_children

EXPIRED = "SELECT pk FROM instances WHERE delete_at <= ? ORDER BY delete_at LIMIT ?"
UNDATED = (
    "SELECT pk FROM instances WHERE ended_at < ? AND delete_at IS NULL"
    " AND status IN ('complete', 'errored', 'terminated') ORDER BY ended_at LIMIT ?"
)
"""Finished instances with no deadline of their own, past the workers' one retention."""
ANY_EXPIRED = (
    "SELECT EXISTS (SELECT 1 FROM instances WHERE delete_at <= ?) OR (? IS NOT NULL AND EXISTS"
    " (SELECT 1 FROM instances WHERE ended_at < ? AND delete_at IS NULL"
    " AND status IN ('complete', 'errored', 'terminated')))"
)
"""Whether anything is to be deleted: a read first, so an idle look takes no write lock."""
DELETE_EXPIRED = "DELETE FROM instances WHERE pk = ? RETURNING workflow, status"


def purge_expired(
    c: sqlite3.Connection, now: float, limit: int, default_cutoff: float | None
) -> dict[tuple[str, str], int]:
    pks = [pk for (pk,) in c.execute(EXPIRED, (now, limit))]
    if default_cutoff is not None and len(pks) < limit:
        pks += [pk for (pk,) in c.execute(UNDATED, (default_cutoff, limit - len(pks)))]
    counts: dict[tuple[str, str], int] = {}
    for pk in pks:
        workflow, status = c.execute(DELETE_EXPIRED, (pk,)).fetchone()
        counts[workflow, status] = counts.get((workflow, status), 0) + 1
        delete_children(c, pk)
    return counts
