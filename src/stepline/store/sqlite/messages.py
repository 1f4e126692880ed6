"""The store contract's messaging operations (:class:`~stepline.store.messages.MessageStore`) on
SQLite: updates with their replies, stream items, routed queries (their statements and
transactions are ``message_writes``'s)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..._json import dumps, loads
from ...errors import InstanceNotFoundError
from .._rows import update_from_row
from ..messages import MessageStore
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
    new_lease_token,
    routing,
)
from . import message_writes as mw
from . import transactions as tx
from .db import Database


class SqliteMessages(MessageStore):
    """The messaging operations on SQLite (``Store.messages``)."""

    def __init__(self, db: Database, now: Callable[[], float], signals: Signals) -> None:
        self._db = db
        self.now = now
        self._signals = signals

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
        taker = mw.Taker(
            owner,
            new_lease_token(),
            lease_seconds,
            routing([workflow], versions, patches),
        )
        return await self._send(workflow, instance_id, (update_id, name, payload), taker)

    async def _send(
        self,
        workflow: str,
        instance_id: str,
        update: tuple[str, str, str],
        taker: mw.Taker | None,
    ) -> tuple[UpdateRecord, Claim | None]:
        now = self.now()
        sent: tuple[UpdateRecord, Claim | None] = await self._db.write(
            lambda c: mw.send_update(c, workflow, instance_id, update, now, taker),
            durable=True,
        )
        record, claim = sent
        if record.status == "pending" and record.created_at == now and claim is None:
            self._signals.ready()
        return sent

    async def get_update(
        self, workflow: str, instance_id: str, update_id: str
    ) -> UpdateRecord | None:
        rows = await self._db.read(mw.GET_UPDATE, (update_id, workflow, instance_id))
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        status, *update = rows[0]
        return None if update[0] is None else update_from_row(update, status)

    async def reject_update(
        self, lease: Lease, event: int, update_id: str, error: dict[str, str], now: float
    ) -> None:
        text = dumps(error, what="update error")
        workflow, instance_id = await self._db.write(
            lambda c: mw.reject_update(c, lease, event, update_id, text, now)
        )
        self._signals.changed(workflow, instance_id)

    async def record_message_step(self, lease: Lease, write: StepWrite) -> str:
        """:meth:`record_step` of a record with messaging effects; tells the waiters."""
        status, workflow, instance_id = await self._db.write(
            lambda c: tx.record_message_step(c, lease, write)
        )
        if write.status != "running":  # nobody waits for an update's acceptance
            self._signals.answered(workflow, instance_id, (write,))
            self._signals.changed(workflow, instance_id)
        return str(status)

    async def publish(self, lease: Lease, item: NewStreamItem, now: float) -> int | None:
        seq, workflow, instance_id = await self._db.write(lambda c: mw.publish(c, lease, item, now))
        if seq is not None:
            self._signals.changed(workflow, instance_id)
        return seq  # type: ignore[no-any-return]

    async def read_stream(
        self, workflow: str, instance_id: str, stream: str, after: int, limit: int
    ) -> StreamRead:
        rows = await self._db.read(mw.READ_STREAM, (stream, after, limit, workflow, instance_id))
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        items = [
            StreamItem(stream, seq, loads(value), created)
            for _, seq, value, created in rows
            if seq is not None
        ]
        return StreamRead(items, rows[0][0])

    async def latest_stream_items(self, workflow: str, instance_id: str) -> list[StreamItem]:
        found = await self._db.read(mw.INSTANCE_PK, (workflow, instance_id))
        if not found:
            raise InstanceNotFoundError(workflow, instance_id)
        rows = await self._db.read(mw.LATEST_ITEMS, (found[0][0],))
        return [StreamItem(s, seq, loads(value), created) for s, seq, value, created in rows]

    async def ask_query(
        self, workflow: str, instance_id: str, name: str, args: str, now: float
    ) -> int:
        pk: int = await self._db.write(
            lambda c: mw.ask_query(c, workflow, instance_id, name, args, now)
        )
        self._signals.ready()
        return pk

    async def take_queries(
        self, owner: str, workflows: Sequence[str], limit: int, lease_seconds: float, now: float
    ) -> list[QueryRequest]:
        if not workflows or limit <= 0:
            return []
        # A read first: an idle poll must not take the database's write lock.
        statement = mw.open_queries(len(workflows))
        if not await self._db.read(statement, (*workflows, now, 1)):
            return []
        until = now + lease_seconds
        taken: list[QueryRequest] = await self._db.write(
            lambda c: mw.take_queries(c, owner, workflows, limit, until, now)
        )
        return taken

    async def answer_query(self, pk: int, answer: QueryAnswer, now: float) -> None:
        asked = await self._db.write(lambda c: mw.answer_query(c, pk, answer))
        if asked is not None:
            self._signals.changed(*asked)

    async def query_answer(self, pk: int) -> QueryAnswer | None:
        rows = await self._db.read(mw.QUERY_ANSWER, (pk,))
        if not rows:
            raise LookupError(f"no query request {pk}: it was answered and read, or it expired")
        answered, answer, error = rows[0]
        if not answered:
            return None
        # Only this request's caller reads its answer: nobody deletes it meanwhile.
        await self._db.write(lambda c: c.execute(mw.DELETE_QUERY, (pk,)))
        return QueryAnswer(answer, loads(error))

    async def forget_query(self, pk: int) -> None:
        await self._db.write(lambda c: c.execute(mw.DELETE_QUERY, (pk,)))
