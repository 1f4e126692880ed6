"""PostgresStore: the store contract's operations on PostgreSQL. The parts with a job of their own
are modules beside it: the claim (``claim``), activation writes (``writes``), the slots of named
limits that steps take (``slots``), the client's writes (``instances``) and reads (``reads``),
the server clock (``clock``), notifications and what they wake (``notes``), messaging
(``messages``), the connections (``db``) and the SQL (``sql``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ...limits import Limit
from ...records import (
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    StepRecord,
    WorkflowInfo,
)
from .._batcher import Batcher
from .._rows import (
    claims_on_creation,
)
from ..base import (
    Claim,
    Claimed,
    ControlAction,
    Finish,
    Lease,
    NewInstance,
    PatchesKnown,
    StepWrite,
    Store,
    WorkflowMeta,
)
from ..migrations import check_current, load_migrations
from .claim import Claimer
from .clock import ServerClock
from .closing import Closing, PostgresClosing
from .db import Database
from .flow import PostgresFlow
from .instances import InstanceWrites, Leased
from .keyed import KeyedCreates
from .listen import Listener
from .messages import PostgresMessages
from .migrate import applied_migrations, migrate, read_only_conninfo
from .notes import Notes, Wakeups
from .operations import PostgresOperations
from .parking import ParkingStatements
from .reads import InstanceReads
from .retention import PostgresRetention
from .schedules import PostgresSchedules, ScheduleWrites
from .slots import Slots
from .sql import Statements
from .stats import PostgresStats
from .url import describe, parse_url
from .workers import PostgresWorkers
from .workflows import WorkflowCatalog
from .writes import (
    ActivationWrites,
    Finished,
    FinishRow,
    StepRow,
    finish_row,
    not_a_connection_fault,
    step_row,
)

__all__ = ["PostgresStore"]


class PostgresStore(Store):
    """The shared store. ``url`` is
    ``postgresql://user:password@host:port/db[?schema=name][&max_connections=N]``.

    ``clock``: the time to follow as it is (a test's manual clock); by default (None) the
    server's clock, so that every machine means the same instant (see :meth:`now`).
    ``pool_size`` (tests): the main pool's size, instead of what ``max_connections`` leaves it.
    ``read_only``: every session is read-only (the server refuses writes), :meth:`open`
    migrates nothing (a schema behind this code's is a ``StoreError``) and listens to nothing.
    """

    pushes_notifications = True

    def __init__(
        self,
        url: str,
        clock: Callable[[], float] | None = None,
        *,
        pool_size: int | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__(clock)
        self.url = url
        self.read_only = read_only
        parsed = parse_url(url)
        conninfo, self.schema = parsed.conninfo, parsed.schema
        if read_only:
            conninfo = read_only_conninfo(conninfo)
        self._db = Database(
            conninfo,
            describe(conninfo, self.schema),
            pool_size=parsed.pool_size if pool_size is None else pool_size,
        )
        self._sql = Statements.for_schema(self.schema)
        self._notes = Notes(self.schema)
        self.channel = self._notes.channel
        """The LISTEN/NOTIFY channel of this schema."""
        self._listener = Listener(self._db)
        self._wakeups = Wakeups(self._notes, self.signals)
        self._time = ServerClock(self._db, clock)
        self._claims = Claimer(self._db, self._sql, self.schema, self._notes)
        self._instances = InstanceWrites(self._db, self._sql, self.schema, self._notes)
        self._reads = InstanceReads(self._db, self._sql, self.schema, self.now)
        self.retention = PostgresRetention(self._db, self.schema, self._notes, self.now)
        closing = Closing(self._db, self.schema, self._notes)
        self._instances.closing = closing.close_children
        keyed = KeyedCreates(self._db, self.schema, self._instances)
        self.closing = PostgresClosing(closing, keyed, self.now, self.signals.ready)
        self.workers = PostgresWorkers(self._db, self._sql)
        self._workflows = WorkflowCatalog(self._db, self._sql)
        schedules = ScheduleWrites(self._db, self.schema, self._instances)
        self.schedules = PostgresSchedules(schedules, self.now, self.signals.ready)
        self._writes = ActivationWrites(
            self._db, self._sql, ParkingStatements.for_schema(self.schema), self._notes
        )
        slots = Slots(self._db, self.schema, self._notes)
        self.flow = PostgresFlow(
            self._db, self._sql, slots, self._claims, self.now, self.signals.ready
        )
        self.stats = PostgresStats(self._db, self.schema)
        self._messages = PostgresMessages(
            self._db, self.schema, self._notes, self.now, self.signals
        )
        self.messages = self._messages
        self.operations = PostgresOperations(
            self._db,
            self.schema,
            self._instances,
            self.retention,
            self._notes,
            self.now,
            self.signals,
        )
        self._step_writes: Batcher[StepRow, str] = Batcher(
            self._writes.record_steps,
            key=lambda row: (row["pk"], row["name"], row["count"]),
            split=not_a_connection_fault,
        )
        self._finishes: Batcher[FinishRow, Finished] = Batcher(
            self._writes.finish, key=lambda row: row["pk"], split=not_a_connection_fault
        )

    @property
    def retry_seconds(self) -> float:
        """How long an operation retries connection faults before raising StoreError."""
        return self._db.outages.retry_seconds

    @retry_seconds.setter
    def retry_seconds(self, value: float) -> None:
        self._db.outages.retry_seconds = value

    def now(self) -> float:
        """The database server's clock (see :class:`.clock.ServerClock`: a step of this
        machine's wall clock moves no timer or lease), unless the store was given a clock."""
        return self._time.now()

    @property
    def clock_offset(self) -> float:
        """Seconds from this machine's wall clock (or the given clock) to :meth:`now`."""
        return self.now() - self._clock()

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._db.is_open:
            return
        await self._db.open()
        try:
            migrations = load_migrations("postgres")
            if self.read_only:
                applied = await applied_migrations(self._db, self.schema)
                self.schema_versions = check_current(self._db.where, applied, migrations)
                await self._time.measure()
                self._time.start()
                return
            self.schema_versions = await migrate(self._db, self.schema, migrations)
            await self._time.measure()
            await self._listener.start(
                self.channel, self._wakeups.dispatch, self._wakeups.everything
            )
        except BaseException:
            await self._listener.stop()
            await self._db.close()
            raise
        self._time.start()

    async def close(self) -> None:
        if not self._db.is_open:
            return
        for batcher in (self._step_writes, self._finishes):
            await batcher.drain()
        await self._time.stop()
        await self._listener.stop()
        await self._db.close()

    # -- workflows -------------------------------------------------------------------------------

    async def register_workflows(
        self, metas: Sequence[WorkflowMeta], limits: Sequence[Limit] = ()
    ) -> None:
        await self._workflows.register(metas, limits, self.now())

    async def list_workflows(self) -> list[WorkflowInfo]:
        return await self._workflows.list()

    # -- instances -------------------------------------------------------------------------------

    async def create_instances(
        self, workflow: str, items: Sequence[NewInstance], *, trigger: str, skip_existing: bool
    ) -> list[InstanceRecord]:
        return await self._create(workflow, items, trigger, skip_existing, None)

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
        lease = (owner, lease_seconds, limit)
        created = await self._create(workflow, items, trigger, skip_existing, lease)
        return created, claims_on_creation(created, owner)

    async def _create(
        self, workflow: str, items: Sequence[NewInstance], trigger: str, skip: bool, lease: Leased
    ) -> list[InstanceRecord]:
        """:meth:`InstanceWrites.create`, then a wake-up if any instance was left queued."""
        created = await self._instances.create(workflow, items, trigger, skip, lease, self.now())
        if any(record.status == "queued" for record in created):
            self.signals.ready()
        return created

    async def get_instance(self, workflow: str, instance_id: str) -> InstanceRecord:
        return await self._reads.get_instance(workflow, instance_id)

    async def list_instances(
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        *,
        oldest_first: bool = False,
    ) -> InstancePage:
        return await self._reads.list_instances(
            workflow, status, limit, cursor, oldest_first=oldest_first
        )

    async def get_steps(self, workflow: str, instance_id: str) -> list[StepRecord]:
        return await self._reads.get_steps(workflow, instance_id)

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
        record, woke = await self._instances.control(
            workflow, instance_id, action, rollback, from_step, self.now(), version
        )
        self.signals.changed(workflow, instance_id)
        if record.ready_at is not None or woke:
            self.signals.ready()
        return record

    async def get_events(self, workflow: str, instance_id: str) -> list[InstanceEvent]:
        return await self._reads.get_events(workflow, instance_id)

    async def send_event(
        self, workflow: str, instance_id: str, event_type: str, payload: str | None
    ) -> None:
        await self._instances.send_event(workflow, instance_id, event_type, payload, self.now())
        self.signals.ready()

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
        return await self._claims.claim(
            owner, workflows, limit, lease_seconds, now, caps, versions, patches
        )

    async def record_step(self, lease: Lease, write: StepWrite, now: float) -> str:
        if write.update is not None or write.publish is not None:
            return await self._messages.record_message_step(lease, write)
        return await self._step_writes.submit(step_row(lease, write))

    async def renew(
        self, leases: Sequence[Lease], lease_seconds: float, now: float
    ) -> dict[int, str]:
        return await self._writes.renew(leases, now + lease_seconds)

    async def finish(self, lease: Lease, finish: Finish, now: float) -> str:
        done = await self._finishes.submit(finish_row(lease, finish, now))
        self.signals.answered(done.workflow, done.instance_id, finish.steps)
        self.signals.changed(done.workflow, done.instance_id)
        if done.woke:
            self.signals.ready()
        else:
            self.signals.suspended(done.status, done.ready_at, now)
        return done.status

    async def release(self, lease: Lease, now: float) -> None:
        await self._writes.release(lease, now)
        self.signals.ready()

    async def next_wakeup(
        self,
        workflows: Sequence[str],
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> float | None:
        return await self._claims.next_wakeup(workflows, self.now(), versions, patches)
