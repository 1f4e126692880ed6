"""The PostgreSQL store's claim statements: the claim (plain, and the reads and writes of one
under flow control limits), the read of the claimed instances' histories and ``next_wakeup``.

Runnable instances are read from ``instances_ready`` (priority, ready_at, pk) one priority at a
time: the priorities that have rows are found by a loose index scan (``levels``: a descent of
the index per priority in use, two when every instance has priority 0), then each is read as a
range, ``priority = p AND ready_at <= now``, so a claim never walks the future timers of a
priority to reach the next one. ``floor`` (NULL: none) is where each range starts instead of
the index's low end (see ``flow.floor``).

Under limits, the claim (``limited``) runs the statements here over a few round trips: the
locks, what runs and what started, the due instances the limits do not hold back, the timers,
the leases.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .sql import render

_FLOOR = "COALESCE(%(floor)s::float8, '-infinity')"

# The priorities in use among rows with ``ready_at >= {bound}``, 0 always included.
_LEVELS = """
    up(p) AS (
        SELECT min(priority) FROM {s}.instances WHERE priority > 0 AND ready_at >= {bound}
        UNION ALL
        SELECT (SELECT min(priority) FROM {s}.instances
            WHERE priority > up.p AND ready_at >= {bound})
        FROM up WHERE up.p IS NOT NULL
    ), down(p) AS (
        SELECT max(priority) FROM {s}.instances WHERE priority < 0 AND ready_at >= {bound}
        UNION ALL
        SELECT (SELECT max(priority) FROM {s}.instances
            WHERE priority < down.p AND ready_at >= {bound})
        FROM down WHERE down.p IS NOT NULL
    ), levels AS (
        SELECT p FROM down WHERE p IS NOT NULL
        UNION ALL SELECT 0
        UNION ALL SELECT p FROM up WHERE p IS NOT NULL
    )
"""


def fleet_wide(limits: str) -> str:
    """Whether the workflow limits ``limits`` (a jsonb expression; SQL NULL: none) set any limit
    that applies across workers, as ``WorkflowLimits.fleet_wide``: true or false, never NULL."""
    return f"""(({limits})->>'concurrency' IS NOT NULL
        OR COALESCE(jsonb_typeof(({limits})->'rate') = 'array', false)
        OR ({limits})->>'key_concurrency' IS NOT NULL
        OR jsonb_array_length(COALESCE(NULLIF(({limits})->'limits', 'null'), '[]')) > 0)"""


# Of the (workflow, version) pairs a claim may take (``store.types.Routing``), unless ``routed``
# is false (every version), and whose recorded patches its code has, each prefixed by the
# instance's route, unless ``patching`` is false (every patch): a filter on the rows an index
# read finds, no read of its own (an instance without patches, nearly all, stops at NULL).
ROUTED = """(NOT %(routed)s::boolean OR workflow || chr(31) || version = ANY(%(routes)s::text[]))
    AND (patches IS NULL OR NOT %(patching)s::boolean OR NOT EXISTS (
        SELECT 1 FROM json_array_elements_text(patches::json) AS x(p)
        WHERE NOT workflow || chr(31) || version || chr(31) || x.p = ANY(%(patches)s::text[])))"""

# The earliest timer of the workflows from ``{since}`` on: one seek per workflow and priority
# (``instances_workflow_ready``), however many rows of other workflows come first in the ready
# index, and however many of theirs are due.
_EARLIEST = """
    SELECT min(m) FROM levels CROSS JOIN unnest(%(workflows)s::text[]) AS w(name)
    CROSS JOIN LATERAL (
        SELECT min(ready_at) AS m FROM {s}.instances
        WHERE workflow = w.name AND priority = levels.p AND ready_at {since} AND {routed}
    ) AS t
"""

# The earliest timer at or above the floor, whatever the limits (where the next floor goes).
_NEXT_READY = _EARLIEST.replace("{since}", ">= {floor}")

# What a claim writes to the instances it leases, and to those it pauses (a pause pending).
LEASE_SET = """
    SET lease_owner = %(owner)s, lease_token = %(token)s, lease_nonce = %(nonce)s,
        lease_expires_at = %(expires)s, ready_at = %(expires)s, updated_at = %(now)s,
        parked_on = NULL, held_ready_at = NULL,
        status = CASE WHEN status IN ('queued', 'waiting') THEN 'running' ELSE status END,
        started_at = COALESCE(started_at, %(now)s)
"""
_PAUSE_SET = """
    SET status = 'paused', ready_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
        updated_at = %(now)s
"""

# The claim when no workflow claimed has fleet-wide limits (``guard`` checks; if one has, the
# claim takes nothing and says so, and the store claims again under the limits). The claimed
# instances' histories are read by ``claimed_histories``, not here. Its rows are ``{icols}``,
# then these (``claim._TOKEN`` ...): the new lease token, the pending control action, the event
# count the lease was taken at, the ``ready_at`` the row was picked at; and on every row, the
# earliest timer at or above the floor (if the claim was short), the highest priority in use,
# and whether any workflow claimed has fleet-wide limits.
_CLAIM = """
    WITH RECURSIVE {levels}, guard AS (
        SELECT EXISTS (SELECT 1 FROM {s}.workflows w
            WHERE w.name = ANY(%(workflows)s::text[]) AND {fleet_wide}) AS limited
    ), picked AS (
        SELECT c.* FROM (SELECT p FROM levels ORDER BY p) AS q CROSS JOIN LATERAL (
            SELECT pk AS p_pk, status AS p_status, ready_at AS p_ready FROM {s}.instances
            WHERE priority = q.p AND ready_at <= %(now)s AND ready_at >= {floor}
                AND workflow = ANY(%(workflows)s::text[]) AND {routed}
            ORDER BY ready_at, pk LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS c
        WHERE NOT (SELECT limited FROM guard)
        LIMIT %(limit)s
    ), paused AS (
        UPDATE {s}.instances {pause_set}
        FROM picked WHERE pk = p_pk AND p_status = 'waitingForPause'
    ), claimed AS (
        UPDATE {s}.instances {lease_set}
        FROM picked WHERE pk = p_pk AND p_status <> 'waitingForPause'
        RETURNING {icols}, lease_token, control, event_seq, p_ready
    ), async_commit AS (
        SELECT set_config('synchronous_commit', 'off', true)
    )
    SELECT claimed.*, next_ready, top, limited
    FROM (
        SELECT CASE WHEN (SELECT count(*) FROM claimed) < %(limit)s THEN (
            {next_ready}
        ) END AS next_ready, (SELECT max(p) FROM levels) AS top,
            (SELECT limited FROM guard) AS limited
    ) AS timers CROSS JOIN async_commit LEFT JOIN claimed ON true
    ORDER BY claimed.priority, p_ready, pk
"""

# -- under limits: the statements of ``limited`` --------------------------------------------

# The advisory locks a claim under limits takes first, in one order (so two claims never wait
# for each other's): ``locks`` holds 'w:' and each limited workflow's name, 'l:' and each named
# limit's its workflows use (``slots`` takes the same key for a named limit).
_LOCK_LIMITS = """
    SELECT pg_advisory_xact_lock(k) FROM (
        SELECT DISTINCT hashtextextended(%(lock_prefix)s || x, 0) AS k
        FROM unnest(%(locks)s::text[]) AS x ORDER BY k
    ) AS s
"""

# Live leases of ``counted`` by workflow and key (``instances_status``).
_RUNNING = """
    SELECT workflow, key, count(*) FROM {s}.instances
    WHERE workflow = ANY(%(counted)s::text[]) AND status IN ('running', 'waitingForPause')
        AND lease_expires_at > %(now)s
    GROUP BY workflow, key
"""

# The live slots of the named limits ``named``, by the workflow of the instances holding them:
# how many, held by how many instances.
_LIVE_SLOTS = """
    SELECT s.limit_name, i.workflow, count(*), count(DISTINCT s.instance_pk)
    FROM {s}.limit_slots s JOIN {s}.instances i ON i.pk = s.instance_pk
        AND i.lease_token = s.lease_token AND i.status IN ('running', 'waitingForPause')
        AND i.lease_expires_at > %(now)s
    WHERE s.limit_name = ANY(%(named)s::text[])
    GROUP BY s.limit_name, i.workflow
"""

# The first starts of ``wfs`` and the slots taken of named limit ``limit`` (NULL: none) after
# ``since``: how many (at most ``cap`` of each; NULL: all) and the ``n``-th latest.
_STARTS = """
    SELECT count(*), (array_agg(t ORDER BY t DESC))[%(n)s] FROM (
        (SELECT started_at AS t FROM {s}.instances
            WHERE workflow = ANY(%(wfs)s::text[]) AND started_at > %(since)s
            ORDER BY started_at DESC LIMIT %(cap)s)
        UNION ALL
        (SELECT at FROM {s}.limit_starts WHERE limit_name = %(limit)s AND at > %(since)s
            ORDER BY at DESC LIMIT %(cap)s)
    ) AS recent
"""

# The due instances of ``workflows`` in claim order that the limits do not hold back: those of
# ``active`` workflows whose key is not full (``full_keys``: workflow, chr(31), key) and, for a
# first start, whose rate is not used up (``no_starts``), then every pause pending (through
# ``instances_status``); none of ``seen`` (read by an earlier pass). Columns: pk, status,
# ready_at, priority, workflow, key, whether it would start. With no workflow ``active`` the
# read of due instances does not run at all (its condition on ``active`` is a constant), so a
# backlog that waits for a slot is not read by every claim that finds none free; with some
# held back whole, ``{due}`` is ``_DUE_EACH``, which does not step over theirs either. A row
# whose status a control action changes between the read's snapshot and its lock (a pause asked
# of an instance whose lease expired, a pending pause resumed) is left to the next claim, which
# that action's notification brings at once.
_CANDIDATES = """
    WITH RECURSIVE {levels}
    (SELECT c.* FROM (SELECT p FROM levels ORDER BY p) AS q CROSS JOIN LATERAL (
        {due}
    ) AS c
    LIMIT %(limit)s)
    UNION ALL
    SELECT * FROM (
        SELECT pk, status, ready_at, priority, workflow, key, started_at IS NULL
        FROM {s}.instances
        WHERE workflow = ANY(%(workflows)s::text[]) AND status = 'waitingForPause'
            AND ready_at <= %(now)s AND ready_at >= {floor} AND pk <> ALL(%(seen)s::bigint[])
        {lock}
    ) AS pauses
"""

# The due instances of priority ``q.p`` that ``_CANDIDATES`` reads, from the rows of ``{which}``.
_DUE = """
        SELECT pk, status, ready_at, priority, workflow, key, started_at IS NULL AS starting
        FROM {s}.instances
        WHERE {which} AND priority = q.p AND ready_at <= %(now)s AND ready_at >= {floor}
            AND pk <> ALL(%(seen)s::bigint[]) AND status <> 'waitingForPause'
            AND (key IS NULL OR NOT workflow || chr(31) || key = ANY(%(full_keys)s::text[]))
            AND (started_at IS NOT NULL OR NOT workflow = ANY(%(no_starts)s::text[]))
            AND {routed}
        ORDER BY ready_at, pk LIMIT %(limit)s
        {lock}
"""

# In claim order through the ready index, which holds every workflow's rows together. (The
# workflow is compared as an expression, which no index has: with statistics that lag behind a
# table filled since its last ANALYZE, the planner would otherwise read every row of the
# workflows through ``instances_status`` and sort them, at every claim.)
_DUE_IN_ORDER = _DUE.replace(
    "{which}",
    "cardinality(%(active)s::text[]) > 0 AND (workflow || '') = ANY(%(active)s::text[])",
)

# Each active workflow's through ``instances_workflow_ready``, merged: for a claim some of whose
# workflows a limit holds back whole, whose due rows the ready index would walk past. Of a
# workflow whose rate is used up (``no_starts``), only the rows that started before, through
# ``instances_workflow_started``: a rate holds back first starts only, and its waiting first
# starts would be walked past too. Each workflow's read locks up to the limit before the merge
# keeps the first: rows a claim then does not take, until it commits.
_DUE_EACH = (
    """
        SELECT e.* FROM unnest(%(active)s::text[]) AS w(name) CROSS JOIN LATERAL (
            SELECT * FROM ("""
    + _DUE.replace("{which}", "workflow = w.name AND NOT w.name = ANY(%(no_starts)s::text[])")
    + """) AS whole
            UNION ALL
            SELECT * FROM ("""
    + _DUE.replace(
        "{which}",
        "workflow = w.name AND w.name = ANY(%(no_starts)s::text[]) AND started_at IS NOT NULL",
    )
    + """) AS resumed
        ) AS e
        ORDER BY e.ready_at, e.pk LIMIT %(limit)s
"""
)

# The timers a claim under limits reports: the highest priority in use, the earliest timer at
# or above the floor (where the next floor goes), the earliest after now, and which of
# ``no_starts`` have a first start due (they may run when their rate reopens).
_TIMERS = (
    """
    WITH RECURSIVE {levels}
    SELECT (SELECT max(p) FROM levels), ("""
    + _NEXT_READY
    + """), ("""
    + _EARLIEST.replace("{since}", "> %(now)s")
    + """), ARRAY(
        SELECT w FROM unnest(%(no_starts)s::text[]) AS w WHERE EXISTS (
            SELECT 1 FROM {s}.instances WHERE workflow = w AND status = 'queued'
                AND started_at IS NULL AND ready_at <= %(now)s AND {routed})
    )
"""
)

# Lease the admitted instances ``pks`` (as the plain claim does), and carry out the pauses
# pending ``pauses``. (What it leased is read by ``claimed_rows``.)
_LEASE = """
    WITH paused AS (
        UPDATE {s}.instances {pause_set}
        WHERE pk = ANY(%(pauses)s::bigint[]) AND status = 'waitingForPause'
    )
    UPDATE {s}.instances {lease_set} WHERE pk = ANY(%(pks)s::bigint[])
"""

# The instances a claim just leased (owner, nonce, its expiry as ``ready_at``): through the
# claim's index, one priority at a time (OFFSET 0 keeps the planner from turning it into a join).
_CLAIMED = """
        FROM levels CROSS JOIN LATERAL (
            SELECT {cols} FROM {s}.instances
            WHERE priority = levels.p AND ready_at = %(expires)s AND lease_owner = %(owner)s
                AND lease_nonce = %(nonce)s
            OFFSET 0
        ) AS i
"""

# A leased instance ``i``'s history: its steps and its unconsumed events, as JSON arrays.
HISTORY = """
        (SELECT COALESCE(json_agg(json_build_array({scols}) ORDER BY seq), '[]')::text
            FROM {s}.steps WHERE instance_pk = i.pk),
        (SELECT COALESCE(json_agg(json_build_array(pk, type, payload, created_at)
            ORDER BY pk), '[]')::text
            FROM {s}.events e WHERE e.instance_pk = i.pk AND consumed_by IS NULL)
"""

_LEVELS_ALL = _LEVELS.replace("{bound}", "'-infinity'::float8")
_TEMPLATES = {
    "claim": _CLAIM,
    "lock_limits": _LOCK_LIMITS,
    "running": _RUNNING,
    "live_slots": _LIVE_SLOTS,
    "starts": _STARTS,
    "candidates": _CANDIDATES.replace("{due}", _DUE_IN_ORDER).replace(
        "{lock}", "FOR UPDATE SKIP LOCKED"
    ),
    "candidates_each": _CANDIDATES.replace("{due}", _DUE_EACH).replace(
        "{lock}", "FOR UPDATE SKIP LOCKED"
    ),
    "probe": _CANDIDATES.replace("{due}", _DUE_IN_ORDER).replace("{lock}", ""),
    "probe_each": _CANDIDATES.replace("{due}", _DUE_EACH).replace("{lock}", ""),
    # The rows this transaction has fetched so far through the indexes of instances: what a
    # read of due instances fetched, less what it returned, is what it stepped over (``limited``;
    # through whichever index the planner chose).
    "walked": """
        SELECT COALESCE(sum(pg_stat_get_xact_tuples_fetched(indexrelid)), 0)::bigint
        FROM pg_index WHERE indrelid = '{s}.instances'::regclass
    """,
    "timers": _TIMERS,
    "lease": _LEASE,
    # The histories of the instances a claim just leased, read by the next statement of the
    # claim's transaction. Not by the claim statement itself: under READ COMMITTED its row locks
    # and updates act on the newest version of each row (an event committed while the claim ran
    # included, in ``event_seq``), while its other reads see the statement's snapshot, which
    # misses that event; the activation would then suspend believing it had seen every event.
    # A statement that starts after the locks were taken sees everything committed before them,
    # and nothing can change the leased rows' events until the claim commits (``send_event``
    # must update the locked instance row), so ``event_seq`` and the events agree. (Through the
    # claim's index, one priority at a time; OFFSET 0 keeps the planner from turning it into a
    # join, which could read the whole table.)
    "claimed_histories": "WITH RECURSIVE "
    + _LEVELS.replace("{bound}", "%(expires)s::float8")
    + " SELECT i.pk, i.event_seq, "
    + HISTORY
    + _CLAIMED.replace("{cols}", "pk, event_seq"),
    # The rows of the instances a claim under limits leased (``limited``), as the plain
    # claim's ``RETURNING``, each followed by its history as ``claimed_histories`` reads it: a
    # statement after the claim's, for the same reason.
    "claimed_rows": "WITH RECURSIVE "
    + _LEVELS.replace("{bound}", "%(expires)s::float8")
    + " SELECT i.*, "
    + HISTORY
    + _CLAIMED.replace("{cols}", "{icols}, lease_token, control, event_seq"),
    "claimed_by": """
        SELECT {icols}, lease_token, control, event_seq
        FROM {s}.instances WHERE lease_owner = %s AND lease_nonce = %s ORDER BY pk
    """,
    "next_wakeup": "WITH RECURSIVE "
    + _LEVELS_ALL
    + _NEXT_READY.replace("{floor}", "'-infinity'::float8"),
    "workflow_limits": "SELECT name, limits FROM {s}.workflows WHERE limits IS NOT NULL",
    "named_limits": "SELECT name, concurrency, rate_count, rate_period FROM {s}.limits",
}


def _expand(text: str) -> str:
    """A template with its shared fragments in place (levels bounded by the floor)."""
    return (
        text.replace("{levels}", _LEVELS)
        .replace("{next_ready}", _NEXT_READY)
        .replace("{routed}", ROUTED)
        .replace("{lease_set}", LEASE_SET)
        .replace("{pause_set}", _PAUSE_SET)
        .replace("{fleet_wide}", fleet_wide("w.limits::jsonb"))
        .replace("{bound}", _FLOOR)
        .replace("{floor}", _FLOOR)
    )


@dataclass(frozen=True)
class ClaimStatements:
    """The claim's statements, rendered for one schema."""

    claim: str
    lock_limits: str
    running: str
    live_slots: str
    starts: str
    candidates: str
    candidates_each: str
    probe: str
    probe_each: str
    walked: str
    timers: str
    lease: str
    claimed_histories: str
    claimed_rows: str
    claimed_by: str
    next_wakeup: str
    workflow_limits: str
    named_limits: str

    @classmethod
    def for_schema(cls, schema: str) -> ClaimStatements:
        templates = {name: _expand(text) for name, text in _TEMPLATES.items()}
        if {f.name for f in fields(cls)} != set(templates):
            raise RuntimeError("claim statement templates out of sync")
        return cls(**render(templates, schema))
