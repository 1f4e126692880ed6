"""The PostgreSQL store's SQL, in one place.

Templates name the schema ``{s}`` and the shared column lists ``{icols}`` (instances) and
``{scols}`` (steps); :meth:`Statements.for_schema` renders them once per store with the schema
quoted by :mod:`psycopg.sql`. Lock protocol (docs/architecture.md, "The PostgreSQL store"):
activation writes take ``FOR KEY SHARE`` on their instance row, client control actions take
``FOR UPDATE``, and statements that lock several instance rows lock them in ``pk`` order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import orjson
from psycopg import sql

from .._rows import STEP_COLUMNS, InstanceRow
from .step_sql import ANSWERS_JOIN, ANSWERS_NOTE, STEP_TEMPLATES, STEP_UPSERT, merged_patches

INSTANCE_COLUMNS = ", ".join(
    "COALESCE(held_ready_at, ready_at) AS ready_at" if name == "ready_at" else name
    for name in InstanceRow._fields
)
"""The ``InstanceRow`` columns as records show them: an instance set aside behind its busy key
(``parking``'s ``park``, which clears its ``ready_at``) shows its place in line, a time that has
come, as its ``ready_at``."""

_TEMPLATES: dict[str, str] = {
    # -- workflows -------------------------------------------------------------------------------
    # The named limits and the workflows (with their limits) in one statement; a row's
    # updated_at moves only when something of it changed. A workflow whose limits changed gets
    # back every instance set aside behind a busy key: the key limit may have been raised (due
    # from ``margin`` before now at the earliest, as ``parking`` brings them back).
    "register_workflows": """
        WITH unparked AS (
            UPDATE {s}.instances i
            SET ready_at = GREATEST(held_ready_at, %(now)s::float8 - %(margin)s::float8),
                held_ready_at = NULL
            FROM {s}.workflows w JOIN unnest(%(names)s::text[], %(limits)s::text[]) AS t(n, l)
                ON w.name = t.n AND w.limits IS DISTINCT FROM t.l
            WHERE i.workflow = w.name AND i.held_ready_at IS NOT NULL
        ), named AS (
            INSERT INTO {s}.limits AS l (name, concurrency, rate_count, rate_period, updated_at)
            SELECT n, c, rc, rp, %(now)s FROM unnest(%(limit_names)s::text[],
                %(limit_concurrency)s::int[], %(rate_counts)s::int[],
                %(rate_periods)s::float8[]) AS t(n, c, rc, rp)
            ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
                rate_count = excluded.rate_count, rate_period = excluded.rate_period,
                updated_at = CASE WHEN (l.concurrency, l.rate_count, l.rate_period)
                    IS NOT DISTINCT FROM (excluded.concurrency, excluded.rate_count,
                        excluded.rate_period)
                    THEN l.updated_at ELSE excluded.updated_at END
        )
        INSERT INTO {s}.workflows AS w (name, class_name, definition, limits, created_at,
            updated_at, retention)
        SELECT n, c, d, l, %(now)s, %(now)s, r FROM unnest(%(names)s::text[],
            %(classes)s::text[], %(definitions)s::text[], %(limits)s::text[],
            %(retentions)s::text[]) AS t(n, c, d, l, r)
        ON CONFLICT (name) DO UPDATE SET class_name = excluded.class_name,
            definition = excluded.definition, limits = excluded.limits,
            retention = excluded.retention,
            updated_at = CASE WHEN w.class_name IS NOT DISTINCT FROM excluded.class_name
                AND w.definition IS NOT DISTINCT FROM excluded.definition
                AND w.limits IS NOT DISTINCT FROM excluded.limits
                THEN w.updated_at ELSE excluded.updated_at END
    """,
    "list_workflows": """
        SELECT name, class_name, created_at, updated_at, definition, limits, retention
        FROM {s}.workflows ORDER BY name
    """,
    "count_instances": """
        SELECT workflow, status, count(*) FROM {s}.instances GROUP BY workflow, status
    """,
    # -- instances -------------------------------------------------------------------------------
    # Workers are told only of instances left queued, not of those leased on creation. A row
    # that would repeat an id, or the dedup key of an unfinished instance (instances_dedup), is
    # skipped: the caller tells which from what came back.
    "create_instances": """
        WITH created AS (
            INSERT INTO {s}.instances (workflow, id, status, params, trigger, parent, ready_at,
                created_at, updated_at, lease_owner, lease_token, lease_expires_at, started_at,
                schedule, key, priority, dedup_key, traceparent, version, retention, deadline_at,
                parent_pk, on_parent_close, tags)
            SELECT %(workflow)s, t.id, CASE WHEN t.leased THEN 'running' ELSE 'queued' END,
                t.params, %(trigger)s, t.parent,
                CASE WHEN t.leased THEN %(expires)s::float8 ELSE %(now)s END, %(now)s, %(now)s,
                CASE WHEN t.leased THEN %(owner)s::text END, CASE WHEN t.leased THEN 1 ELSE 0 END,
                CASE WHEN t.leased THEN %(expires)s::float8 END,
                CASE WHEN t.leased THEN %(now)s::float8 END, t.schedule, t.key, t.priority,
                t.dedup_key, t.traceparent, t.version, t.retention, t.deadline_at, t.parent_pk,
                t.on_parent_close, t.tags
            FROM (SELECT r.*, r.ord < %(leased)s AS leased
                  FROM json_to_recordset(%(items)s::json) AS r(ord int, id text, params text,
                      parent text, schedule text, key text, priority int, dedup_key text,
                      traceparent text, version text, retention text, deadline_at float8,
                      parent_pk bigint, on_parent_close text, tags text)) AS t
            ORDER BY t.ord
            ON CONFLICT DO NOTHING
            RETURNING {icols}
        )
        SELECT *, CASE WHEN EXISTS (SELECT 1 FROM created WHERE status = 'queued')
            THEN (SELECT 1 FROM pg_notify(%(channel)s, %(note)s)) END
        FROM created
    """,
    "existing_ids": "SELECT id FROM {s}.instances WHERE workflow = %s AND id = ANY(%s::text[])",
    "dedup_holders": """
        SELECT dedup_key, id FROM {s}.instances
        WHERE workflow = %s AND dedup_key = ANY(%s::text[])
            AND status NOT IN ('complete', 'errored', 'terminated')
    """,
    "get_instance": "SELECT {icols} FROM {s}.instances WHERE workflow = %s AND id = %s",
    "get_instance_by_pk": "SELECT {icols} FROM {s}.instances WHERE pk = %s",
    # Each instance's steps through the primary key, one lookup per instance: with `instance_pk =
    # ANY(...)` a planner without statistics (a table that grew since its last ANALYZE) chose to
    # scan the whole table, however few instances were asked for.
    "history_steps": """
        SELECT p.pk, s.* FROM unnest(%s::bigint[]) AS p(pk)
        CROSS JOIN LATERAL (
            SELECT {scols} FROM {s}.steps WHERE instance_pk = p.pk ORDER BY seq
        ) AS s
        ORDER BY p.pk, s.seq
    """,
    "history_events": """
        SELECT instance_pk, pk, type, payload, created_at FROM {s}.events
        WHERE instance_pk = ANY(%s::bigint[]) AND consumed_by IS NULL ORDER BY instance_pk, pk
    """,
    "steps_of_instance": """
        SELECT {scols} FROM {s}.steps WHERE instance_pk =
            (SELECT pk FROM {s}.instances WHERE workflow = %s AND id = %s)
        ORDER BY seq
    """,
    "lock_instance": """
        SELECT pk, status, lease_owner FROM {s}.instances WHERE workflow = %s AND id = %s
        FOR UPDATE
    """,
    # Restarting a finished instance takes its dedup key back: the unfinished instance that holds
    # it meanwhile, if any.
    "dedup_holder_of": """
        SELECT o.dedup_key, o.id FROM {s}.instances i JOIN {s}.instances o
            ON o.workflow = i.workflow AND o.dedup_key = i.dedup_key AND o.pk <> i.pk
            AND o.status NOT IN ('complete', 'errored', 'terminated')
        WHERE i.pk = %s AND i.status IN ('complete', 'errored', 'terminated')
    """,
    "delete_steps": "DELETE FROM {s}.steps WHERE instance_pk = %s",
    "unconsume_all": "UPDATE {s}.events SET consumed_by = NULL WHERE instance_pk = %s",
    "step_seq": "SELECT seq FROM {s}.steps WHERE instance_pk = %s AND name = %s AND count = %s",
    "delete_steps_from": """
        DELETE FROM {s}.steps WHERE instance_pk = %s AND seq >= %s RETURNING name, count
    """,
    "unconsume": """
        UPDATE {s}.events SET consumed_by = NULL
        WHERE instance_pk = %s AND consumed_by = ANY(%s::text[])
    """,
    "interrupt_running_steps": """
        UPDATE {s}.steps SET status = 'errored', error = %(error)s, ended_at = %(now)s
        WHERE instance_pk = %(pk)s AND status = 'running'
    """,
    "restart": """
        UPDATE {s}.instances SET status = 'queued', output = NULL, error = NULL, rollback = NULL,
            control = NULL, ready_at = %(now)s, held_ready_at = NULL,
            lease_token = lease_token + 1, lease_owner = NULL,
            lease_expires_at = NULL, started_at = NULL, ended_at = NULL, updated_at = %(now)s,
            version = COALESCE(%(version)s::text, version), patches = (
                SELECT json_agg(substr(name, 7) ORDER BY substr(name, 7))::text
                FROM {s}.steps WHERE instance_pk = %(pk)s AND kind = 'patch')
        WHERE pk = %(pk)s
    """,
    "send_event": """
        WITH e AS (
            INSERT INTO {s}.events (instance_pk, type, payload, created_at)
            VALUES (%(pk)s, %(type)s, %(payload)s, %(now)s)
        ), u AS (
            UPDATE {s}.instances SET event_seq = event_seq + 1,
                ready_at = CASE WHEN status = 'waiting' THEN %(now)s ELSE ready_at END
            WHERE pk = %(pk)s
        )
        SELECT pg_notify(%(channel)s, %(note)s)
    """,
    "notify": "SELECT pg_notify(%s, %s)",
    "events_of_instance": """
        SELECT type, payload, created_at, consumed_by FROM {s}.events WHERE instance_pk =
            (SELECT pk FROM {s}.instances WHERE workflow = %s AND id = %s)
            AND type <> '@update'
        ORDER BY pk
    """,
    # -- activations (the claim's statements are in claim_sql) ----------------------------------
    **STEP_TEMPLATES,
    "renew": """
        WITH l AS (
            SELECT * FROM json_to_recordset(%(leases)s::json) AS l(pk bigint, token bigint,
                owner text)
        ), held AS (
            SELECT i.pk AS h_pk FROM {s}.instances i
            JOIN l ON i.pk = l.pk AND i.lease_token = l.token AND i.lease_owner = l.owner
            WHERE i.pk = ANY(ARRAY(SELECT pk FROM l))
            ORDER BY i.pk FOR NO KEY UPDATE OF i
        )
        UPDATE {s}.instances SET lease_expires_at = %(expires)s, ready_at = %(expires)s
        FROM held WHERE pk = h_pk AND pk = ANY(ARRAY(SELECT h_pk FROM held))
        RETURNING pk, status
    """,
    # The activations' last step records (Finish.steps) are written first, in the same statement.
    # The instances it ends are announced a few dozen per notification ("ended"), not one each:
    # every listener receives and parses every notification. An entry ``["w", "i"], `` takes
    # len(w) + len(i) + 10 bytes (names and ids are ASCII, at most 100 characters), so a chunk
    # of under 7,000 bytes of entries plus one more and the ~50 bytes around them stays under
    # the 8,000-byte payload limit. What the instances that stopped running free (their key's
    # next in line, steps parked on the named limits their workflows list) is freed after it,
    # by ``parking``'s ``freed_released``: for the rows whose instance has a key or a workflow
    # that lists named limits (the statement's sixth column). A record that ends an update's
    # handler records its reply (``answered``), announced to the instance's waiters.
    "finish": """
        WITH f AS (
            SELECT * FROM json_to_recordset(%(rows)s::json) AS f(idx int, pk bigint,
                token bigint, owner text, status text, output text, error text, rollback text,
                wake_at float8, event_seq bigint, fnow float8, parked_on text, patches text)
        ), held AS (
            SELECT f.idx AS h_idx, i.parent AS h_parent FROM {s}.instances i
            JOIN f ON i.pk = f.pk AND i.lease_token = f.token AND i.lease_owner = f.owner
            WHERE i.pk = ANY(ARRAY(SELECT pk FROM f))
            ORDER BY i.pk FOR NO KEY UPDATE OF i
        ), last_steps AS (
            INSERT INTO {s}.steps (instance_pk, name, count, seq, kind, status, output, error,
                attempts, wake_at, started_at, ended_at, info)
            SELECT w.pk, w.name, w.count, w.seq, w.kind, w.status, w.output, w.error,
                w.attempts, w.wake_at, w.started_at, w.ended_at, w.info
            FROM json_to_recordset(%(steps)s::json) AS w(idx int, pk bigint, name text,
                count int, seq int, kind text, status text, output text, error text,
                attempts text, wake_at float8, started_at float8, ended_at float8, info text)
            JOIN held ON h_idx = w.idx
    """
    + STEP_UPSERT
    + """
        ), answered AS (
            UPDATE {s}.updates a SET status = w.status,
                reply = CASE WHEN w.status = 'complete' THEN w.output END, error = w.error,
                ended_at = w.ended_at
            FROM json_to_recordset(%(steps)s::json) AS w(idx int, pk bigint, upd text,
                status text, output text, error text, ended_at float8)
            JOIN held ON h_idx = w.idx
            WHERE w.upd IS NOT NULL AND a.instance_pk = w.pk AND a.update_id = w.upd
                AND a.status IN ('pending', 'running')
            RETURNING a.instance_pk, a.update_id, a.status, a.reply, a.error
        ), answered_note AS (
            SELECT pg_notify(%(channel)s, """
    + ANSWERS_NOTE
    + """)
            FROM {s}.instances i"""
    + ANSWERS_JOIN.replace("{answers}", "answered a WHERE a.instance_pk = i.pk")
    + """
            WHERE i.pk IN (SELECT DISTINCT instance_pk FROM answered)
        ), kids AS (
            SELECT h_parent::json ->> 'workflow' AS k_workflow, h_parent::json ->> 'id' AS k_id,
                f.fnow AS k_now
            FROM f JOIN held ON h_idx = f.idx
            WHERE f.status <> 'waiting' AND h_parent IS NOT NULL
        ), u AS (
            UPDATE {s}.instances i SET
                status = CASE WHEN f.status <> 'waiting' THEN f.status
                    WHEN i.status = 'waitingForPause' THEN 'paused' ELSE 'waiting' END,
                ready_at = CASE WHEN f.status <> 'waiting' OR i.status = 'waitingForPause'
                    THEN NULL WHEN i.event_seq <> f.event_seq OR EXISTS (SELECT 1 FROM kids
                        WHERE k_workflow = i.workflow AND k_id = i.id) THEN f.fnow
                    ELSE f.wake_at END,
                output = CASE WHEN f.status = 'waiting' THEN i.output ELSE f.output END,
                error = CASE WHEN f.status = 'waiting' THEN i.error ELSE f.error END,
                rollback = CASE WHEN f.status = 'waiting' THEN i.rollback ELSE f.rollback END,
                control = CASE WHEN f.status = 'waiting' THEN i.control END,
                ended_at = CASE WHEN f.status = 'waiting' THEN i.ended_at ELSE f.fnow END,
                lease_owner = NULL, lease_expires_at = NULL, updated_at = f.fnow,
                parked_on = f.parked_on, patches = CASE WHEN f.patches IS NULL THEN i.patches
                    ELSE """
    + merged_patches("i.patches", "SELECT json_array_elements_text(f.patches::json)")
    + """ END
            FROM f JOIN held ON h_idx = f.idx
            WHERE i.pk = f.pk AND i.pk = ANY(ARRAY(SELECT pk FROM f))
            RETURNING f.idx, i.status, i.workflow, i.id, i.parent, i.key, i.ready_at
        ), woke AS (
            UPDATE {s}.instances p SET event_seq = p.event_seq + 1,
                ready_at = CASE WHEN p.status = 'waiting' THEN k.k_now ELSE p.ready_at END
            FROM (SELECT DISTINCT ON (k_workflow, k_id) * FROM kids) k
            WHERE p.workflow = k.k_workflow AND p.id = k.k_id
                AND NOT EXISTS (SELECT 1 FROM f JOIN held ON h_idx = f.idx WHERE f.pk = p.pk)
        ), ended AS (
            SELECT workflow, id, parent IS NULL AS top,
                sum(length(workflow) + length(id) + 10) OVER (ROWS UNBOUNDED PRECEDING) AS upto
            FROM u WHERE status IN ('complete', 'errored', 'terminated')
        ), notes AS (
            SELECT pg_notify(%(channel)s, json_build_object('s', %(source)s::text,
                'ended', json_agg(json_build_array(workflow, id)), 'e', bool_and(top))::text)
            FROM ended GROUP BY upto / 7000
        )
        SELECT idx, status, workflow, id,
            parent IS NOT NULL AND status IN ('complete', 'errored', 'terminated'),
            key IS NOT NULL OR EXISTS (SELECT 1 FROM {s}.workflows w WHERE w.name = u.workflow
                AND w.limits IS NOT NULL AND w.limits::jsonb -> 'limits' <> '[]'::jsonb),
            (SELECT count(*) FROM notes), (SELECT count(*) FROM answered_note), ready_at
        FROM u
    """,
    "wake_parent_of": """
        UPDATE {s}.instances p SET event_seq = p.event_seq + 1,
            ready_at = CASE WHEN p.status = 'waiting' THEN %(now)s ELSE p.ready_at END
        FROM {s}.instances c
        WHERE c.pk = %(pk)s AND c.parent IS NOT NULL
            AND p.workflow = c.parent::json ->> 'workflow' AND p.id = c.parent::json ->> 'id'
        RETURNING p.pk
    """,
    "finished_by": """
        WITH f AS (SELECT * FROM json_to_recordset(%s::json) AS f(idx int, pk bigint, token bigint))
        SELECT f.idx, i.status, i.workflow, i.id, i.parent IS NOT NULL, NULL, NULL, NULL,
            i.ready_at
        FROM {s}.instances i
        JOIN f ON i.pk = f.pk AND i.lease_token = f.token AND i.lease_owner IS NULL
        WHERE i.pk = ANY(ARRAY(SELECT pk FROM f))
    """,
    "release": """
        WITH u AS (
            UPDATE {s}.instances SET lease_owner = NULL, lease_expires_at = NULL,
                ready_at = CASE WHEN status = 'waitingForPause' THEN NULL ELSE %(now)s END,
                status = CASE WHEN status = 'waitingForPause' THEN 'paused'
                    WHEN status = 'running' THEN 'queued' ELSE status END
            WHERE pk = %(pk)s AND lease_token = %(token)s AND lease_owner = %(owner)s
            RETURNING ready_at
        )
        SELECT (SELECT 1 FROM pg_notify(%(channel)s, %(note)s)) FROM u WHERE ready_at IS NOT NULL
    """,
    # -- worker liveness -------------------------------------------------------------------------
    "heartbeat": """
        WITH expired AS (
            DELETE FROM {s}.workers
            WHERE id <> %(id)s AND last_seen + heartbeat * %(expire_beats)s < %(now)s
        )
        INSERT INTO {s}.workers (id, host, pid, started_at, last_seen, heartbeat, workflows,
            concurrency, running, versions, patches)
        VALUES (%(id)s, %(host)s, %(pid)s, %(started_at)s, %(now)s, %(heartbeat)s,
            %(workflows)s, %(concurrency)s, %(running)s, %(versions)s, %(patches)s)
        ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
            started_at = excluded.started_at, last_seen = excluded.last_seen,
            heartbeat = excluded.heartbeat, workflows = excluded.workflows,
            concurrency = excluded.concurrency, running = excluded.running,
            versions = excluded.versions, patches = excluded.patches
    """,
    "running_by_worker": """
        SELECT lease_owner, workflow, count(*) FROM {s}.instances
        WHERE workflow = ANY(%(workflows)s::text[]) AND status IN ('running', 'waitingForPause')
            AND lease_expires_at > %(now)s
        GROUP BY lease_owner, workflow
    """,
    "list_workers": """
        SELECT id, host, pid, started_at, last_seen, heartbeat, workflows, concurrency, running,
            versions, patches
        FROM {s}.workers ORDER BY started_at, id
    """,
    "forget_worker": "DELETE FROM {s}.workers WHERE id = %s",
}


@dataclass(frozen=True)
class Statements:
    """Every statement of the PostgreSQL store, rendered for one schema."""

    register_workflows: str
    list_workflows: str
    count_instances: str
    create_instances: str
    existing_ids: str
    dedup_holders: str
    get_instance: str
    get_instance_by_pk: str
    history_steps: str
    history_events: str
    steps_of_instance: str
    lock_instance: str
    dedup_holder_of: str
    delete_steps: str
    unconsume_all: str
    step_seq: str
    delete_steps_from: str
    unconsume: str
    interrupt_running_steps: str
    restart: str
    send_event: str
    notify: str
    events_of_instance: str
    record_step: str
    record_step_new: str
    record_step_consuming: str
    record_steps: str
    record_steps_consuming: str
    record_steps_patching: str
    record_step_patch: str
    renew: str
    finish: str
    wake_parent_of: str
    finished_by: str
    release: str
    heartbeat: str
    running_by_worker: str
    list_workers: str
    forget_worker: str

    @classmethod
    def for_schema(cls, schema: str) -> Statements:
        names = {f.name for f in fields(cls)}
        if names != set(_TEMPLATES):
            raise RuntimeError(f"statement templates out of sync: {names ^ set(_TEMPLATES)}")
        return cls(**render(_TEMPLATES, schema))


def render(templates: Mapping[str, str], schema: str) -> dict[str, str]:
    """The ``templates`` with the schema and the shared column lists filled in."""
    parts = {
        "s": sql.Identifier(schema),
        "icols": sql.SQL(INSTANCE_COLUMNS),
        "scols": sql.SQL(STEP_COLUMNS),
    }
    return {
        name: " ".join(sql.SQL(text).format(**parts).as_string().split())
        for name, text in templates.items()
    }


# -- statements without the schema, and statements built per call ---------------------------------

CLAIM_IN_ORDER = "SET LOCAL enable_bitmapscan = off"
"""Keeps the claim reading the ``ready_at`` index in order and stopping at its limit.

With statistics that lag behind the instances table (never analyzed, or a fleet that grew faster
than autovacuum's next ANALYZE), the planner expects a handful of runnable rows and plans the
claim as a bitmap scan of every due row, sorted: harmless while few rows are due, but while a
worker works off a backlog each claim then reads and sorts the whole backlog, much slower than
reading the index in order, and the backlog grows."""

NO_JIT = "SET LOCAL jit = off"
"""Keeps the claim's statements (and the reads under limits) from being compiled: their cost
estimates, inflated by the JSON functions they call, pass ``jit_above_cost`` whatever the
data, and compiling one takes the server seconds."""

SERVER_CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"
"""The server's clock, in seconds since the epoch."""


def list_instances(
    schema: str, *, workflow: bool, status: bool, after: bool, oldest_first: bool
) -> str:
    """A page of instances, newest first (or oldest first), filtered by the parameters that are
    given, in this order: workflow, status, the pk to continue after; then the page size."""
    clauses = [
        sql.SQL(clause)
        for clause, given in (
            ("workflow = %s", workflow),
            ("status = %s", status),
            ("pk > %s" if oldest_first else "pk < %s", after),
        )
        if given
    ]
    where = sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")
    query = sql.SQL("SELECT {cols} FROM {s}.instances {where} ORDER BY pk {order} LIMIT %s")
    return query.format(
        cols=sql.SQL(INSTANCE_COLUMNS),
        s=sql.Identifier(schema),
        where=where,
        order=sql.SQL("ASC" if oldest_first else "DESC"),
    ).as_string()


def control_update(schema: str, assignments: str) -> str:
    """The update of a control action: ``assignments`` (a ``SET`` clause from
    :func:`~stepline.store._rows.control_assignments`), then the pk."""
    return (
        sql.SQL("UPDATE {}.instances SET {}, held_ready_at = NULL WHERE pk = %s")
        .format(sql.Identifier(schema), sql.SQL(assignments))
        .as_string()
    )


# -- parameters ----------------------------------------------------------------------------------


def json_rows(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows for ``json_to_recordset``: one parameter whatever the batch size, encoded in C."""
    return orjson.dumps(list(rows)).decode()


def indexed_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """:func:`json_rows` with each row's position as ``idx``, to match results to rows."""
    return json_rows({**row, "idx": n} for n, row in enumerate(rows))
