"""The store contract's messaging operations (:class:`~stepline.store.messages.MessageStore`) on
PostgreSQL: ``PostgresStore.messages``. Updates with their
replies, stream items, routed queries: their statements, and the step records that carry an
update's reply or a published item (``StepWrite.update``, ``StepWrite.publish``), written one
statement each outside the step records' group commit (they notify their instance's waiters).

Every write that a waiter in another process waits for (a reply, an item, an answer) notifies
the schema's channel naming the instance, with ``e`` set: no worker needs to look for work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._json import dumps, loads
from ...errors import InstanceNotFoundError, LeaseLostError
from .._rows import update_from_row
from ..messages import QUERY_EXPIRY, MessageStore
from ..signals import Signals
from ..types import (
    Claim,
    Lease,
    NewStreamItem,
    PatchesKnown,
    QueryAnswer,
    QueryRequest,
    StepWrite,
    StreamItem,
    StreamRead,
    UpdateRecord,
    routing,
)
from .db import Database
from .notes import Notes
from .pools import Conn
from .sql import render
from .step_sql import ANSWERS_JOIN, ANSWERS_NOTE, STEP_UPSERT
from .update_sends import UPDATE_COLUMNS, Taker, send

_CHANGED = (
    "pg_notify(%(channel)s::text, json_build_object('s', %(source)s::text, 'w', workflow,"
    " 'i', id, 'e', true)::text)"
)
_FENCE = """
    fence AS (
        SELECT status, workflow, id FROM {s}.instances
        WHERE pk = %(pk)s::bigint AND lease_token = %(token)s::bigint
            AND lease_owner = %(owner)s::text
        FOR KEY SHARE
    )
"""
# A stream item (when %(stream)s is given): its number from the stream's row (locked by the
# upsert, so concurrent appends number in turn), unless its origin is there already; then the
# items past the stream's cap or age. The DELETE sees the items as they were before this
# statement: the new one is never among them.
_APPEND = """
    taken AS (
        SELECT 1 FROM {s}.stream_items WHERE instance_pk = %(pk)s::bigint
            AND stream = %(stream)s::text AND origin = %(origin)s::text
    ), numbered AS (
        INSERT INTO {s}.streams AS st (instance_pk, stream, last_seq)
        SELECT %(pk)s::bigint, %(stream)s::text, 1 FROM fence
        WHERE %(stream)s::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taken)
        ON CONFLICT (instance_pk, stream) DO UPDATE SET last_seq = st.last_seq + 1
        RETURNING last_seq
    ), item AS (
        INSERT INTO {s}.stream_items (instance_pk, stream, seq, origin, value, created_at)
        SELECT %(pk)s::bigint, %(stream)s::text, last_seq, %(origin)s::text, %(value)s::text,
            %(at)s::float8
        FROM numbered
        ON CONFLICT DO NOTHING
        RETURNING seq
    ), trimmed AS (
        DELETE FROM {s}.stream_items WHERE instance_pk = %(pk)s::bigint
            AND stream = %(stream)s::text AND EXISTS (SELECT 1 FROM item)
            AND (seq <= (SELECT seq FROM item) - %(keep)s::bigint
                OR created_at < %(cutoff)s::float8)
    )
"""

_RECORDED = (
    """
        INSERT INTO {s}.steps (instance_pk, name, count, seq, kind, status, output, error,
            attempts, wake_at, started_at, ended_at, info)
        SELECT %(pk)s::bigint, %(name)s::text, %(count)s::int, %(seq)s::int, %(kind)s::text,
            %(status)s::text, %(output)s::text, %(error)s::text, %(attempts)s::text,
            %(wake_at)s::float8, %(started_at)s::float8, %(ended_at)s::float8, %(info)s::text
        FROM fence
    """
    + STEP_UPSERT
)
"""The step record itself (insert or replace, fenced), in each statement below."""

_TEMPLATES = {
    "get_update": """
        SELECT i.status, """
    + UPDATE_COLUMNS
    + """ FROM {s}.instances i
        LEFT JOIN {s}.updates u ON u.instance_pk = i.pk AND u.update_id = %s
        WHERE i.workflow = %s AND i.id = %s
    """,
    "reject_update": "WITH"
    + _FENCE
    + """, consumed AS (
            UPDATE {s}.events SET consumed_by = 'rejected'
            WHERE pk = %(event)s::bigint AND EXISTS (SELECT 1 FROM fence)
        ), rejected AS (
            UPDATE {s}.updates SET status = 'rejected', error = %(error)s, ended_at = %(now)s
            WHERE instance_pk = %(pk)s::bigint AND update_id = %(update)s AND status = 'pending'
                AND EXISTS (SELECT 1 FROM fence)
        )
        SELECT workflow, id, """
    + _CHANGED
    + " FROM fence",
    # A step record with its effects. Accepting an update: its event consumed, the update
    # marked running (nobody waits on that: no notification).
    "accept_update": "WITH"
    + _FENCE
    + """, recorded AS ("""
    + _RECORDED
    + """
        ), consumed AS (
            UPDATE {s}.events SET consumed_by = %(name)s::text || '-' || %(count)s::int
            WHERE pk = %(event)s::bigint AND EXISTS (SELECT 1 FROM fence)
        ), running AS (
            UPDATE {s}.updates SET status = 'running'
            WHERE instance_pk = %(pk)s::bigint AND update_id = %(update)s::text
                AND status = 'pending' AND EXISTS (SELECT 1 FROM fence)
        )
        SELECT status, workflow, id, 0 FROM fence
    """,
    # Answering an update: its reply (the record's output or error), once.
    "answer_update": "WITH"
    + _FENCE
    + """, recorded AS ("""
    + _RECORDED
    + """
        ), consumed AS (
            UPDATE {s}.events SET consumed_by = %(name)s::text || '-' || %(count)s::int
            WHERE pk = %(event)s::bigint AND EXISTS (SELECT 1 FROM fence)
        ), answered AS (
            UPDATE {s}.updates SET status = %(status)s::text,
                reply = CASE WHEN %(status)s::text = 'complete' THEN %(output)s::text END,
                error = %(error)s::text, ended_at = %(ended_at)s::float8
            WHERE instance_pk = %(pk)s::bigint AND update_id = %(update)s::text
                AND status IN ('pending', 'running') AND EXISTS (SELECT 1 FROM fence)
            RETURNING update_id, status, reply, error
        )
        SELECT i.status, i.workflow, i.id, pg_notify(%(channel)s::text, """
    + ANSWERS_NOTE
    + """)
        FROM fence i"""
    + ANSWERS_JOIN.replace("{answers}", "answered a"),
    # A publish from run(): the record and its item.
    "publish_step": "WITH"
    + _FENCE
    + """, recorded AS ("""
    + _RECORDED
    + """
        ),"""
    + _APPEND
    + """
        SELECT status, workflow, id, """
    + _CHANGED
    + " FROM fence",
    "publish": "WITH"
    + _FENCE
    + ","
    + _APPEND
    + """
        SELECT (SELECT seq FROM item), workflow, id, """
    + _CHANGED
    + """ FROM fence
    """,
    "read_stream": """
        SELECT i.status, t.seq, t.value, t.created_at FROM {s}.instances i
        LEFT JOIN LATERAL (
            SELECT seq, value, created_at FROM {s}.stream_items
            WHERE instance_pk = i.pk AND stream = %(stream)s AND seq > %(after)s
            ORDER BY seq LIMIT %(limit)s
        ) t ON true
        WHERE i.workflow = %(workflow)s AND i.id = %(id)s
        ORDER BY t.seq
    """,
    "latest_items": """
        SELECT t.stream, t.seq, t.value, t.created_at FROM {s}.instances i
        LEFT JOIN LATERAL (
            SELECT DISTINCT ON (stream) stream, seq, value, created_at FROM {s}.stream_items
            WHERE instance_pk = i.pk ORDER BY stream, seq DESC
        ) t ON true
        WHERE i.workflow = %s AND i.id = %s
        ORDER BY t.stream
    """,
    "ask_query": """
        WITH expired AS (
            DELETE FROM {s}.query_requests WHERE created_at < %(expiry)s
        )
        INSERT INTO {s}.query_requests (workflow, instance_id, name, args, created_at)
        SELECT %(workflow)s, %(id)s, %(name)s, %(args)s, %(now)s
        FROM (SELECT pg_notify(%(channel)s, %(note)s)) AS n
        RETURNING pk
    """,
    "queries_open": """
        SELECT 1 FROM {s}.query_requests WHERE workflow = ANY(%(workflows)s::text[])
            AND NOT answered AND (taken_until IS NULL OR taken_until <= %(now)s) LIMIT 1
    """,
    "take_queries": """
        WITH picked AS (
            SELECT pk FROM {s}.query_requests WHERE workflow = ANY(%(workflows)s::text[])
                AND NOT answered AND (taken_until IS NULL OR taken_until <= %(now)s)
            ORDER BY pk LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        )
        UPDATE {s}.query_requests q SET taken_by = %(owner)s, taken_until = %(until)s
        FROM picked WHERE q.pk = picked.pk
        RETURNING q.pk, q.workflow, q.instance_id, q.name, q.args
    """,
    "answer_query": """
        UPDATE {s}.query_requests SET answered = true, answer = %(answer)s, error = %(error)s
        WHERE pk = %(pk)s AND NOT answered
        RETURNING pg_notify(%(channel)s::text, json_build_object('s', %(source)s::text,
            'w', workflow, 'i', instance_id, 'e', true)::text), workflow, instance_id
    """,
    "take_answer": """
        DELETE FROM {s}.query_requests WHERE pk = %s AND answered RETURNING answer, error
    """,
    "query_exists": "SELECT 1 FROM {s}.query_requests WHERE pk = %s",
    "forget_query": "DELETE FROM {s}.query_requests WHERE pk = %s",
}


@functools.cache
def _statements(schema: str) -> dict[str, str]:
    return render(_TEMPLATES, schema)


def _item_params(item: NewStreamItem | None, at: float) -> dict[str, Any]:
    if item is None:
        return {"stream": None, "origin": None, "value": None, "at": at, "keep": 0, "cutoff": None}
    return {
        "stream": item.stream,
        "origin": item.origin,
        "value": item.value,
        "at": at,
        "keep": item.keep,
        "cutoff": None if item.keep_seconds is None else at - item.keep_seconds,
    }


def _lease_lost(lease: Lease) -> LeaseLostError:
    return LeaseLostError(f"lease on instance {lease.pk} lost by worker {lease.owner}")


class PostgresMessages(MessageStore):
    """The messaging operations on PostgreSQL (``Store.messages``)."""

    def __init__(
        self,
        db: Database,
        schema: str,
        notes: Notes,
        now: Callable[[], float],
        signals: Signals,
    ) -> None:
        self._db = db
        self.schema = schema
        self._notes = notes
        self.now = now
        self._signals = signals

    def _lease_params(self, lease: Lease) -> dict[str, Any]:
        return {
            "pk": lease.pk,
            "token": lease.token,
            "owner": lease.owner,
            "channel": self._notes.channel,
            "source": self._notes.source,
        }

    # -- updates ---------------------------------------------------------------------------------

    async def send_update(
        self, workflow: str, instance_id: str, update_id: str, name: str, payload: str
    ) -> UpdateRecord:
        record, _ = await self._send(workflow, instance_id, (update_id, name, payload), None)
        return record

    async def send_update_and_claim(
        self,
        workflow: str,
        instance_id: str,
        update_id: str,
        name: str,
        payload: str,
        *,
        owner: str,
        lease_seconds: float,
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> tuple[UpdateRecord, Claim | None]:
        taker = Taker(owner, lease_seconds, routing([workflow], versions, patches))
        return await self._send(workflow, instance_id, (update_id, name, payload), taker)

    async def _send(
        self,
        workflow: str,
        instance_id: str,
        update: tuple[str, str, str],
        taker: Taker | None,
    ) -> tuple[UpdateRecord, Claim | None]:
        now = self.now()
        sent = await send(
            self._db, self.schema, self._notes, workflow, instance_id, update, now, taker
        )
        record, claim = sent
        if record.created_at == now and record.status == "pending" and claim is None:
            self._signals.ready()
        return sent

    async def get_update(
        self, workflow: str, instance_id: str, update_id: str
    ) -> UpdateRecord | None:
        rows = await self._db.read(
            f"reading update {update_id!r}",
            _statements(self.schema)["get_update"],
            (update_id, workflow, instance_id),
        )
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        status, *update = rows[0]
        return None if update[0] is None else update_from_row(update, status)

    async def reject_update(
        self, lease: Lease, event: int, update_id: str, error: dict[str, str], now: float
    ) -> None:
        params = self._lease_params(lease) | {
            "event": event,
            "update": update_id,
            "error": dumps(error, what="update error"),
            "now": now,
        }
        rows = await self._db.read(
            f"turning down update {update_id!r}", _statements(self.schema)["reject_update"], params
        )
        if not rows:
            raise _lease_lost(lease)
        self._signals.changed(rows[0][0], rows[0][1])

    async def record_message_step(self, lease: Lease, write: StepWrite) -> str:
        """:meth:`record_step` of a record with messaging effects (one statement, which
        notifies the instance's waiters)."""
        at = write.ended_at or write.started_at or 0.0
        params = (
            self._lease_params(lease)
            | {
                "name": write.name,
                "count": write.count,
                "seq": write.seq,
                "kind": write.kind,
                "status": write.status,
                "output": write.output,
                "error": None if write.error is None else dumps(write.error, what="step error"),
                "attempts": dumps([a.to_json() for a in write.attempts], what="attempts")
                if write.attempts
                else None,
                "wake_at": write.wake_at,
                "started_at": write.started_at,
                "ended_at": write.ended_at,
                "info": None if write.info is None else dumps(write.info, what="step info"),
                "event": write.consume_event,
                "update": write.update,
            }
            | _item_params(write.publish, at)
        )
        if write.publish is not None:
            name = "publish_step"
        elif write.status == "running":
            name = "accept_update"
        else:
            name = "answer_update"
        statement = _statements(self.schema)[name]

        async def attempt(conn: Conn) -> list[Any]:
            cur = await conn.execute(statement, params)
            return await cur.fetchall()

        rows = await self._db.retrying(f"recording step {write.name!r}", attempt)
        if not rows:
            raise _lease_lost(lease)
        status, workflow, instance_id, _note = rows[0]
        if name != "accept_update":  # nobody waits for an acceptance
            self._signals.answered(workflow, instance_id, (write,))
            self._signals.changed(workflow, instance_id)
        return str(status)

    # -- streams ---------------------------------------------------------------------------------

    async def publish(self, lease: Lease, item: NewStreamItem, now: float) -> int | None:
        params = self._lease_params(lease) | _item_params(item, now)
        statement = _statements(self.schema)["publish"]

        async def attempt(conn: Conn) -> list[Any]:
            cur = await conn.execute(statement, params)
            return await cur.fetchall()

        rows = await self._db.retrying(f"publishing to stream {item.stream!r}", attempt)
        if not rows:
            raise _lease_lost(lease)
        seq, workflow, instance_id, _note = rows[0]
        if seq is None:
            return None
        self._signals.changed(workflow, instance_id)
        return int(seq)

    async def read_stream(
        self, workflow: str, instance_id: str, stream: str, after: int, limit: int
    ) -> StreamRead:
        params = {
            "workflow": workflow,
            "id": instance_id,
            "stream": stream,
            "after": after,
            "limit": limit,
        }
        rows = await self._db.read(
            f"reading stream {stream!r}", _statements(self.schema)["read_stream"], params
        )
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        items = [
            StreamItem(stream, seq, loads(value), created)
            for _, seq, value, created in rows
            if seq is not None
        ]
        return StreamRead(items, rows[0][0])

    async def latest_stream_items(self, workflow: str, instance_id: str) -> list[StreamItem]:
        rows = await self._db.read(
            "reading the latest stream items",
            _statements(self.schema)["latest_items"],
            (workflow, instance_id),
        )
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        return [
            StreamItem(stream, seq, loads(value), created)
            for stream, seq, value, created in rows
            if stream is not None
        ]

    # -- routed queries --------------------------------------------------------------------------

    async def ask_query(
        self, workflow: str, instance_id: str, name: str, args: str, now: float
    ) -> int:
        params = {
            "workflow": workflow,
            "id": instance_id,
            "name": name,
            "args": args,
            "now": now,
            "expiry": now - QUERY_EXPIRY,
            "channel": self._notes.channel,
            "note": self._notes.note(),
        }
        rows = await self._db.read(
            f"asking query {name!r}", _statements(self.schema)["ask_query"], params
        )
        self._signals.ready()
        return int(rows[0][0])

    async def take_queries(
        self, owner: str, workflows: Sequence[str], limit: int, lease_seconds: float, now: float
    ) -> list[QueryRequest]:
        if not workflows or limit <= 0:
            return []
        sql = _statements(self.schema)
        params = {
            "workflows": list(workflows),
            "now": now,
            "limit": limit,
            "owner": owner,
            "until": now + lease_seconds,
        }
        # A read first: an idle poll takes no row lock and writes nothing.
        if not await self._db.read("looking for queries", sql["queries_open"], params):
            return []
        rows = await self._db.read("taking queries", sql["take_queries"], params)
        return [QueryRequest(*row) for row in rows]

    async def answer_query(self, pk: int, answer: QueryAnswer, now: float) -> None:
        params = {
            "pk": pk,
            "answer": answer.answer,
            "error": None if answer.error is None else dumps(answer.error, what="query error"),
            "channel": self._notes.channel,
            "source": self._notes.source,
        }
        rows = await self._db.read(
            f"answering query {pk}", _statements(self.schema)["answer_query"], params
        )
        for _note, workflow, instance_id in rows:
            self._signals.changed(workflow, instance_id)

    async def query_answer(self, pk: int) -> QueryAnswer | None:
        sql = _statements(self.schema)
        taken, exists = await self._db.read_many(
            f"reading the answer to query {pk}",
            [(sql["take_answer"], (pk,)), (sql["query_exists"], (pk,))],
        )
        if taken:
            answer, error = taken[0]
            return QueryAnswer(answer, loads(error))
        if not exists:
            raise LookupError(f"no query request {pk}: it was answered and read, or it expired")
        return None

    async def forget_query(self, pk: int) -> None:
        await self._db.execute(
            f"forgetting query {pk}", _statements(self.schema)["forget_query"], (pk,)
        )
