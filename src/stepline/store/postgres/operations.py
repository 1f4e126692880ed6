"""The PostgreSQL store's operations over many instances (``store/operations.py``): filtered
reads, tags, and bulk jobs whose batches run in one exactly-once transaction each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..._json import dumps, loads
from ...errors import LeaseLostError
from ...operations.language import Filter, PkWindow, TagError, parse
from ...operations.language.tags import MAX_TAGS
from ...records import InstancePage, InstanceRecord, StepRecord
from .._rows import (
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
from .bulk_restart import BulkRestart
from .db import Database
from .instances import InstanceWrites
from .notes import Notes
from .pools import Conn
from .retention import PostgresRetention
from .search_sql import Statements
from .sql import render as render_templates

_STEP_READS = {
    "unfinished_steps": """
        SELECT p.pk, s.* FROM unnest(%s::bigint[]) AS p(pk)
        CROSS JOIN LATERAL (
            SELECT {scols} FROM {s}.steps
            WHERE instance_pk = p.pk AND status IN ('running', 'waiting') ORDER BY seq
        ) AS s
        ORDER BY p.pk, s.seq
    """,
    "histories": """
        SELECT instance_pk, {scols} FROM {s}.steps WHERE instance_pk = ANY(%s::bigint[])
        ORDER BY instance_pk, seq
    """,
}
"""The steps of many instances, read at once."""


class PostgresOperations(OperationsStore):
    def __init__(
        self,
        db: Database,
        schema: str,
        instances: InstanceWrites,
        retention: PostgresRetention,
        notes: Notes,
        now: Callable[[], float],
        signals: Signals,
    ) -> None:
        self._db = db
        self._notes = notes
        self._q = Statements(schema)
        self._steps = render_templates(_STEP_READS, schema)
        self._restart = BulkRestart(schema)
        self._instances = instances
        self._retention = retention
        self._now = now
        self._signals = signals

    async def search(
        self, where: Filter, limit: int, cursor: str | None, *, oldest_first: bool = False
    ) -> InstancePage:
        after = decode_cursor(cursor)
        rows = await self._page_rows(where, limit + 1, after, oldest_first)
        records = [replace(instance_from_row(row), tags=loads(row[-1]) or {}) for row in rows]
        page = records[:limit]
        next_cursor = encode_cursor(page[-1].pk) if len(records) > limit else None
        return InstancePage(page, next_cursor)

    async def _page_rows(
        self, where: Filter, limit: int, after: int | None, oldest_first: bool
    ) -> list[Any]:
        """Up to ``limit`` rows (the instance's columns, then its tags) of ``where`` after
        ``after``, in the page's order. Filters are planned for their values at each run (not
        prepared): how many instances a tag's value names decides the plan."""
        first = self._q.search(where, limit, after=after, oldest_first=oldest_first)
        rows = await self._db.read("listing instances", first.sql, first.params, prepare=False)
        if not first.driven:
            return rows
        full, edge = rows[0][-2:]
        found = [row[:-2] for row in rows if row[0] is not None]
        if len(found) < limit and full:
            statement, params = self._q.beyond(
                where, limit - len(found), edge=edge, oldest_first=oldest_first
            )
            found += await self._db.read("listing instances", statement, params, prepare=False)
        return found

    async def count(self, where: Filter) -> int:
        statement, params = self._q.count(where)
        rows = await self._db.read("counting instances", statement, params, prepare=False)
        return int(rows[0][0])

    async def version_counts(self, workflow: str) -> dict[str, dict[str, int]]:
        statement = (
            f"SELECT version, status, count(*) FROM {self._q.s}.instances WHERE workflow = %s"
            " GROUP BY version, status"
        )
        return count_by_version(await self._db.read("counting versions", statement, (workflow,)))

    async def unfinished_steps(self, instance_pks: Sequence[int]) -> dict[int, list[StepRecord]]:
        found: dict[int, list[StepRecord]] = {}
        if not instance_pks:
            return found
        pks = list(dict.fromkeys(instance_pks))
        query = self._steps["unfinished_steps"]
        for row in await self._db.read("reading unfinished steps", query, (pks,)):
            found.setdefault(row[0], []).append(step_from_row(row[1:]))
        return found

    async def histories(self, instances: Sequence[InstanceRecord]) -> dict[int, list[StepRecord]]:
        found: dict[int, list[StepRecord]] = {}
        if not instances:
            return found
        pks = list(dict.fromkeys(i.pk for i in instances))
        query = self._steps["histories"]
        for row in await self._db.read("reading step histories", query, (pks,)):
            found.setdefault(row[0], []).append(step_from_row(row[1:]))
        now = self._now()
        return {i.pk: settle_sleeps(found[i.pk], i, now) for i in instances if i.pk in found}

    async def tags_of(self, instance_pks: Sequence[int]) -> dict[int, dict[str, Any]]:
        rows = await self._db.read(
            "reading tags",
            f"SELECT pk, tags FROM {self._q.s}.instances"
            " WHERE pk = ANY(%s::bigint[]) AND tags IS NOT NULL",
            (list(instance_pks),),
        )
        return {pk: loads(tags) for pk, tags in rows}

    async def add_tags(self, lease: Lease, tags: str) -> dict[str, Any]:
        s = self._q.s

        async def body(conn: Conn) -> dict[str, Any]:
            cur = await conn.execute(
                f"SELECT tags FROM {s}.instances WHERE pk = %s AND lease_token = %s"
                " AND lease_owner = %s FOR UPDATE",
                (lease.pk, lease.token, lease.owner),
            )
            row = await cur.fetchone()
            if row is None:
                raise LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")
            merged = {**(loads(row[0]) or {}), **loads(tags)}
            if len(merged) > MAX_TAGS:
                raise TagError(f"step.tag: {len(merged)} tags, at most {MAX_TAGS} per instance")
            await conn.execute(
                f"UPDATE {s}.instances SET tags = %s WHERE pk = %s",
                (dumps(merged, what="tags"), lease.pk),
            )
            return merged

        return await self._db.transaction("tagging an instance", body)

    async def start_bulk(self, job: NewBulkJob) -> BulkJob:
        now = self._now()
        s = self._q.s

        async def body(conn: Conn) -> BulkJob:
            cur = await conn.execute(f"SELECT 1 FROM {s}.bulk_jobs WHERE id = %s", (job.id,))
            if await cur.fetchone():
                raise ValueError(f"a bulk job {job.id!r} exists already")
            cur = await conn.execute(f"SELECT COALESCE(max(pk), 0) FROM {s}.instances")
            (max_pk,) = await cur.fetchone() or (0,)
            statement, params = self._q.count(job.filter, up_to=True)
            cur = await conn.execute(statement, (max_pk, *params))
            (total,) = await cur.fetchone() or (0,)
            given = (job.id, job.action, job.filter.text, job.from_step, job.started_by)
            cur = await conn.execute(
                f"INSERT INTO {s}.bulk_jobs (id, action, filter, from_step, started_by, status,"
                " max_pk, total, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, 'running', %s, %s, %s, %s)"
                f" RETURNING {BULK_COLUMNS}",
                (*given, max_pk, total, now, now),
            )
            return bulk_from_row(await cur.fetchone() or ())

        return await self._db.transaction("starting a bulk job", body)

    async def run_bulk_batch(self, job_id: str, batch: int) -> BulkBatch:
        now = self._now()
        acted: list[tuple[str, str]] = []
        s = self._q.s

        async def body(conn: Conn) -> BulkJob:
            acted.clear()  # a transaction retried starts again
            # The job's row lock makes concurrent batches of one job take turns.
            cur = await conn.execute(
                f"SELECT {BULK_COLUMNS}, max_pk FROM {s}.bulk_jobs WHERE id = %s FOR UPDATE",
                (job_id,),
            )
            found = await cur.fetchone()
            if found is None:
                raise BulkJobNotFoundError(job_id)
            job = bulk_from_row(found)
            if job.status != "running":
                return job
            window = PkWindow(above=job.cursor, below=found[-1] + 1)
            cond, params = self._q.condition(parse(job.filter), window)
            cur = await conn.execute(
                f"SELECT i.pk, i.workflow, i.id FROM {s}.instances i"
                f" WHERE i.pk > %s AND i.pk <= %s AND ({cond}) ORDER BY i.pk LIMIT %s",
                (job.cursor, found[-1], *params, batch),
            )
            rows = await cur.fetchall()
            skipped, last_skip = 0, job.last_skip
            if job.action == "restart":  # set-based: a few statements for the whole batch
                from_step = (job.from_step, 1) if job.from_step is not None else None
                restarted = await self._restart.run(conn, rows, from_step, now)
                acted.extend(restarted.acted)
                skipped = len(restarted.skipped)
                last_skip = restarted.skipped[-1] if restarted.skipped else last_skip
                rows_left: list[tuple[int, str, str]] = []
            else:
                rows_left = rows
            for _pk, workflow, instance_id in rows_left:
                try:
                    await self._act(conn, job, workflow, instance_id, now)
                except SKIPPABLE as exc:
                    skipped += 1
                    last_skip = f"{workflow}/{instance_id}: {exc}"
                else:
                    acted.append((workflow, instance_id))
            if acted:  # one notification for the batch: idle workers look for work
                notes = self._notes
                await conn.execute("SELECT pg_notify(%s, %s)", (notes.channel, notes.note()))
            ended = len(rows) < batch
            cur = await conn.execute(
                f"UPDATE {s}.bulk_jobs SET cursor = %s, done = done + %s,"
                " skipped = skipped + %s, last_skip = %s, updated_at = %s,"
                " status = CASE WHEN %s THEN 'complete' ELSE status END,"
                " ended_at = CASE WHEN %s THEN %s::float8 END WHERE id = %s"
                f" RETURNING {BULK_COLUMNS}",
                (
                    rows[-1][0] if rows else job.cursor, len(acted), skipped, last_skip, now,
                    ended, ended, now, job_id,
                ),
            )  # fmt: skip
            return bulk_from_row(await cur.fetchone() or ())

        job = await self._db.transaction(f"running bulk job {job_id!r}", body)
        for workflow, instance_id in acted:
            self._signals.changed(workflow, instance_id)
        if acted:
            self._signals.ready()
        return BulkBatch(job, tuple(acted) if job.action == "delete" else ())

    async def _act(
        self, conn: Conn, job: BulkJob, workflow: str, instance_id: str, now: float
    ) -> None:
        if job.action == "delete":
            await self._retention.delete_in(conn, workflow, [instance_id], True, now)
            return
        from_step = (job.from_step, 1) if job.from_step is not None else None
        await self._instances.control_in(
            conn, workflow, instance_id, job.action, False, from_step, now
        )

    async def bulk_jobs(self, status: BulkStatus | None, limit: int) -> list[BulkJob]:
        where = "WHERE status = %s" if status is not None else ""
        given = [status] if status is not None else []
        rows = await self._db.read(
            "listing bulk jobs",
            f"SELECT {BULK_COLUMNS} FROM {self._q.s}.bulk_jobs {where} ORDER BY pk DESC LIMIT %s",
            (*given, limit),
        )
        return [bulk_from_row(row) for row in rows]

    async def bulk_job(self, job_id: str) -> BulkJob:
        rows = await self._db.read(
            "reading a bulk job",
            f"SELECT {BULK_COLUMNS} FROM {self._q.s}.bulk_jobs WHERE id = %s",
            (job_id,),
        )
        if not rows:
            raise BulkJobNotFoundError(job_id)
        return bulk_from_row(rows[0])

    async def cancel_bulk(self, job_id: str) -> BulkJob:
        now = self._now()
        s = self._q.s

        async def body(conn: Conn) -> BulkJob:
            await conn.execute(
                f"UPDATE {s}.bulk_jobs SET status = 'cancelled', updated_at = %s,"
                " ended_at = %s WHERE id = %s AND status = 'running'",
                (now, now, job_id),
            )
            cur = await conn.execute(
                f"SELECT {BULK_COLUMNS} FROM {s}.bulk_jobs WHERE id = %s", (job_id,)
            )
            row = await cur.fetchone()
            if row is None:
                raise BulkJobNotFoundError(job_id)
            return bulk_from_row(row)

        return await self._db.transaction("cancelling a bulk job", body)
