"""The SQLite store's SQL: each statement as a constant, or a builder where a statement takes a
list of values (``IN (?, ...)``) or optional filters. Flow control's are in ``flow_sql``; a
concern object's own (``retention``, ``closing``, ``schedules``...) are in its module.

Rows the store reads by more than one column have a named type (here, or in ``store/_rows.py``
when both stores read them alike); a statement selects ``columns(RowType._fields)``.

Whether anything is due and the earliest timer are one seek per workflow in
``instances_workflow_ready`` (workflow, ready_at), named with ``INDEXED BY``: one workflow's
backlog, held back by a limit, is not read by the others' polls. The claim's read of due
instances in claim order filters on ``+workflow IN (?, ...)``: the unary
plus (SQLite's documented way to keep a term from choosing an index) leaves it to the
``instances_ready`` index (priority, ready_at), in order. Without statistics (a database never
analyzed, or one that grew since) the planner otherwise reads every instance the workflows ever
ran through ``instances_status`` (workflow, status) and sorts the due ones, for each idle poll,
claim and timer read: far slower than reading in ``ready_at`` order once it holds many. When a
limit holds some of the claim's workflows back whole, the claim reads each of the others
through ``instances_workflow_ready`` instead and merges them, so as not to walk past the held
ones' backlog.

The ready index leads with the priority (the claim's order), so the claim's read in
``ready_at`` order walks it one priority at a time: :data:`FIRST_PRIORITY` and
:data:`NEXT_PRIORITY` step through the distinct priorities of instances with a ``ready_at`` (a
loose index scan: one index seek per priority, and there are few), and each read looks at
``priority = p AND ready_at ...``.

The statements do without ``RETURNING`` where they run per row on a hot path (SQLite's
``RETURNING`` is slow per row): a claim computes the claimed rows in its SELECT, a finish reads
the parent with its fence, a create builds its records from what it inserted.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import NamedTuple

from .._rows import (
    STEP_COLUMNS,
    EventRow,
    InstanceRow,
    PendingEventRow,
    WorkerRow,
    WorkflowRow,
    columns,
)

# -- connection and transactions -------------------------------------------------------------

JOURNAL_MODE_WAL = "PRAGMA journal_mode=WAL"
SYNCHRONOUS_NORMAL = "PRAGMA synchronous=NORMAL"
SYNCHRONOUS_FULL = "PRAGMA synchronous=FULL"
OPTIMIZE = "PRAGMA optimize"
BEGIN = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
SAVEPOINT = "SAVEPOINT op"
ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO op"
RELEASE_SAVEPOINT = "RELEASE op"

# -- migrations ------------------------------------------------------------------------------

CREATE_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
)
APPLIED_MIGRATIONS = "SELECT version FROM schema_migrations"
RECORD_MIGRATION = "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"


def qmarks(n: int) -> str:
    """``?,?,...``: ``n`` parameters of an ``IN (...)``."""
    return ",".join("?" * n)


# -- workflows -------------------------------------------------------------------------------

REGISTER_WORKFLOW = (
    "INSERT INTO workflows (name, class_name, definition, limits, created_at, updated_at,"
    " retention) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
    " class_name = excluded.class_name, definition = excluded.definition,"
    " limits = excluded.limits, retention = excluded.retention,"
    " updated_at = CASE WHEN workflows.class_name IS excluded.class_name AND"
    " workflows.definition IS excluded.definition AND workflows.limits IS excluded.limits"
    " THEN workflows.updated_at ELSE excluded.updated_at END"
)
LIMITS_OF = "SELECT limits FROM workflows WHERE name = ?"
UPSERT_LIMIT = (
    "INSERT INTO limits (name, concurrency, rate_count, rate_period, updated_at)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
    " concurrency = excluded.concurrency, rate_count = excluded.rate_count,"
    " rate_period = excluded.rate_period, updated_at = excluded.updated_at"
)
LIST_WORKFLOWS = f"SELECT {columns(WorkflowRow._fields)} FROM workflows ORDER BY name"
COUNT_INSTANCES = "SELECT workflow, status, count(*) FROM instances GROUP BY workflow, status"
VERSION_COUNTS = (
    "SELECT version, status, count(*) FROM instances WHERE workflow = ? GROUP BY version, status"
)

# -- instances -------------------------------------------------------------------------------

ID_CHUNK = 500
"""Ids per ``existing_ids`` statement (SQLite limits the parameters of one)."""


def existing_ids(n: int) -> str:
    return f"SELECT id FROM instances WHERE workflow = ? AND id IN ({qmarks(n)})"


INSERT_INSTANCE = (
    "INSERT INTO instances (workflow, id, status, params, trigger, parent, ready_at,"
    " created_at, updated_at, lease_owner, lease_token, lease_expires_at, started_at, schedule,"
    " key, priority, dedup_key, traceparent, version, retention, deadline_at, parent_pk,"
    " on_parent_close, tags)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UNFINISHED = "status NOT IN ('complete', 'errored', 'terminated')"
"""Written as the dedup index's condition, so that SQLite reads that (partial) index."""


def dedup_holders(n: int) -> str:
    """The unfinished instances of a workflow holding one of ``n`` dedup keys: key, id."""
    return (
        f"SELECT dedup_key, id FROM instances WHERE workflow = ?"
        f" AND dedup_key IN ({qmarks(n)}) AND {_UNFINISHED}"
    )


DEDUP_OF_FINISHED = (
    "SELECT workflow, dedup_key FROM instances WHERE pk = ? AND dedup_key IS NOT NULL"
    " AND status IN ('complete', 'errored', 'terminated')"
)
RECORD_COLUMNS = columns(
    "CASE WHEN held_ready_at IS NULL THEN ready_at ELSE held_ready_at END"
    if name == "ready_at"
    else name
    for name in InstanceRow._fields
)
"""The ``InstanceRow`` columns as records show them: an instance set aside behind its busy key
(:func:`park_behind_keys`) shows its place in line, a time that has come, as its
``ready_at``, not its recheck time."""
INSTANCE_BY_ID = f"SELECT {RECORD_COLUMNS} FROM instances WHERE workflow = ? AND id = ?"
INSTANCE_BY_PK = f"SELECT {RECORD_COLUMNS} FROM instances WHERE pk = ?"


def list_instances(*, workflow: bool, status: bool, after: bool, oldest_first: bool) -> str:
    """A page of instances, filtered on what is True (parameters in that order, then LIMIT)."""
    clauses = []
    if workflow:
        clauses.append("workflow = ?")
    if status:
        clauses.append("status = ?")
    if after:
        clauses.append("pk > ?" if oldest_first else "pk < ?")
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    order = "ASC" if oldest_first else "DESC"
    return f"SELECT {RECORD_COLUMNS} FROM instances {where} ORDER BY pk {order} LIMIT ?"


class Lookup(NamedTuple):
    """An instance as a client's write finds it."""

    pk: int
    status: str
    lease_owner: str | None


LOOKUP = f"SELECT {columns(Lookup._fields)} FROM instances WHERE workflow = ? AND id = ?"


def control(assignments: str) -> str:
    """A control action's change (``_rows.control_assignments`` with ``?``). An instance set
    aside behind its key leaves the line: paused or ended, or runnable now if resumed."""
    return f"UPDATE instances SET {assignments}, held_ready_at = NULL WHERE pk = ?"


INTERRUPT_RUNNING_STEPS = (
    "UPDATE steps SET status = 'errored', error = ?, ended_at = ?"
    " WHERE instance_pk = ? AND status = 'running'"
)
DELETE_STEPS = "DELETE FROM steps WHERE instance_pk = ?"
UNCONSUME_EVENTS = "UPDATE events SET consumed_by = NULL WHERE instance_pk = ?"
STEP_SEQ = "SELECT seq FROM steps WHERE instance_pk = ? AND name = ? AND count = ?"
DELETE_STEPS_FROM = "DELETE FROM steps WHERE instance_pk = ? AND seq >= ? RETURNING name, count"
UNCONSUME_EVENT = "UPDATE events SET consumed_by = NULL WHERE instance_pk = ? AND consumed_by = ?"
RESTART = (
    "UPDATE instances SET status = 'queued', output = NULL, error = NULL, rollback = NULL,"
    " control = NULL, ready_at = ?, held_ready_at = NULL, lease_token = lease_token + 1,"
    " lease_owner = NULL,"
    " lease_expires_at = NULL, started_at = NULL, ended_at = NULL, updated_at = ?,"
    " version = COALESCE(?, version), patches = (SELECT json_group_array(id) FROM"
    " (SELECT substr(name, 7) AS id FROM steps WHERE instance_pk = instances.pk"
    " AND kind = 'patch' ORDER BY 1) HAVING count(*) > 0) WHERE pk = ?"
)
INSERT_EVENT = "INSERT INTO events (instance_pk, type, payload, created_at) VALUES (?, ?, ?, ?)"
# An event, or a child's end, bumps ``event_seq`` so that a running activation does not sleep.
EVENT_SENT = (
    "UPDATE instances SET event_seq = event_seq + 1, ready_at = CASE"
    " WHEN status = 'waiting' THEN ? ELSE ready_at END WHERE pk = ?"
)
WAKE_PARENT = (
    "UPDATE instances SET event_seq = event_seq + 1, ready_at = CASE"
    " WHEN status = 'waiting' THEN ? ELSE ready_at END WHERE workflow = ? AND id = ?"
)
EVENTS_OF = (
    f"SELECT {columns(EventRow._fields)} FROM events WHERE instance_pk = ?"
    " AND type <> '@update' ORDER BY pk"
)
STEPS_OF = f"SELECT {STEP_COLUMNS} FROM steps WHERE instance_pk = ? ORDER BY seq"


# -- activations -----------------------------------------------------------------------------


FIRST_PRIORITY = "SELECT min(priority) FROM instances WHERE ready_at IS NOT NULL"
NEXT_PRIORITY = "SELECT min(priority) FROM instances WHERE ready_at IS NOT NULL AND priority > ?"


def _each_workflow(n_workflows: int, first: int) -> str:
    """The workflows as rows ``w(column1)``, from parameter number ``first`` on."""
    return "(VALUES " + ",".join(f"(?{first + i})" for i in range(n_workflows)) + ") w"


RouteShape = tuple[int | None, int | None]
"""How many routes and patches a claim's :class:`~stepline.store.types.Routing` has."""


def _routed(shape: RouteShape | None, first: int) -> str:
    """The condition that an instance's (workflow, version) is one of the routes and each patch
    it recorded one of the patches (``store.types.Routing``, of ``shape``), from parameter
    number ``first`` on; none for None (every version, every patch). A filter on the rows an
    index read finds: no read of its own (an instance without patches, nearly all, stops at
    ``patches IS NULL``)."""
    number = itertools.count(first)
    return _routed_in(shape, lambda n: [f"?{next(number)}" for _ in range(n)])


def _routed_in(shape: RouteShape | None, marks: Callable[[int], list[str]]) -> str:
    """:func:`_routed` taking its parameters' ``marks``, the routes' then the patches'."""
    if shape is None:
        return ""
    n_routes, n_patches = shape
    text = ""
    if n_routes is not None:
        text += f" AND workflow || char(31) || version IN ({', '.join(marks(n_routes))})"
    if n_patches is not None:
        text += (
            " AND (patches IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(patches) WHERE"
            f" workflow || char(31) || version || char(31) || value"
            f" NOT IN ({', '.join(marks(n_patches))})))"
        )
    return text


@functools.lru_cache(maxsize=256)
def any_due(n_workflows: int, routed: RouteShape | None = None) -> str:
    """Whether anything is due: a read first, so an idle poll takes no write lock. One seek per
    workflow (``instances_workflow_ready``). Parameters: now, the workflows, the routing's."""
    return (
        f"SELECT 1 FROM {_each_workflow(n_workflows, 2)} WHERE EXISTS (SELECT 1 FROM instances"
        " INDEXED BY instances_workflow_ready WHERE workflow = w.column1 AND ready_at <= ?1"
        f"{_routed(routed, 2 + n_workflows)}) LIMIT 1"
    )


# Built once per shape: under key limits a claim leaves out up to hundreds of (workflow, key)
# pairs, and building that text at every claim cost more than running it.
@functools.lru_cache(maxsize=1024)
def claim_due(
    n_workflows: int,
    *,
    excluding: int,
    after: bool,
    each: bool = False,
    parking: bool = False,
    resuming: int = 0,
    routing: RouteShape | None = None,
) -> str:
    """The due instances of one priority as claimed, in claim order (``InstanceRow`` columns
    after :func:`take_leases`), then their new lease token, ``control`` and ``event_seq``, then
    their ``ready_at``, whether a claim would be their first start and whether they are
    queued (may be set aside behind a busy key). Parameters: now
    (updated_at), now (started_at if unset), the lease expiry (ready_at), the owner, the lease
    token, the priority, now (due), the workflows, the routing's parameters (:func:`_routed`
    of shape ``routing``; None: every version and patch), then the ``excluding`` full keys
    (workflow, key) whose instances the read leaves out (:func:`_excluding`), then ``ready_at``
    and ``pk`` to read after if ``after``, then the limit. A ``waitingForPause`` row keeps its
    status (a claim pauses it instead).

    ``each``: read each workflow through ``instances_workflow_ready`` and merge, instead of
    walking the ready index in claim order; for a claim some of whose workflows a limit holds
    back, whose due instances would otherwise be walked past at every claim. ``parking``: the
    claim sets queued instances of full keys aside, so the exclusion of full keys leaves those
    in the read. ``resuming`` (with ``each``): of the last that many workflows, whose rate is
    used up, only the instances that started before are read (``instances_workflow_started``),
    not their first starts: those wait for the rate, and would be walked by every read.

    A read ``after`` a row is two ranges, each an index seek: the rest of that row's
    ``ready_at`` by pk, then the later ones. SQLite seeks a ``(ready_at, pk) > (?, ?)`` bound
    on ``ready_at`` alone (pk is the rowid), so every page would walk again the instances of
    that ``ready_at`` read before: a batch created together shares one."""
    number = itertools.count(1)

    def marks(n: int) -> list[str]:
        return [f"?{next(number)}" for _ in range(n)]

    now, started, expiry, owner, token, priority, due = marks(7)
    workflows = marks(n_workflows)
    routed = _routed_in(routing, marks)
    skip = f" AND {_excluding(excluding, marks, parking)}" if excluding else ""
    ranges = [f" AND ready_at <= {due}"]
    if after:
        ready, pk = marks(2)
        ranges = [f" AND ready_at = {ready} AND pk > {pk}", f" AND ready_at > {ready}{ranges[0]}"]
    (limit,) = marks(1)
    select = (
        "SELECT pk, workflow, id, CASE WHEN status IN ('queued', 'waiting') THEN 'running'"
        f" ELSE status END, params, output, error, rollback, trigger, created_at, {now},"
        f" COALESCE(started_at, {started}), ended_at, {expiry}, {owner}, parent, schedule, key,"
        f" priority, dedup_key, traceparent, version, delete_at, deadline_at, patches, {token},"
        " control,"
        " event_seq, ready_at, started_at IS NULL, status = 'queued' FROM instances"
    )
    order = f" ORDER BY ready_at, pk LIMIT {limit}"
    sources = (
        [
            f" INDEXED BY instances_workflow_ready WHERE workflow = {w}"
            if n < len(workflows) - resuming
            else f" INDEXED BY instances_workflow_started WHERE workflow = {w}"
            " AND started_at IS NOT NULL AND ready_at IS NOT NULL"
            for n, w in enumerate(workflows)
        ]
        if each
        else [f" WHERE +workflow IN ({', '.join(workflows)})"]
    )
    arms = [
        f"{select}{source} AND priority = {priority}{span}{routed}{skip}{order}"
        for source in sources
        for span in ranges
    ]
    if len(arms) == 1:
        return arms[0]
    return " UNION ALL ".join(f"SELECT * FROM ({arm})" for arm in arms) + order


def _excluding(n_keys: int, marks: Callable[[int], list[str]], parking: bool = False) -> str:
    """What the limits hold back, for a claim to skip in its read: instances of ``n_keys``
    (workflow, key) pairs (a workflow none of whose instances may run is left out of the read's
    workflows, and one whose rate is used up is read ``resuming``). A pause pending is never
    skipped, nor with ``parking`` a queued instance of a full key (the claim sets it aside).
    ``marks(n)``: the next ``n`` parameters."""
    pairs = ",".join("({}, {})".format(*marks(2)) for _ in range(n_keys))
    queued = " AND status <> 'queued'" if parking else ""
    return (
        f"(status = 'waitingForPause' OR NOT (key IS NOT NULL{queued}"
        f" AND (workflow, key) IN (VALUES {pairs})))"
    )


def pauses_due(n_workflows: int) -> str:
    """The pauses pending whose lease has expired: a claim carries them out, whatever the
    limits (read through ``instances_status``, not in claim order: the ready index would walk
    the whole backlog of due instances to find none)."""
    return (
        "SELECT pk FROM instances INDEXED BY instances_status"
        f" WHERE workflow IN ({qmarks(n_workflows)}) AND status = 'waitingForPause'"
        " AND ready_at <= ?"
    )


# Its worker died while a pause was pending: the pause takes effect now.
PAUSE_UNCLAIMED = (
    "UPDATE instances SET status = 'paused', ready_at = NULL, lease_owner = NULL,"
    " lease_expires_at = NULL, updated_at = ? WHERE pk = ?"
)


def take_leases(n: int) -> str:
    """Lease ``n`` instances: owner, token, expiry (lease and ready_at), now (updated, started),
    pks."""
    return (
        "UPDATE instances SET lease_owner = ?, lease_token = ?,"
        " lease_expires_at = ?, ready_at = ?, updated_at = ?, parked_on = NULL,"
        " held_ready_at = NULL,"
        " status = CASE WHEN status IN ('queued', 'waiting') THEN 'running' ELSE status END,"
        f" started_at = COALESCE(started_at, ?) WHERE pk IN ({qmarks(n)})"
    )


@functools.lru_cache(maxsize=64)
def lease_woken(routing: RouteShape | None) -> str:
    """Lease an instance an update has just woken if it can run at once, as a claim would
    (``MessageStore.send_update_and_claim``); the row as ``_rows.claim_from_row`` reads it.
    Parameters: owner, token, expiry (lease and ready_at), now, pk, the routing's."""
    return (
        "UPDATE instances SET lease_owner = ?1, lease_token = ?2, lease_expires_at = ?3,"
        " ready_at = ?3, updated_at = ?4, parked_on = NULL, held_ready_at = NULL,"
        " status = 'running', started_at = COALESCE(started_at, ?4)"
        " WHERE pk = ?5 AND status IN ('queued', 'waiting') AND ready_at <= ?4"
        " AND (lease_owner IS NULL OR lease_expires_at <= ?4) AND control IS NULL"
        f" AND (deadline_at IS NULL OR deadline_at > ?4){_routed(routing, 6)}"
        f" RETURNING {columns(InstanceRow._fields)}, lease_token, control, event_seq"
    )


def history_steps(n: int) -> str:
    """The steps of ``n`` instances: ``instance_pk`` and the ``STEP_COLUMNS``."""
    return (
        f"SELECT instance_pk, {STEP_COLUMNS} FROM steps"
        f" WHERE instance_pk IN ({qmarks(n)}) ORDER BY instance_pk, seq"
    )


def pending_events(n: int) -> str:
    """The unconsumed events of ``n`` instances, as ``PendingEventRow``."""
    return (
        f"SELECT {columns(PendingEventRow._fields)} FROM events"
        f" WHERE instance_pk IN ({qmarks(n)}) AND consumed_by IS NULL ORDER BY instance_pk, pk"
    )


class Fence(NamedTuple):
    """The instance an activation's write is fenced on, as its finish reads it."""

    status: str
    event_seq: int
    workflow: str
    id: str
    parent: str | None
    key: str | None


HELD = "WHERE pk = ? AND lease_token = ? AND lease_owner = ?"
FENCE = f"SELECT {columns(Fence._fields)} FROM instances {HELD}"
FENCE_STATUS = f"SELECT status FROM instances {HELD}"
UPSERT_STEP = (
    f"INSERT OR REPLACE INTO steps ({STEP_COLUMNS}, instance_pk)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
CONSUME_EVENT = "UPDATE events SET consumed_by = ? WHERE pk = ?"
# A patch marker's id joins the instance's patches (a sorted JSON array; the claim routes on it).
ADD_PATCH = (
    "UPDATE instances SET patches = (SELECT json_group_array(value) FROM (SELECT value FROM"
    " json_each(COALESCE(patches, '[]')) UNION SELECT ?1 ORDER BY 1)) WHERE pk = ?2"
)
RENEW = f"UPDATE instances SET lease_expires_at = ?, ready_at = ? {HELD} RETURNING status"
SUSPEND = (
    "UPDATE instances SET status = ?, ready_at = ?, lease_owner = NULL,"
    " lease_expires_at = NULL, updated_at = ?, parked_on = ? WHERE pk = ?"
)
END = (
    "UPDATE instances SET status = ?, output = ?, error = ?, rollback = ?, ready_at = NULL,"
    " lease_owner = NULL, lease_expires_at = NULL, control = NULL, ended_at = ?, updated_at = ?"
    " WHERE pk = ?"
)
RELEASE = (
    "UPDATE instances SET lease_owner = NULL, lease_expires_at = NULL, ready_at = ?,"
    " status = CASE WHEN status = 'waitingForPause' THEN 'paused'"
    " WHEN status = 'running' THEN 'queued' ELSE status END"
    f" {HELD}"
)
UNREADY_PAUSED = "UPDATE instances SET ready_at = NULL WHERE pk = ? AND status = 'paused'"


@functools.lru_cache(maxsize=256)
def next_wakeup(n_workflows: int, *, after: bool = False, routing: RouteShape | None = None) -> str:
    """The earliest ``ready_at`` of the workflows, one seek per workflow (after a time if
    ``after``: parameters the time, then the workflows, then the routing's)."""
    since = "ready_at > ?1" if after else "ready_at IS NOT NULL"
    first = 2 if after else 1
    return (
        "SELECT min((SELECT min(ready_at) FROM instances INDEXED BY instances_workflow_ready"
        f" WHERE workflow = w.column1 AND {since}{_routed(routing, first + n_workflows)}))"
        f" FROM {_each_workflow(n_workflows, first)}"
    )


# -- worker liveness -------------------------------------------------------------------------

EXPIRE_WORKERS = "DELETE FROM workers WHERE id <> ? AND last_seen + heartbeat * ? < ?"
UPSERT_WORKER = (
    "INSERT OR REPLACE INTO workers (id, host, pid, started_at, last_seen, heartbeat,"
    " workflows, concurrency, running, versions, patches)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
LIST_WORKERS = f"SELECT {columns(WorkerRow._fields)} FROM workers ORDER BY started_at, id"
FORGET_WORKER = "DELETE FROM workers WHERE id = ?"
