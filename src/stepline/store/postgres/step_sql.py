"""The PostgreSQL store's step records: a step write alone or in a batch (fenced by the lease,
an insert or an upsert), the events a write consumes, the patch ids a marker adds to its
instance, and the notification that carries updates' answers. :mod:`.sql` renders them with
the rest of the store's statements."""

from __future__ import annotations

# A step write: insert, or replace the step's earlier record (a retried or re-run step).
STEP_UPSERT = """
    ON CONFLICT (instance_pk, name, count) DO UPDATE SET seq = excluded.seq,
        kind = excluded.kind, status = excluded.status, output = excluded.output,
        error = excluded.error, attempts = excluded.attempts, wake_at = excluded.wake_at,
        started_at = excluded.started_at, ended_at = excluded.ended_at, info = excluded.info
"""

# One step write with plain parameters: the same fence, lock and upsert as ``record_steps``
# without expanding a JSON batch, which costs the server about a fifth of the statement.
# ``{conflict}`` is the upsert clause, or nothing for a step's first record (``record_step_new``):
# a plain insert skips the upsert's speculative insertion (its index pre-check and its second
# WAL record), a noticeable part of a committed step write; a duplicate key then means the record
# exists after all (a write whose reply was lost), and the store writes it again as an upsert.
_RECORD_STEP = """
    WITH fence AS (
        SELECT status FROM {s}.instances
        WHERE pk = %(pk)s::bigint AND lease_token = %(token)s::bigint
            AND lease_owner = %(owner)s::text
        FOR KEY SHARE
    ), recorded AS (
        INSERT INTO {s}.steps (instance_pk, name, count, seq, kind, status, output, error,
            attempts, wake_at, started_at, ended_at, info)
        SELECT %(pk)s::bigint, %(name)s::text, %(count)s::int, %(seq)s::int, %(kind)s::text,
            %(status)s::text, %(output)s::text, %(error)s::text, %(attempts)s::text,
            %(wake_at)s::float8, %(started_at)s::float8, %(ended_at)s::float8, %(info)s::text
        FROM fence {conflict}
    ){consume}
    SELECT 0, status FROM fence
"""

# The notification of updates answered (``{answers}``: their rows) of the instance ``i``: with
# the answers, for a waiter in another process, unless that would pass the 8,000-byte payload
# limit (then without them: the waiter reads the update). ``ANSWERS_NOTE`` is the payload of
# a row joined with ``ANSWERS_JOIN``.
ANSWERS_NOTE = "CASE WHEN octet_length(n.full) <= 7900 THEN n.full ELSE n.bare END"
ANSWERS_JOIN = """
    CROSS JOIN LATERAL (SELECT json_build_object('s', %(source)s::text, 'w', i.workflow,
            'i', i.id, 'e', true,
            'u', (SELECT json_agg(json_build_array(a.update_id, a.status, a.reply, a.error))
                FROM {answers}))::text AS full,
        json_build_object('s', %(source)s::text, 'w', i.workflow, 'i', i.id, 'e', true)::text
            AS bare) n
"""

# A batch of step writes: the rows travel as one JSON parameter. In the batch statements below,
# `i.pk = ANY(ARRAY(SELECT pk FROM <batch>))` repeats the join on pk as an index condition: the
# planner takes a JSON batch for 100 rows and, on a table of up to tens of thousands of
# instances, chose to read the whole table for every batch of a few rows.
_RECORD_STEPS = (
    """
    WITH w AS (
        SELECT * FROM json_to_recordset(%s::json) AS w(idx int, pk bigint, token bigint,
            owner text, name text, count int, seq int, kind text, status text, output text,
            error text, attempts text, wake_at float8, started_at float8, ended_at float8,
            info text, event bigint)
    ), fence AS (
        SELECT w.idx, i.status FROM {s}.instances i
        JOIN w ON i.pk = w.pk AND i.lease_token = w.token AND i.lease_owner = w.owner
        WHERE i.pk = ANY(ARRAY(SELECT pk FROM w))
        ORDER BY i.pk FOR KEY SHARE OF i
    ), recorded AS (
        INSERT INTO {s}.steps (instance_pk, name, count, seq, kind, status, output, error,
            attempts, wake_at, started_at, ended_at, info)
        SELECT w.pk, w.name, w.count, w.seq, w.kind, w.status, w.output, w.error,
            w.attempts, w.wake_at, w.started_at, w.ended_at, w.info
        FROM w JOIN fence f ON f.idx = w.idx
    """
    + STEP_UPSERT
    + """
    ){consume}
    SELECT idx, status FROM fence
"""
)


def merged_patches(current: str, added: str) -> str:
    """An instance's ``patches`` (JSON array text ``current``) with the ids the query ``added``
    selects: sorted, each once (the claim routes on them)."""
    return f"""(SELECT json_agg(p ORDER BY p)::text FROM (
            SELECT json_array_elements_text(COALESCE({current}, '[]')::json)
            UNION {added}) AS m(p))"""


# The events a batch's steps consume.
_CONSUME_MANY = """, consume AS (
            UPDATE {s}.events e SET consumed_by = w.name || '-' || w.count
            FROM w JOIN fence f ON f.idx = w.idx WHERE e.pk = w.event
        )"""

# A patch marker's id joins its instance's patches, in the statement that records it.
_PATCH_ONE = (
    """, patched AS (
            UPDATE {s}.instances SET patches = """
    + merged_patches("patches", "SELECT substr(%(name)s::text, 7)")
    + """
            WHERE pk = %(pk)s::bigint AND EXISTS (SELECT 1 FROM fence)
        )"""
)
# The same for a batch: each instance's markers together (one update per row).
_PATCH_MANY = (
    """, marked AS (
            SELECT w.pk AS m_pk, array_agg(substr(w.name, 7)) AS m_ids
            FROM w JOIN fence f ON f.idx = w.idx WHERE w.kind = 'patch' GROUP BY w.pk
        ), patched AS (
            UPDATE {s}.instances i SET patches = """
    + merged_patches("i.patches", "SELECT unnest(m.m_ids)")
    + """
            FROM marked m WHERE i.pk = m.m_pk
        )"""
)


STEP_TEMPLATES = {
    "record_step": _RECORD_STEP.replace("{conflict}", STEP_UPSERT).replace("{consume}", ""),
    "record_step_new": _RECORD_STEP.replace("{conflict}", "").replace("{consume}", ""),
    "record_step_consuming": _RECORD_STEP.replace("{conflict}", STEP_UPSERT).replace(
        "{consume}",
        """, consume AS (
            UPDATE {s}.events SET consumed_by = %(name)s::text || '-' || %(count)s::int
            WHERE pk = %(event)s::bigint AND EXISTS (SELECT 1 FROM fence)
        )""",
    ),
    "record_step_patch": _RECORD_STEP.replace("{conflict}", STEP_UPSERT).replace(
        "{consume}", _PATCH_ONE
    ),
    "record_steps": _RECORD_STEPS.replace("{consume}", ""),
    "record_steps_consuming": _RECORD_STEPS.replace("{consume}", _CONSUME_MANY),
    "record_steps_patching": _RECORD_STEPS.replace("{consume}", _CONSUME_MANY + _PATCH_MANY),
}
"""The step-record statements, by name (templates of :func:`.sql.render`)."""
