"""The SQLite store's operations over many instances (``store/operations.py``): filtered reads,
tags, and bulk jobs whose batches run in one write transaction each."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..._json import dumps, loads
from ...errors import LeaseLostError
from ...operations.language import Filter, PkWindow, TagError, parse, render
from ...operations.language.tags import MAX_TAGS
from ...records import InstancePage, InstanceRecord, StepRecord
from .._rows import (
    STEP_COLUMNS,
    count_by_version,
    decode_cursor,
    encode_cursor,
    instance_from_row,
    settle_sleeps,
    step_from_row,
)
from ..operations import (
    BULK_COLUMNS,
    SKIPPABLE,
    BulkBatch,
    BulkJob,
    BulkJobNotFoundError,
    BulkStatus,
    NewBulkJob,
    OperationsStore,
    bulk_from_row,
)
from ..signals import Signals
from ..types import Lease
from . import retention
from . import transactions as tx
from .bulk_restart import restart_batch
from .db import Database
from .sql import RECORD_COLUMNS, VERSION_COUNTS, qmarks

TAGS_TABLE = "instance_tags"
UNFINISHED_STEPS_BATCH = 500
"""Instances per read of :meth:`SqliteOperations.unfinished_steps` and ``histories`` (SQLite
caps the parameters of one statement)."""


def search_statement(
    where: Filter, *, after: int | None, oldest_first: bool
) -> tuple[str, list[Any]]:
    """The page read after the cursor's pk ``after`` if any (then LIMIT)."""
    window = None
    if after is not None:
        window = PkWindow(above=after) if oldest_first else PkWindow(below=after)
    cond = render(where, "sqlite", tags_table=TAGS_TABLE, window=window)
    order = "ASC" if oldest_first else "DESC"
    page = (" AND i.pk > ?" if oldest_first else " AND i.pk < ?") if after is not None else ""
    statement = (
        f"SELECT {RECORD_COLUMNS}, i.tags FROM instances i WHERE ({cond.sql}){page}"
        f" ORDER BY i.pk {order} LIMIT ?"
    )
    return statement, [*cond.params, *([after] if after is not None else [])]


def steps_of_many(n: int) -> str:
    """Every step of ``n`` instances: ``instance_pk`` and the ``STEP_COLUMNS``."""
    return (
        f"SELECT instance_pk, {STEP_COLUMNS} FROM steps WHERE instance_pk IN ({qmarks(n)})"
        " ORDER BY instance_pk, seq"
    )


def unfinished_steps(n: int) -> str:
    """The running and waiting steps of ``n`` instances: ``instance_pk`` and the
    ``STEP_COLUMNS``."""
    return (
        f"SELECT instance_pk, {STEP_COLUMNS} FROM steps WHERE instance_pk IN ({qmarks(n)})"
        " AND status IN ('running', 'waiting') ORDER BY instance_pk, seq"
    )


class SqliteOperations(OperationsStore):
    def __init__(self, db: Database, now: Callable[[], float], signals: Signals) -> None:
        self._db = db
        self._now = now
        self._signals = signals

    async def search(
        self, where: Filter, limit: int, cursor: str | None, *, oldest_first: bool = False
    ) -> InstancePage:
        after = decode_cursor(cursor)
        statement, params = search_statement(where, after=after, oldest_first=oldest_first)
        rows = await self._db.read(statement, (*params, limit + 1))
        records = [replace(instance_from_row(row), tags=loads(row[-1]) or {}) for row in rows]
        page = records[:limit]
        next_cursor = encode_cursor(page[-1].pk) if len(records) > limit else None
        return InstancePage(page, next_cursor)

    async def count(self, where: Filter) -> int:
        cond = render(where, "sqlite", tags_table=TAGS_TABLE)
        rows = await self._db.read(
            f"SELECT count(*) FROM instances i WHERE {cond.sql}", cond.params
        )
        return int(rows[0][0])

    async def version_counts(self, workflow: str) -> dict[str, dict[str, int]]:
        return count_by_version(await self._db.read(VERSION_COUNTS, (workflow,)))

    async def unfinished_steps(self, instance_pks: Sequence[int]) -> dict[int, list[StepRecord]]:
        return await self._steps_of(instance_pks, unfinished_steps)

    async def histories(self, instances: Sequence[InstanceRecord]) -> dict[int, list[StepRecord]]:
        found = await self._steps_of([i.pk for i in instances], steps_of_many)
        now = self._now()
        return {i.pk: settle_sleeps(found[i.pk], i, now) for i in instances if i.pk in found}

    async def _steps_of(
        self, instance_pks: Sequence[int], query: Callable[[int], str]
    ) -> dict[int, list[StepRecord]]:
        found: dict[int, list[StepRecord]] = {}
        pks = list(dict.fromkeys(instance_pks))
        for start in range(0, len(pks), UNFINISHED_STEPS_BATCH):
            chunk = pks[start : start + UNFINISHED_STEPS_BATCH]
            for row in await self._db.read(query(len(chunk)), chunk):
                found.setdefault(row[0], []).append(step_from_row(row[1:]))
        return found

    async def tags_of(self, instance_pks: Sequence[int]) -> dict[int, dict[str, Any]]:
        found: dict[int, dict[str, Any]] = {}
        pks = list(dict.fromkeys(instance_pks))
        for start in range(0, len(pks), 500):
            chunk = pks[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            statement = f"SELECT pk, tags FROM instances WHERE pk IN ({marks}) AND tags IS NOT NULL"
            for pk, tags in await self._db.read(statement, chunk):
                found[pk] = loads(tags)
        return found

    async def add_tags(self, lease: Lease, tags: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._db.write(lambda c: _add_tags(c, lease, tags))
        return result

    async def start_bulk(self, job: NewBulkJob) -> BulkJob:
        now = self._now()
        started: BulkJob = await self._db.write(lambda c: _start(c, job, now), durable=True)
        return started

    async def run_bulk_batch(self, job_id: str, batch: int) -> BulkBatch:
        now = self._now()
        result: tuple[BulkJob, list[tuple[str, str]]] = await self._db.write(
            lambda c: _run_batch(c, job_id, batch, now), durable=True
        )
        job, acted = result
        for workflow, instance_id in acted:
            self._signals.changed(workflow, instance_id)
        if acted:
            self._signals.ready()
        return BulkBatch(job, tuple(acted) if job.action == "delete" else ())

    async def bulk_jobs(self, status: BulkStatus | None, limit: int) -> list[BulkJob]:
        where = "WHERE status = ?" if status is not None else ""
        given = [status] if status is not None else []
        rows = await self._db.read(
            f"SELECT {BULK_COLUMNS} FROM bulk_jobs {where} ORDER BY pk DESC LIMIT ?",
            (*given, limit),
        )
        return [bulk_from_row(row) for row in rows]

    async def bulk_job(self, job_id: str) -> BulkJob:
        rows = await self._db.read(f"SELECT {BULK_COLUMNS} FROM bulk_jobs WHERE id = ?", (job_id,))
        if not rows:
            raise BulkJobNotFoundError(job_id)
        return bulk_from_row(rows[0])

    async def cancel_bulk(self, job_id: str) -> BulkJob:
        now = self._now()
        job: BulkJob = await self._db.write(lambda c: _cancel(c, job_id, now), durable=True)
        return job


def _job(c: sqlite3.Connection, job_id: str) -> tuple[BulkJob, int]:
    row = c.execute(f"SELECT {BULK_COLUMNS}, max_pk FROM bulk_jobs WHERE id = ?", (job_id,))
    found = row.fetchone()
    if found is None:
        raise BulkJobNotFoundError(job_id)
    return bulk_from_row(found), int(found[-1])


def _start(c: sqlite3.Connection, job: NewBulkJob, now: float) -> BulkJob:
    if c.execute("SELECT 1 FROM bulk_jobs WHERE id = ?", (job.id,)).fetchone():
        raise ValueError(f"a bulk job {job.id!r} exists already")
    (max_pk,) = c.execute("SELECT COALESCE(max(pk), 0) FROM instances").fetchone()
    cond = render(job.filter, "sqlite", tags_table=TAGS_TABLE)
    (total,) = c.execute(
        f"SELECT count(*) FROM instances i WHERE i.pk <= ? AND ({cond.sql})",
        (max_pk, *cond.params),
    ).fetchone()
    given = (job.id, job.action, job.filter.text, job.from_step, job.started_by)
    c.execute(
        "INSERT INTO bulk_jobs (id, action, filter, from_step, started_by, status, max_pk, total,"
        " created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
        (*given, max_pk, total, now, now),
    )
    return _job(c, job.id)[0]


def _run_batch(
    c: sqlite3.Connection, job_id: str, batch: int, now: float
) -> tuple[BulkJob, list[tuple[str, str]]]:
    job, max_pk = _job(c, job_id)
    if job.status != "running":
        return job, []
    window = PkWindow(above=job.cursor, below=max_pk + 1)
    cond = render(parse(job.filter), "sqlite", tags_table=TAGS_TABLE, window=window)
    rows = c.execute(
        f"SELECT i.pk, i.workflow, i.id FROM instances i WHERE i.pk > ? AND i.pk <= ?"
        f" AND ({cond.sql}) ORDER BY i.pk LIMIT ?",
        (job.cursor, max_pk, *cond.params, batch),
    ).fetchall()
    acted: list[tuple[str, str]] = []
    skipped, last_skip = 0, job.last_skip
    if job.action == "restart":  # set-based: a few statements for the whole batch
        from_step = (job.from_step, 1) if job.from_step is not None else None
        acted, skips = restart_batch(c, rows, from_step, now)
        skipped, last_skip = len(skips), skips[-1] if skips else last_skip
    for _pk, workflow, instance_id in rows if job.action != "restart" else []:
        c.execute("SAVEPOINT bulk_item")
        try:
            _act(c, job, workflow, instance_id, now)
        except SKIPPABLE as exc:
            c.execute("ROLLBACK TO SAVEPOINT bulk_item")
            skipped += 1
            last_skip = f"{workflow}/{instance_id}: {exc}"
        else:
            acted.append((workflow, instance_id))
        c.execute("RELEASE SAVEPOINT bulk_item")
    cursor = rows[-1][0] if rows else job.cursor
    ended = len(rows) < batch
    c.execute(
        "UPDATE bulk_jobs SET cursor = ?, done = done + ?, skipped = skipped + ?, last_skip = ?,"
        " updated_at = ?, status = CASE WHEN ? THEN 'complete' ELSE status END,"
        " ended_at = CASE WHEN ? THEN ? END WHERE id = ?",
        (cursor, len(acted), skipped, last_skip, now, ended, ended, now, job_id),
    )
    return _job(c, job_id)[0], acted


def _act(c: sqlite3.Connection, job: BulkJob, workflow: str, instance_id: str, now: float) -> None:
    if job.action == "delete":
        retention.delete_instances(c, workflow, [instance_id], True, now)
        return
    from_step = (job.from_step, 1) if job.from_step is not None else None
    tx.control(c, workflow, instance_id, job.action, False, from_step, now)


def _cancel(c: sqlite3.Connection, job_id: str, now: float) -> BulkJob:
    job, _ = _job(c, job_id)
    if job.status == "running":
        c.execute(
            "UPDATE bulk_jobs SET status = 'cancelled', updated_at = ?, ended_at = ? WHERE id = ?",
            (now, now, job_id),
        )
    return _job(c, job_id)[0]


def _add_tags(c: sqlite3.Connection, lease: Lease, tags: str) -> dict[str, Any]:
    row = c.execute(
        "SELECT tags FROM instances WHERE pk = ? AND lease_token = ? AND lease_owner = ?",
        (lease.pk, lease.token, lease.owner),
    ).fetchone()
    if row is None:
        raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
    merged = {**(loads(row[0]) or {}), **loads(tags)}
    if len(merged) > MAX_TAGS:
        raise TagError(f"step.tag: {len(merged)} tags, at most {MAX_TAGS} per instance")
    c.execute("UPDATE instances SET tags = ? WHERE pk = ?", (dumps(merged, what="tags"), lease.pk))
    return merged
