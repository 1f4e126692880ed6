"""SQLite store: one file, WAL mode, shared safely by several worker processes.

Each operation of the contract reads through the database (``db.Database``) or submits one of
the write transactions (``transactions``) to its group commit; how writes are grouped,
committed and retried is the database's business (see ``db``). Flow control (the limits a
claim applies, the next wake-up under them, their use, step slots) is ``flow``'s, the cron
schedule operations ``schedules``'s, the fleet-wide figures ``stats``'s, messaging
``messages``'s: each adds its
operations as an object of ``SqliteStore``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ...errors import InstanceNotFoundError
from ...flow.claiming import NextLook
from ...limits import Limit
from ...records import (
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    StepRecord,
    WorkflowInfo,
)
from .._rows import (
    claims_on_creation,
    decode_cursor,
    encode_cursor,
    event_from_row,
    instance_from_row,
    settle_sleeps,
    step_from_row,
    workflow_from_row,
)
from ..base import (
    Claim,
    Claimed,
    ControlAction,
    Finish,
    Lease,
    NewInstance,
    StepWrite,
    Store,
    WorkflowMeta,
)
from ..types import PatchesKnown, routing
from . import flow, sql
from . import transactions as tx
from .closing import SqliteClosing
from .db import Database, missing_message
from .flow import SqliteFlow
from .messages import SqliteMessages
from .operations import SqliteOperations
from .retention import SqliteRetention
from .schedules import SqliteSchedules
from .stats import SqliteStats
from .workers import SqliteWorkers


def path_from_url(url: str) -> str:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``sqlite://:memory:``."""
    if not url.startswith("sqlite://"):
        raise ValueError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to/file.db)")
    rest = url[len("sqlite://") :]
    if rest in (":memory:", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise ValueError(
            f"invalid SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////abs.db"
        )
    return rest[1:]


class SqliteStore(Store):
    """The embedded store. ``url`` is ``sqlite:///path/to/file.db``; ``clock`` is the time to
    follow, by default (None) this machine's clock.

    :meth:`open` creates a missing file (and its directories) unless ``create`` is False; then
    a missing file raises :class:`~stepline.ConfigError` naming it, and nothing is created.
    """

    def __init__(
        self,
        url: str,
        clock: Callable[[], float] | None = None,
        *,
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        super().__init__(clock)
        self.url = url
        self.path = path_from_url(url)
        self.create = create
        self._db = Database(self.path, create=create, read_only=read_only)
        self.schedules = SqliteSchedules(self._db, self.now, self.signals.ready)
        self.flow = SqliteFlow(self._db, self.now, self.signals.ready)
        self.stats = SqliteStats(self._db)
        self.workers = SqliteWorkers(self._db)
        self._messages = SqliteMessages(self._db, self.now, self.signals)
        self.messages = self._messages
        self.operations = SqliteOperations(self._db, self.now, self.signals)
        self.closing = SqliteClosing(self._db, self.now, self.signals.ready)
        self.retention = SqliteRetention(self._db, self.now, self.signals.ready)

    @property
    def retry_seconds(self) -> float:
        """How long an operation waits for another connection's lock before it fails with
        StoreUnavailableError."""
        return self._db.retry_seconds

    @retry_seconds.setter
    def retry_seconds(self, value: float) -> None:
        self._db.retry_seconds = value

    def missing_message(self) -> str:
        return missing_message(self.path)

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        await self._db.open()
        self.schema_versions = self._db.schema_versions

    async def close(self) -> None:
        await self._db.close()

    # -- workflows -------------------------------------------------------------------------------

    async def register_workflows(
        self, metas: Sequence[WorkflowMeta], limits: Sequence[Limit] = ()
    ) -> None:
        now = self.now()
        await self._db.write(lambda c: tx.register_workflows(c, metas, limits, now), durable=True)

    async def list_workflows(self) -> list[WorkflowInfo]:
        rows = await self._db.read(sql.LIST_WORKFLOWS)
        counts: dict[str, dict[str, int]] = {}
        for workflow, status, n in await self._db.read(sql.COUNT_INSTANCES):
            counts.setdefault(workflow, {})[status] = n
        return [workflow_from_row(row, counts) for row in rows]

    # -- instances -------------------------------------------------------------------------------

    async def create_instances(
        self, workflow: str, items: Sequence[NewInstance], *, trigger: str, skip_existing: bool
    ) -> list[InstanceRecord]:
        return await self._create(workflow, items, trigger, skip_existing)

    async def create_and_claim(
        self,
        workflow: str,
        items: Sequence[NewInstance],
        *,
        trigger: str,
        skip_existing: bool,
        owner: str,
        lease_seconds: float,
        limit: int,
    ) -> tuple[list[InstanceRecord], list[Claim]]:
        created = await self._create(
            workflow, items, trigger, skip_existing, owner=owner, lease=lease_seconds, limit=limit
        )
        return created, claims_on_creation(created, owner)

    async def _create(
        self,
        workflow: str,
        items: Sequence[NewInstance],
        trigger: str,
        skip_existing: bool,
        *,
        owner: str | None = None,
        lease: float = 0.0,
        limit: int = 0,
    ) -> list[InstanceRecord]:
        """Both creates: the first ``limit`` distinct ids leased to ``owner`` for ``lease``
        seconds (see :meth:`create_and_claim`)."""
        now = self.now()
        expires = now + lease
        created: list[InstanceRecord] = await self._db.write(
            lambda c: tx.create(
                c, workflow, items, trigger, skip_existing, now,
                owner=owner, lease_expires=expires, limit=limit,
            ),
            durable=True,
        )  # fmt: skip
        if any(record.status == "queued" for record in created):
            self.signals.ready()
        return created

    async def get_instance(self, workflow: str, instance_id: str) -> InstanceRecord:
        rows = await self._db.read(sql.INSTANCE_BY_ID, (workflow, instance_id))
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        return instance_from_row(rows[0])

    async def list_instances(
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        *,
        oldest_first: bool = False,
    ) -> InstancePage:
        after = decode_cursor(cursor)
        given = [value for value in (workflow, status, after) if value is not None]
        statement = sql.list_instances(
            workflow=workflow is not None,
            status=status is not None,
            after=after is not None,
            oldest_first=oldest_first,
        )
        rows = await self._db.read(statement, (*given, limit + 1))
        records = [instance_from_row(row) for row in rows[:limit]]
        next_cursor = encode_cursor(records[-1].pk) if len(rows) > limit else None
        return InstancePage(records, next_cursor)

    async def get_steps(self, workflow: str, instance_id: str) -> list[StepRecord]:
        instance = await self.get_instance(workflow, instance_id)
        rows = await self._db.read(sql.STEPS_OF, (instance.pk,))
        return settle_sleeps([step_from_row(row) for row in rows], instance, self.now())

    async def control(
        self,
        workflow: str,
        instance_id: str,
        action: ControlAction,
        *,
        rollback: bool = False,
        from_step: tuple[str, int] | None = None,
        version: str | None = None,
    ) -> InstanceRecord:
        now = self.now()
        result: tuple[InstanceRecord, bool] = await self._db.write(
            lambda c: tx.control(
                c, workflow, instance_id, action, rollback, from_step, now, version
            ),
            durable=True,
        )
        record, woke = result
        self.signals.changed(workflow, instance_id)
        if record.ready_at is not None or woke:
            self.signals.ready()
        return record

    async def send_event(
        self, workflow: str, instance_id: str, event_type: str, payload: str | None
    ) -> None:
        now = self.now()
        await self._db.write(
            lambda c: tx.send_event(c, workflow, instance_id, event_type, payload, now),
            durable=True,
        )
        self.signals.ready()

    async def get_events(self, workflow: str, instance_id: str) -> list[InstanceEvent]:
        instance = await self.get_instance(workflow, instance_id)
        rows = await self._db.read(sql.EVENTS_OF, (instance.pk,))
        return [event_from_row(row) for row in rows]

    # -- activations -----------------------------------------------------------------------------

    async def claim(
        self,
        owner: str,
        workflows: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: float,
        *,
        caps: Mapping[str, int] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> Claimed:
        if not workflows or limit <= 0:
            return Claimed([])
        served = routing(workflows, versions, patches)
        # A read first: an idle poll must not take the database's write lock.
        due = sql.any_due(len(workflows), None if served is None else served.shape)
        if not await self._db.read(due, (now, *workflows, *(served.params if served else ()))):
            return Claimed([])
        expires = now + lease_seconds
        claimed: tuple[list[Claim], NextLook | None] = await self._db.write(
            lambda c: tx.claim(c, owner, workflows, limit, expires, now, caps, served)
        )
        return Claimed(*claimed)

    async def record_step(self, lease: Lease, write: StepWrite, now: float) -> str:
        if write.update is not None or write.publish is not None:
            return await self._messages.record_message_step(lease, write)
        status: str = await self._db.write(lambda c: tx.record_step(c, lease, write))
        return status

    async def renew(
        self, leases: Sequence[Lease], lease_seconds: float, now: float
    ) -> dict[int, str]:
        expires = now + lease_seconds
        held: dict[int, str] = await self._db.write(lambda c: tx.renew(c, leases, expires))
        return held

    async def finish(self, lease: Lease, finish: Finish, now: float) -> str:
        result: tuple[str, str, str, bool, float | None] = await self._db.write(
            lambda c: tx.finish(c, lease, finish, now)
        )
        status, workflow, instance_id, woke, ready_at = result
        self.signals.answered(workflow, instance_id, finish.steps)
        self.signals.changed(workflow, instance_id)
        if woke:
            self.signals.ready()
        else:
            self.signals.suspended(status, ready_at, now)
        return status

    async def release(self, lease: Lease, now: float) -> None:
        await self._db.write(lambda c: tx.release(c, lease, now))
        self.signals.ready()

    async def next_wakeup(
        self,
        workflows: Sequence[str],
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> float | None:
        if not workflows:
            return None
        now = self.now()
        served = routing(workflows, versions, patches)
        earliest: float | None = await self._db.read_with(
            lambda c: flow.next_wakeup(c, workflows, now, served)
        )
        return earliest
