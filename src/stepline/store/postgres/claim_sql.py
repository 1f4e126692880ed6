"""The PostgreSQL store's claim statements: the claim (plain, and under flow control limits), the
read of the claimed instances' histories, ``next_wakeup`` and the reads of ``limit_states``.

Runnable instances are read from ``instances_ready`` (priority, ready_at, pk) one priority at a
time: the priorities that have rows are found by a loose index scan (``levels``: a descent of
the index per priority in use, two when every instance has priority 0), then each is read as a
range, ``priority = p AND ready_at <= now``, so a claim never walks the future timers of a
priority to reach the next one. ``floor`` (NULL: none) is where each range starts instead of
the index's low end (see ``claim._ClaimFloor``).

Under limits (docs/architecture.md, "The PostgreSQL store"), a claim first takes a transaction-level
advisory lock on each limited workflow and each named limit its workflows use, in a statement
of its own (``lock_limits``): under READ COMMITTED the claim statement that follows sees every
earlier claim that held one of those locks. It counts what runs and what started (``usage``),
skips the instances whose workflow, key or named limit is full (or whose rate is used up, for a
first start), and admits the rest in claim order with running counts per workflow, key and
named limit (window functions). Each count also counts the candidates before it that a later
stage turned down, so a pass may admit fewer than the rules would, never more; the first
candidate always has room, so every claim that finds one takes it. Two further passes in the
same transaction read past what the passes before held back because of what they took.
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

# Whether the ``limits`` of workflow row ``w`` set any limit that applies across workers.
_FLEET_WIDE = """
    (w.limits IS NOT NULL AND (w.limits::json ->> 'concurrency' IS NOT NULL
        OR w.limits::json ->> 'rate' IS NOT NULL
        OR w.limits::json ->> 'key_concurrency' IS NOT NULL
        OR json_array_length(w.limits::json -> 'limits') > 0))
"""

# The earliest timer at or above the floor, whatever the limits (where the next floor goes).
_NEXT_READY = """
    SELECT min(m) FROM levels CROSS JOIN LATERAL (
        SELECT min(ready_at) AS m FROM {s}.instances
        WHERE priority = levels.p AND ready_at >= {floor}
            AND workflow = ANY(%(workflows)s::text[])
    ) AS t
"""

# The claim's rows are ``{icols}``, then these (``claim._TOKEN`` ...): the new lease token, the
# pending control action, the event count the lease was taken at, the ``ready_at`` the row was
# picked at; and on every row, the earliest timer at or above the floor (if the claim was
# short, or under limits), the highest priority in use, whether any workflow claimed has
# fleet-wide limits, and under limits (if the claim took nothing) the earliest time an instance
# may need a worker (without limits, that is the earliest timer).
_CLAIM_TAIL = """
    ), claimed AS (
        UPDATE {s}.instances SET lease_owner = %(owner)s, lease_token = lease_token + 1,
            lease_nonce = %(nonce)s,
            lease_expires_at = %(expires)s, ready_at = %(expires)s, updated_at = %(now)s,
            parked_on = NULL,
            status = CASE WHEN status IN ('queued', 'waiting') THEN 'running' ELSE status END,
            started_at = COALESCE(started_at, %(now)s)
        FROM {taken} WHERE pk = p_pk {taken_if}
        RETURNING {icols}, lease_token, control, event_seq, p_ready
    ), async_commit AS (
        SELECT set_config('synchronous_commit', 'off', true)
    )
    SELECT claimed.*, next_ready, top, limited, {hint}
    FROM (
        SELECT CASE WHEN {short} THEN (
            {next_ready}
        ) END AS next_ready, (SELECT max(p) FROM levels) AS top, {limited} AS limited
    ) AS timers CROSS JOIN async_commit LEFT JOIN claimed ON true
    ORDER BY claimed.priority, p_ready, pk
"""

_PAUSE = """
    ), paused AS (
        UPDATE {s}.instances SET status = 'paused', ready_at = NULL, lease_owner = NULL,
            lease_expires_at = NULL, updated_at = %(now)s
        FROM {picked} WHERE pk = p_pk AND p_status = 'waitingForPause'
"""

# The claim when no workflow claimed has fleet-wide limits (``guard`` checks; if one has, the
# claim takes nothing and says so, and the store claims again with ``claim_limited``). The
# claimed instances' histories are read by ``claimed_histories``, not here.
_CLAIM = (
    """
    WITH RECURSIVE {levels}, guard AS (
        SELECT EXISTS (SELECT 1 FROM {s}.workflows w
            WHERE w.name = ANY(%(workflows)s::text[]) AND {fleet_wide}) AS limited
    ), picked AS (
        SELECT c.* FROM (SELECT p FROM levels ORDER BY p) AS q CROSS JOIN LATERAL (
            SELECT pk AS p_pk, status AS p_status, ready_at AS p_ready FROM {s}.instances
            WHERE priority = q.p AND ready_at <= %(now)s AND ready_at >= {floor}
                AND workflow = ANY(%(workflows)s::text[])
            ORDER BY ready_at, pk LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS c
        WHERE NOT (SELECT limited FROM guard)
        LIMIT %(limit)s
    """
    + _PAUSE.replace("{picked}", "picked")
    + _CLAIM_TAIL.replace("{taken}", "picked")
    .replace("{taken_if}", "AND p_status <> 'waitingForPause'")
    .replace("{short}", "(SELECT count(*) FROM claimed) < %(limit)s")
    .replace("{hint}", "NULL::float8")
    .replace("{limited}", "(SELECT limited FROM guard)")
)

# What runs and what started, for the workflows ``%(workflows)s`` and the named limits they use:
# ``rules`` (their registered limits), ``wf_limits`` (every workflow's named limits), ``named``
# and ``users`` (the limits used, and every workflow counting toward them), ``running`` (live
# leases by workflow and key), ``lim_slots`` (what steps' live slots add to a named limit: every
# slot, less one per listing instance holding some, which counts once per slot rather than
# once more for itself), ``wf_use``/``lim_use`` (running, started within the rate's
# period, the slots steps took included, and, once the rate is used up, when it reopens),
# ``wf_state`` (``full``: no instance of
# the workflow may run; ``reopen_at``: when a first start may happen again, if a rate holds it).
_USAGE = """
    rules AS (
        SELECT w.name AS wf, l.concurrency AS conc, l.key_concurrency AS key_conc,
            (l.rate ->> 0)::int AS rate_n, (l.rate ->> 1)::float8 AS rate_s
        FROM {s}.workflows w CROSS JOIN LATERAL json_to_record(w.limits::json)
            AS l(concurrency int, key_concurrency int, rate json)
        WHERE w.name = ANY(%(workflows)s::text[]) AND {fleet_wide}
    ), wf_limits AS (
        SELECT w.name AS wf, n.name AS lim FROM {s}.workflows w
        CROSS JOIN LATERAL json_array_elements_text(w.limits::json -> 'limits') AS n(name)
        WHERE w.limits IS NOT NULL
    ), named AS (
        SELECT name AS lim, concurrency AS conc, rate_count AS rate_n, rate_period AS rate_s
        FROM {s}.limits
        WHERE name IN (SELECT lim FROM wf_limits WHERE wf = ANY(%(workflows)s::text[]))
    ), users AS (
        SELECT wf, lim FROM wf_limits WHERE lim IN (SELECT lim FROM named)
    ), running AS (
        SELECT workflow AS wf, key, count(*) AS n FROM {s}.instances
        WHERE workflow IN (
                SELECT wf FROM rules
                WHERE conc IS NOT NULL OR key_conc IS NOT NULL OR %(all_running)s
                UNION SELECT wf FROM users)
            AND status IN ('running', 'waitingForPause') AND lease_expires_at > %(now)s
        GROUP BY workflow, key
    ), wf_use AS (
        SELECT r.*, COALESCE((SELECT sum(x.n) FROM running x WHERE x.wf = r.wf), 0) AS running,
            COALESCE(st.n, 0) AS started, st.reopen
        FROM rules r LEFT JOIN LATERAL (
            SELECT count(*) AS n, (array_agg(t ORDER BY t DESC))[r.rate_n] + r.rate_s AS reopen
            FROM (SELECT started_at AS t FROM {s}.instances
                WHERE workflow = r.wf AND started_at > %(now)s - r.rate_s
                ORDER BY started_at DESC {recent}) AS recent
        ) AS st ON r.rate_n IS NOT NULL
    ), lim_slots AS (
        SELECT s.limit_name AS lim, count(*) - count(DISTINCT s.instance_pk) FILTER (
                WHERE EXISTS (SELECT 1 FROM users u WHERE u.lim = s.limit_name
                    AND u.wf = i.workflow)) AS n
        FROM {s}.limit_slots s JOIN {s}.instances i ON i.pk = s.instance_pk
            AND i.lease_token = s.lease_token AND i.status IN ('running', 'waitingForPause')
            AND i.lease_expires_at > %(now)s
        WHERE s.limit_name IN (SELECT lim FROM named)
        GROUP BY s.limit_name
    ), lim_use AS (
        SELECT d.*, COALESCE((SELECT sum(x.n) FROM running x JOIN users u ON u.wf = x.wf
                WHERE u.lim = d.lim), 0)
                + COALESCE((SELECT z.n FROM lim_slots z WHERE z.lim = d.lim), 0) AS running,
            COALESCE(st.n, 0) AS started, st.reopen
        FROM named d LEFT JOIN LATERAL (
            SELECT count(*) AS n, (array_agg(t ORDER BY t DESC))[d.rate_n] + d.rate_s AS reopen
            FROM ((SELECT started_at AS t FROM {s}.instances
                WHERE workflow IN (SELECT wf FROM users u WHERE u.lim = d.lim)
                    AND started_at > %(now)s - d.rate_s
                ORDER BY started_at DESC {recent_d})
                UNION ALL (SELECT at FROM {s}.limit_starts
                WHERE limit_name = d.lim AND at > %(now)s - d.rate_s
                ORDER BY at DESC {recent_d})) AS recent
        ) AS st ON d.rate_n IS NOT NULL
    ), wf_state AS (
        SELECT w.*, (w.conc IS NOT NULL AND w.running >= w.conc) OR EXISTS (
                SELECT 1 FROM wf_limits x JOIN lim_use l ON l.lim = x.lim
                WHERE x.wf = w.wf AND l.running >= l.conc) AS is_full,
            GREATEST(CASE WHEN w.started >= w.rate_n THEN w.reopen END, (
                SELECT max(l.reopen) FROM wf_limits x JOIN lim_use l ON l.lim = x.lim
                WHERE x.wf = w.wf AND l.started >= l.rate_n)) AS reopen_at
        FROM wf_use w
    ), caps AS (
        SELECT key AS wf, value::int AS cap FROM json_each_text({caps})
    ), held AS (
        SELECT ARRAY(SELECT wf FROM wf_state WHERE is_full UNION SELECT wf FROM caps WHERE cap <= 0)
                AS full_wfs,
            ARRAY(SELECT wf FROM wf_state WHERE reopen_at IS NOT NULL) AS rate_wfs,
            ARRAY(SELECT x.wf || chr(31) || x.key FROM running x JOIN wf_state w ON w.wf = x.wf
                WHERE x.key IS NOT NULL AND x.n >= w.key_conc) AS full_keys
    )
"""

# An ``instances`` row (unqualified columns) that no full workflow, key, named limit or used-up
# rate holds back (a pending pause is applied whatever the limits).
_RUNNABLE = """
    (status = 'waitingForPause' OR (workflow <> ALL((SELECT full_wfs FROM held)::text[])
        AND (key IS NULL OR workflow || chr(31) || key <> ALL((SELECT full_keys FROM held)::text[]))
        AND (started_at IS NOT NULL OR workflow <> ALL((SELECT rate_wfs FROM held)::text[]))))
"""

# The earliest time an instance may need a worker under the limits: a future timer or lease
# expiry, a runnable instance not held back, or when a rate that holds back a first start
# reopens; never an instance held back by a concurrency limit.
_HINT = """
    SELECT min(m) FROM (
        SELECT (SELECT min(ready_at) FROM {s}.instances WHERE priority = levels.p
            AND ready_at > %(now)s AND workflow = ANY(%(workflows)s::text[])) AS m FROM levels
        UNION ALL
        SELECT (SELECT min(ready_at) FROM {s}.instances WHERE priority = levels.p
            AND ready_at <= %(now)s AND ready_at >= {floor}
            AND workflow = ANY(%(workflows)s::text[]) AND {runnable}) FROM levels
        UNION ALL
        SELECT min(w.reopen_at) FROM wf_state w
        WHERE w.reopen_at IS NOT NULL AND w.wf <> ALL((SELECT full_wfs FROM held)::text[])
            AND EXISTS (SELECT 1 FROM {s}.instances WHERE workflow = w.wf AND status = 'queued'
                AND started_at IS NULL AND ready_at <= %(now)s)
    ) AS hints
"""

# The claim under limits: candidates in claim order, then admission stage by stage (the
# worker's cap, the key's concurrency, the workflow's concurrency, its rate for first starts,
# each named limit's concurrency and rate), each counting only the candidates the stages before
# it let through (see the module's docstring). If it turned candidates down and came back
# short, it leaves how many are missing in ``stepline.claim_left`` for the next pass.
_ORDER = "ORDER BY c_prio, c_ready, c_pk ROWS UNBOUNDED PRECEDING"
_CLAIM_LIMITED = (
    """
    WITH RECURSIVE {levels}, {usage}, cand AS (
        SELECT c.* FROM (SELECT p FROM levels ORDER BY p) AS q CROSS JOIN LATERAL (
            SELECT pk AS c_pk, status AS c_status, ready_at AS c_ready, priority AS c_prio,
                workflow AS c_wf, key AS c_key, started_at IS NULL AS starting,
                status = 'waitingForPause' AS pause
            FROM {s}.instances
            WHERE priority = q.p AND ready_at <= %(now)s AND ready_at >= {floor}
                AND workflow = ANY(%(workflows)s::text[]) AND {runnable}
            ORDER BY ready_at, pk LIMIT {left}
            FOR UPDATE SKIP LOCKED
        ) AS c
        LIMIT {left}
    ), s_cap AS (
        SELECT c.*, w.conc, w.key_conc, w.rate_n, COALESCE(w.running, 0) AS running,
            COALESCE(w.started, 0) AS started, COALESCE(k.n, 0) AS key_running,
            caps.cap IS NULL OR c.pause
                OR count(*) FILTER (WHERE NOT c.pause) OVER by_wf <= caps.cap AS ok_cap
        FROM cand c LEFT JOIN wf_state w ON w.wf = c.c_wf
            LEFT JOIN running k ON k.wf = c.c_wf AND k.key = c.c_key
            LEFT JOIN caps ON caps.wf = c.c_wf
        WINDOW by_wf AS (PARTITION BY c.c_wf {order})
    ), s_key AS (
        SELECT s.*, ok_cap AND (pause OR key_conc IS NULL OR c_key IS NULL OR key_running
            + count(*) FILTER (WHERE ok_cap AND NOT pause) OVER by_key <= key_conc) AS ok_key
        FROM s_cap s WINDOW by_key AS (PARTITION BY c_wf, c_key {order})
    ), s_conc AS (
        SELECT s.*, ok_key AND (pause OR conc IS NULL
            OR running + count(*) FILTER (WHERE ok_key AND NOT pause) OVER by_wf <= conc)
            AS ok_conc
        FROM s_key s WINDOW by_wf AS (PARTITION BY c_wf {order})
    ), s_rate AS (
        SELECT s.*, ok_conc AND (pause OR NOT starting OR rate_n IS NULL OR started
            + count(*) FILTER (WHERE ok_conc AND starting AND NOT pause) OVER by_wf <= rate_n)
            AS ok_rate
        FROM s_conc s WINDOW by_wf AS (PARTITION BY c_wf {order})
    ), s_named AS (
        SELECT s.c_pk, s.starting, l.conc, l.rate_n, l.running, l.started,
            count(*) FILTER (WHERE s.ok_rate AND NOT s.pause) OVER by_lim AS n_run,
            count(*) FILTER (WHERE s.ok_rate AND NOT s.pause AND s.starting) OVER by_lim
                AS n_start
        FROM s_rate s JOIN wf_limits x ON x.wf = s.c_wf JOIN lim_use l ON l.lim = x.lim
        WINDOW by_lim AS (PARTITION BY l.lim ORDER BY s.c_prio, s.c_ready, s.c_pk
            ROWS UNBOUNDED PRECEDING)
    ), admitted AS (
        SELECT c_pk AS p_pk, c_ready AS p_ready, c_wf AS p_wf FROM s_rate s
        WHERE NOT pause AND ok_rate AND NOT EXISTS (
            SELECT 1 FROM s_named n WHERE n.c_pk = s.c_pk
                AND (n.running + n.n_run > n.conc
                    OR (n.starting AND n.started + n.n_start > n.rate_n)))
    ), pausing AS (
        SELECT c_pk AS p_pk, c_status AS p_status FROM cand WHERE pause
    """
    + _PAUSE.replace("{picked}", "pausing")
    + _CLAIM_TAIL.replace("{taken}", "admitted")
    .replace("{taken_if}", "")
    .replace(
        "), async_commit AS (",
        """), more AS (
            SELECT set_config('stepline.claim_left', CASE
                WHEN (SELECT count(*) FROM cand WHERE NOT pause) > (SELECT count(*) FROM admitted)
                THEN ({left} - (SELECT count(*) FROM admitted))::text ELSE '0' END, true),
            set_config('stepline.claim_caps', COALESCE((SELECT json_object_agg(wf, cap
                - (SELECT count(*) FROM admitted WHERE p_wf = wf)) FROM caps), '{{}}')::text,
                true)
        ), async_commit AS (""",
    )
    .replace("CROSS JOIN async_commit", "CROSS JOIN async_commit CROSS JOIN more")
).replace("{order}", _ORDER)
_CLAIM_LIMITED_FIRST = (
    _CLAIM_LIMITED.replace("{left}", "%(limit)s")
    .replace("{usage}", _USAGE.replace("{caps}", "%(caps)s::json"))
    .replace("{short}", "true")
    .replace("(SELECT max(p) FROM levels) AS top", "(SELECT max(p) FROM levels) AS top")
    .replace(
        "{hint}",
        "CASE WHEN NOT EXISTS (SELECT 1 FROM claimed) THEN ({hint}) END AS hint",
    )
    .replace("{limited}", "(SELECT EXISTS (SELECT 1 FROM rules))")
)
# A further pass of the same claim, in the same transaction: it sees what the passes before it
# took (leases that run, starts), so the groups they filled are skipped and it reads past them,
# for as many instances as ``stepline.claim_left`` (set by the pass before) says are missing,
# and within the caps left (``stepline.claim_caps``).
_CLAIM_LIMITED_MORE = (
    _CLAIM_LIMITED.replace("{left}", "current_setting('stepline.claim_left')::int")
    .replace("{usage}", _USAGE.replace("{caps}", "current_setting('stepline.claim_caps')::json"))
    .replace("{short}", "false")
    .replace("(SELECT max(p) FROM levels) AS top", "NULL::int AS top")
    .replace("{hint}", "NULL::float8")
    .replace("{limited}", "NULL::boolean")
)


# The advisory locks a claim under limits takes first, in one order (so two claims never wait
# for each other's), one per limited workflow and one per named limit they use.
_LOCK_LIMITS = """
    SELECT pg_advisory_xact_lock(k) FROM (
        SELECT DISTINCT hashtextextended(%(lock_prefix)s || x, 0) AS k FROM (
            SELECT 'w:' || w.name AS x FROM {s}.workflows w
            WHERE w.name = ANY(%(workflows)s::text[]) AND {fleet_wide}
            UNION ALL
            SELECT 'l:' || n.name FROM {s}.workflows w
            CROSS JOIN LATERAL json_array_elements_text(w.limits::json -> 'limits') AS n(name)
            WHERE w.name = ANY(%(workflows)s::text[]) AND w.limits IS NOT NULL
        ) AS t
        ORDER BY k
    ) AS s
"""

_LEVELS_ALL = _LEVELS.replace("{bound}", "'-infinity'::float8")
_TEMPLATES = {
    "claim": _CLAIM,
    "claim_limited": _CLAIM_LIMITED_FIRST,
    "claim_limited_more": _CLAIM_LIMITED_MORE,
    "lock_limits": _LOCK_LIMITS,
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
    + """
        SELECT i.pk, i.event_seq,
            (SELECT COALESCE(json_agg(json_build_array({scols}) ORDER BY seq), '[]')::text
                FROM {s}.steps WHERE instance_pk = i.pk),
            (SELECT COALESCE(json_agg(json_build_array(pk, type, payload, created_at)
                ORDER BY pk), '[]')::text
                FROM {s}.events e WHERE e.instance_pk = i.pk AND consumed_by IS NULL)
        FROM levels CROSS JOIN LATERAL (
            SELECT pk, event_seq FROM {s}.instances
            WHERE priority = levels.p AND ready_at = %(expires)s AND lease_owner = %(owner)s
                AND lease_nonce = %(nonce)s
            OFFSET 0
        ) AS i
    """,
    "claimed_by": """
        SELECT {icols}, lease_token, control, event_seq, ready_at, NULL::float8, NULL::int,
            NULL::boolean, NULL::float8
        FROM {s}.instances WHERE lease_owner = %s AND lease_nonce = %s ORDER BY pk
    """,
    "next_wakeup": "WITH RECURSIVE "
    + _LEVELS_ALL
    + _NEXT_READY.replace("{floor}", "'-infinity'::float8"),
    "next_wakeup_limited": "WITH RECURSIVE "
    + _LEVELS_ALL
    + ", {usage} "
    + _HINT.replace("{floor}", "'-infinity'::float8"),
    # limit_states: the workflow's registered limits, the named limits, and the use of each.
    "workflow_limits": "SELECT limits FROM {s}.workflows WHERE name = %(workflow)s",
    "named_limits": "SELECT name, concurrency, rate_count, rate_period FROM {s}.limits",
    "limit_usage": "WITH "
    + _USAGE.replace("{recent}", "").replace("{recent_d}", "").replace("{caps}", "'{{}}'::json")
    + """
        SELECT 'workflow', wf, running, started, reopen FROM wf_use
        UNION ALL SELECT 'limit', lim, running, started, reopen FROM lim_use
        UNION ALL SELECT 'key', key, n, 0, NULL FROM running
            WHERE wf = %(workflow)s AND key = %(key)s
    """,
}


def _expand(text: str) -> str:
    """A template with its shared fragments in place (levels bounded by the floor)."""
    return (
        text.replace("{levels}", _LEVELS)
        .replace("{usage}", _USAGE.replace("{caps}", "%(caps)s::json"))
        .replace("{hint}", _HINT)
        .replace("{next_ready}", _NEXT_READY)
        .replace("{runnable}", _RUNNABLE)
        .replace("{fleet_wide}", _FLEET_WIDE)
        .replace("{recent}", "LIMIT r.rate_n")
        .replace("{recent_d}", "LIMIT d.rate_n")
        .replace("{bound}", _FLOOR)
        .replace("{floor}", _FLOOR)
    )


@dataclass(frozen=True)
class ClaimStatements:
    """The claim's statements, rendered for one schema."""

    claim: str
    claim_limited: str
    claim_limited_more: str
    lock_limits: str
    claimed_histories: str
    claimed_by: str
    next_wakeup: str
    next_wakeup_limited: str
    workflow_limits: str
    named_limits: str
    limit_usage: str

    @classmethod
    def for_schema(cls, schema: str) -> ClaimStatements:
        templates = {name: _expand(text) for name, text in _TEMPLATES.items()}
        if {f.name for f in fields(cls)} != set(templates):
            raise RuntimeError("claim statement templates out of sync")
        return cls(**render(templates, schema))
