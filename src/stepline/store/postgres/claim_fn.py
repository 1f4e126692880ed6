"""The PostgreSQL store's claim under flow-control limits as one server-side function, so that
such a claim is one statement in one round trip, like the plain claim.

The function is PL/pgSQL. Its SQL statements are the claim's and the parking's own
(``claim_sql``, ``parking``), rendered with the function's variables in place of the client's
parameters, so each statement exists once. The rules it applies between them are those of
``store/_admission`` (the reference, which the SQLite store runs): which workflows and named
limits a claim locks, what runs and what started in their scopes, what a read of due instances
leaves out, and whether each due instance is admitted. ``tests/store/test_postgres_admission.py``
runs the same random claims through both and compares them.

Under READ COMMITTED every statement of a VOLATILE function takes a new snapshot: those after
the advisory locks see every claim and slot taken by a transaction that held one of them
before, as the statements of a client transaction after its locks do.

Its name carries a hash of its text (``claim_under_limits_<hash>``): a store creates it when
it opens if the schema lacks it, so workers of two versions of stepline each call their own.
Its statements run with generic plans (``plan_cache_mode``), planned once per session: planned
anew at every call with the call's values, as PostgreSQL's default would choose for them, they
took most of a claim's time; the generic plans read no more of the tables
(``tests/store/test_postgres_reads.py`` bounds what the function reads).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from psycopg import sql

from .claim_sql import FLOOR_MARGIN, ClaimStatements, fleet_wide
from .parking import ParkingStatements

PARK_AFTER = 1000
"""How many due instances a read may step over before the claim sets aside the queues of the
full keys it left out, if the claims before it did too (``may_park``)."""
PASSES = 3
"""Reads of due instances a claim makes at most: another follows a full read some of whose
instances admission refused (what the claim took filled a key or a limit the read did not yet
leave out)."""

# The named limits of workflow limits ``{d}`` that are defined (with a concurrency or a rate).
_NAMED_OF = """(SELECT x FROM jsonb_array_elements_text(
    COALESCE(NULLIF(({d})->'limits', 'null'), '[]')) AS x WHERE v_named ? x)"""

# The workflows of the claim that may still run: not at this worker's cap, their concurrency or
# a named limit's concurrency (``Admission.held``'s ``active``).
_ACTIVE = """ARRAY(SELECT u.w FROM unnest(a_workflows) WITH ORDINALITY AS u(w, o)
            WHERE NOT {capped_uw}
                AND NOT COALESCE((v_rules->u.w->>'concurrency')::int
                    <= COALESCE((v_run->>u.w)::int, 0), false)
                AND NOT EXISTS (SELECT 1 FROM {named_of_ru} AS m(x)
                    WHERE (v_named->m.x->>'concurrency')::int
                        <= COALESCE((v_lrun->>m.x)::int, 0))
            ORDER BY u.o)"""

# Among those, the keys that run as many as their ``key_concurrency`` lets run, and the workflows
# whose first starts a used-up rate holds (``Admission.held``'s ``full_keys``, ``no_starts``).
_FULL = """ARRAY(SELECT e.key FROM jsonb_each_text(v_krun) AS e
            WHERE split_part(e.key, chr(31), 1) = ANY(v_active)
                AND e.value::int >= (v_rules->split_part(e.key, chr(31), 1)
                    ->>'key_concurrency')::int ORDER BY e.key)"""
_NO_STARTS = """ARRAY(SELECT c FROM unnest(v_active) AS c
            WHERE COALESCE((v_rules->c->'rate'->>0)::int <= COALESCE((v_st->>c)::int, 0), false)
                OR EXISTS (SELECT 1 FROM {named_of_rc} AS m(x)
                    WHERE (v_named->m.x->>'count')::int <= COALESCE((v_lst->>m.x)::int, 0)))"""

# A read of at most ``v_want`` due instances that leaves out what the limits hold back: a
# workflow at a time when some are held back whole or have their rate used up (their backlog
# would be walked past).
_OPEN_CANDIDATES = """IF cardinality(v_active) < cardinality(a_workflows)
            OR cardinality(v_nostart) > 0 THEN
            OPEN v_cur NO SCROLL FOR {candidates_each};
        ELSE
            OPEN v_cur NO SCROLL FOR {candidates};
        END IF"""

# Around a read of ``v_rows`` due instances: whether it stepped over more than ``PARK_AFTER`` others
# (left out as their keys are full), and then, if the claims before it did too, the queues of
# those keys are to be set aside. Every read that leaves out full keys is measured, the one after
# a full claim included: there, every key may be busy, and the read walks their whole backlog.
_WALK_FROM = """IF cardinality(v_full) > 0 THEN
            SELECT t.n INTO v_before FROM ({walked}) AS t(n);
        END IF"""
_WALK_TO = """IF cardinality(v_full) > 0 THEN
            SELECT t.n INTO v_after FROM ({walked}) AS t(n);
            IF v_after - v_before - v_rows > {park_after} THEN
                o_walked_far := true;
                IF a_may_park THEN
                    v_to_park := v_to_park || v_full;
                END IF;
            END IF;
        END IF"""

# ``{j}`` with ``{k}``'s count raised by ``{n}``.
_INC = "{j} || jsonb_build_object({k}, COALESCE(({j}->>{k})::int, 0) + {n})"

_BODY = """
CREATE FUNCTION {fn}(
    a_now float8, a_floor float8, a_workflows text[], a_limit int, a_owner text,
    a_nonce bigint, a_token bigint, a_expires float8, a_caps jsonb, a_lock_prefix text,
    a_sweep boolean, a_may_park boolean,
    OUT o_pks bigint[], OUT o_picked_at float8[], OUT o_top int, OUT o_next_ready float8,
    OUT o_hint float8, OUT o_known boolean, OUT o_limited boolean, OUT o_walked_far boolean)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $stepline$
#variable_conflict use_column
DECLARE
    v_rules jsonb; v_named jsonb; v_users jsonb; v_limited text[]; v_counted text[];
    v_named_used text[]; v_locks text[]; v_keyed text[];
    v_run jsonb := '{}'; v_krun jsonb := '{}'; v_lrun jsonb := '{}'; v_st jsonb := '{}';
    v_lst jsonb := '{}'; v_taken jsonb := '{}'; v_reopens jsonb := '{}';
    v_active text[]; v_full text[]; v_nostart text[]; v_seen bigint[] := '{}';
    v_picked bigint[] := '{}'; v_picked_at float8[] := '{}'; v_pauses bigint[] := '{}';
    v_turned float8[] := '{}'; v_to_park text[] := '{}'; v_rate_held text[] := '{}';
    v_found float8[]; v_future float8; v_filled boolean := false; v_read_all boolean := true;
    v_more boolean := false;
    v_want int; v_due int; v_rows int; v_attempt int := 0; v_before bigint; v_after bigint;
    v_wfs text[]; v_lname text; v_since float8; v_n int; v_cnt int; v_edge float8;
    v_period float8; v_t float8; v_floor_since float8; v_back_since float8; v_park json;
    v_cur refcursor; r record; d jsonb; w text; x text; v_kk text; v_cap int; v_ok boolean;
BEGIN
    o_walked_far := false;
    v_floor_since := COALESCE(a_floor, '-infinity');
    v_back_since := a_now - {floor_margin};
    SELECT COALESCE(jsonb_object_agg(name, limits::jsonb), '{}') INTO v_rules
        FROM {s}.workflows WHERE limits IS NOT NULL;
    SELECT COALESCE(jsonb_object_agg(name, jsonb_build_object('concurrency', concurrency,
            'count', CASE WHEN rate_period IS NOT NULL THEN rate_count END,
            'period', CASE WHEN rate_count IS NOT NULL THEN rate_period END)), '{}')
        INTO v_named FROM {s}.limits WHERE concurrency IS NOT NULL OR rate_count IS NOT NULL;
    v_limited := ARRAY(SELECT u.w FROM unnest(a_workflows) WITH ORDINALITY AS u(w, o)
        WHERE {fleet_wide_uw} ORDER BY u.o);
    o_limited := cardinality(v_limited) > 0;
    SELECT COALESCE(jsonb_object_agg(n.x, (SELECT COALESCE(jsonb_agg(e.key), '[]')
            FROM jsonb_each(v_rules) AS e
            WHERE COALESCE(NULLIF(e.value->'limits', 'null'), '[]') ? n.x)), '{}')
        INTO v_users
        FROM (SELECT DISTINCT x FROM unnest(v_limited) AS l(w)
            CROSS JOIN LATERAL {named_of_lw} AS m(x)) AS n(x);
    v_named_used := ARRAY(SELECT jsonb_object_keys(v_users) ORDER BY 1);
    v_counted := ARRAY(SELECT DISTINCT c FROM (SELECT unnest(v_limited) UNION ALL
        SELECT jsonb_array_elements_text(u.value) FROM jsonb_each(v_users) AS u) AS s(c));
    v_locks := ARRAY(SELECT 'w:' || c FROM unnest(v_limited) AS c)
        || ARRAY(SELECT 'l:' || c FROM unnest(v_named_used) AS c);
    {lock_limits};
    v_keyed := ARRAY(SELECT c FROM unnest(a_workflows) AS c
        WHERE v_rules->c->>'key_concurrency' IS NOT NULL);
    IF cardinality(v_keyed) > 0 THEN
        {bring_back_expired};
        IF a_sweep THEN
            {bring_back_idle};
        END IF;
    END IF;

    FOR r IN SELECT * FROM ({running}) AS t(workflow, key, n) LOOP
        d := v_rules->r.workflow;
        v_run := {inc_run};
        IF r.key IS NOT NULL AND d->>'key_concurrency' IS NOT NULL THEN
            v_kk := r.workflow || chr(31) || r.key;
            v_krun := {inc_krun_n};
        END IF;
        FOR x IN SELECT m.x FROM {named_of_d} AS m(x) WHERE v_users ? m.x LOOP
            v_lrun := {inc_lrun_n};
        END LOOP;
    END LOOP;
    FOR r IN SELECT * FROM ({live_slots}) AS t(limit_name, workflow, held, holders) LOOP
        v_cnt := r.held - CASE WHEN v_users->r.limit_name ? r.workflow THEN r.holders ELSE 0 END;
        x := r.limit_name;
        v_lrun := {inc_lrun_cnt};
    END LOOP;
    FOR r IN
        SELECT 'workflow' AS scope, c AS name, ARRAY[c] AS wfs, NULL::text AS lname,
            (v_rules->c->'rate'->>0)::int AS most, (v_rules->c->'rate'->>1)::float8 AS period
        FROM unnest(v_limited) AS c WHERE jsonb_typeof(v_rules->c->'rate') = 'array'
        UNION ALL
        SELECT 'limit', c, ARRAY(SELECT jsonb_array_elements_text(v_users->c)), c,
            (v_named->c->>'count')::int, (v_named->c->>'period')::float8
        FROM unnest(v_named_used) AS c WHERE v_named->c->>'count' IS NOT NULL
    LOOP
        v_wfs := r.wfs; v_lname := r.lname; v_n := r.most; v_since := a_now - r.period;
        SELECT t.c, t.e INTO v_cnt, v_edge FROM ({starts}) AS t(c, e);
        IF r.scope = 'workflow' THEN
            v_st := v_st || jsonb_build_object(r.name, v_cnt);
        ELSE
            v_lst := v_lst || jsonb_build_object(r.name, v_cnt);
        END IF;
        IF v_cnt >= r.most AND v_edge IS NOT NULL THEN
            v_t := v_edge + r.period;
            WHILE v_t - r.period < v_edge LOOP
                v_t := v_t + GREATEST(abs(v_t) * 2.220446049250313e-16, 1e-300);
            END LOOP;
            v_reopens := v_reopens || jsonb_build_object(r.scope || ':' || r.name, v_t);
        END IF;
    END LOOP;

    LOOP
        v_attempt := v_attempt + 1;
        v_active := {active};
        v_full := {full};
        v_nostart := {nostart};
        EXIT WHEN v_attempt > 1 AND cardinality(v_active) = 0;
        IF v_attempt > {passes} THEN
            v_read_all := false;
            EXIT;
        END IF;
        v_want := a_limit - cardinality(v_picked);
        v_due := 0;
        v_rows := 0;
        {walk_from};
        {open_candidates};
        LOOP
            FETCH v_cur INTO r;
            EXIT WHEN NOT FOUND;
            v_rows := v_rows + 1;
            v_seen := v_seen || r.pk;
            IF r.status = 'waitingForPause' THEN
                v_pauses := v_pauses || r.pk;
                CONTINUE;
            END IF;
            v_due := v_due + 1;
            w := r.workflow;
            d := v_rules->w;
            v_cap := (a_caps->>w)::int;
            v_ok := true;
            v_kk := NULL;
            IF v_cap IS NOT NULL AND COALESCE((v_taken->>w)::int, 0) >= v_cap THEN
                v_ok := false;
            ELSIF {fleet_wide_d} THEN
                IF r.key IS NOT NULL AND d->>'key_concurrency' IS NOT NULL THEN
                    v_kk := w || chr(31) || r.key;
                END IF;
                IF (d->>'concurrency')::int <= COALESCE((v_run->>w)::int, 0)
                    OR (d->>'key_concurrency')::int <= COALESCE((v_krun->>v_kk)::int, 0)
                    OR (r.starting AND (d->'rate'->>0)::int <= COALESCE((v_st->>w)::int, 0))
                THEN
                    v_ok := false;
                ELSE
                    FOR x IN SELECT m.x FROM {named_of_d} AS m(x) LOOP
                        IF (v_named->x->>'concurrency')::int <= COALESCE((v_lrun->>x)::int, 0)
                            OR (r.starting AND (v_named->x->>'count')::int
                                <= COALESCE((v_lst->>x)::int, 0))
                        THEN
                            v_ok := false;
                            EXIT;
                        END IF;
                    END LOOP;
                END IF;
                IF v_ok THEN
                    v_run := {inc_run_w};
                    IF v_kk IS NOT NULL THEN
                        v_krun := {inc_krun_1};
                    END IF;
                    IF r.starting THEN
                        v_st := {inc_st_w};
                        v_filled := v_filled
                            OR COALESCE((d->'rate'->>0)::int <= (v_st->>w)::int, false);
                    END IF;
                    FOR x IN SELECT m.x FROM {named_of_d} AS m(x) LOOP
                        v_lrun := {inc_lrun_1};
                        IF r.starting THEN
                            v_lst := {inc_lst_1};
                            v_filled := v_filled OR COALESCE(
                                (v_named->x->>'count')::int <= (v_lst->>x)::int, false);
                        END IF;
                    END LOOP;
                END IF;
            END IF;
            IF v_ok THEN
                v_taken := {inc_taken_w};
                v_picked := v_picked || r.pk;
                v_picked_at := v_picked_at || r.ready_at;
            ELSE
                v_turned := v_turned || r.ready_at;
            END IF;
        END LOOP;
        CLOSE v_cur;
        {walk_to};
        IF v_attempt = 1 THEN
            SELECT t.a, t.b, t.c, t.d INTO o_top, o_next_ready, v_future, v_rate_held
                FROM ({timers}) AS t(a, b, c, d);
        END IF;
        EXIT WHEN cardinality(v_picked) >= a_limit OR v_due < v_want;
    END LOOP;

    IF cardinality(v_picked) >= a_limit THEN
        -- Full: whether anything more is runnable, from one more row of a read that leaves out
        -- what the limits hold back with these picks. If not, the claim knows the next look.
        v_active := {active};
        IF cardinality(v_active) > 0 THEN
            v_full := {full};
            v_nostart := {nostart};
            v_want := 1;
            {walk_from};
            {open_candidates};
            FETCH v_cur INTO r;
            v_more := FOUND;
            v_rows := CASE WHEN v_more THEN 1 ELSE 0 END;
            CLOSE v_cur;
            {walk_to};
        END IF;
    END IF;
    IF cardinality(v_picked) > 0 OR cardinality(v_pauses) > 0 THEN
        {lease};
    END IF;
    IF cardinality(v_to_park) > 0 THEN
        v_park := (SELECT json_agg(json_build_object('workflow', split_part(k, chr(31), 1),
            'key', substr(k, length(split_part(k, chr(31), 1)) + 2),
            'cap', (v_rules->split_part(k, chr(31), 1)->>'key_concurrency')::int))
            FROM (SELECT DISTINCT k FROM unnest(v_to_park) AS k) AS p);
        {park};
    END IF;
    IF cardinality(v_pauses) > 0 THEN
        {bring_back_of};
    END IF;
    IF cardinality(v_picked) < a_limit OR NOT v_more THEN
        v_found := CASE WHEN cardinality(v_picked) > 0 THEN ARRAY[v_future, a_expires]
            ELSE v_future || v_turned END;
        FOREACH w IN ARRAY COALESCE(v_rate_held, '{}') LOOP
            d := v_rules->w;
            IF {fleet_wide_d} THEN
                v_found := v_found || (SELECT max(t) FROM (
                    SELECT (v_reopens->>('workflow:' || w))::float8
                    UNION ALL SELECT (v_reopens->>('limit:' || m.x))::float8
                    FROM {named_of_d} AS m(x)) AS s(t));
            END IF;
        END LOOP;
        o_hint := (SELECT min(t) FROM unnest(v_found) AS t);
    END IF;
    o_known := cardinality(v_picked) = 0 OR (v_read_all AND NOT v_filled AND NOT v_more);
    o_pks := v_picked;
    o_picked_at := v_picked_at;
END
$stepline$
"""

_PARAM = re.compile(r"%\((\w+)\)s")
_COMMON = {
    "now": "a_now",
    "floor": "a_floor",
    "workflows": "a_workflows",
    "owner": "a_owner",
    "nonce": "a_nonce",
    "token": "a_token",
    "expires": "a_expires",
    "lock_prefix": "a_lock_prefix",
}
"""The client's parameters that are the function's arguments, in every statement."""


def _with_variables(statement: str, names: Mapping[str, str]) -> str:
    """``statement`` with each ``%(name)s`` parameter replaced by the function's variable."""
    every = {**_COMMON, **names}

    def variable(match: re.Match[str]) -> str:
        return every[match.group(1)]

    return _PARAM.sub(variable, statement)


def _into(statement: str) -> str:
    """A bring-back (``... SELECT count(*) FROM back``) whose count goes into ``v_cnt``, as a
    PL/pgSQL statement must put a query's result somewhere."""
    tail = "SELECT count(*) FROM back"
    if not statement.rstrip().endswith(tail):
        raise RuntimeError("a bring-back no longer ends with its count")
    return statement.rstrip()[: -len(tail)] + "SELECT count(*) INTO v_cnt FROM back"


def _perform(statement: str) -> str:
    """A ``SELECT`` whose result is not wanted, as PL/pgSQL runs one."""
    if not statement.startswith("SELECT "):
        raise RuntimeError("expected a SELECT")
    return "PERFORM " + statement.removeprefix("SELECT ")


def _named_of(d: str) -> str:
    return _NAMED_OF.replace("{d}", d)


def _inc(j: str, k: str, n: str) -> str:
    return _INC.replace("{j}", j).replace("{k}", k).replace("{n}", n)


@dataclass(frozen=True)
class ClaimFunction:
    """The function of one schema: its qualified name, the statement that creates it, and the
    call a claim sends."""

    name: str
    """Unqualified: ``claim_under_limits_<hash>``."""
    create: str
    call: str

    @classmethod
    def for_schema(cls, schema: str) -> ClaimFunction:
        q = ClaimStatements.for_schema(schema)
        parking = ParkingStatements.for_schema(schema)
        back = {"keyed": "v_keyed", "since": "v_floor_since"}
        read = {
            "limit": "v_want",
            "seen": "v_seen",
            "active": "v_active",
            "full_keys": "v_full",
            "no_starts": "v_nostart",
        }
        parts = {
            "lock_limits": _perform(_with_variables(q.lock_limits, {"locks": "v_locks"})),
            "bring_back_expired": _into(_with_variables(parking.bring_back_expired, back)),
            "bring_back_idle": _into(_with_variables(parking.bring_back_idle, back)),
            "running": _with_variables(q.running, {"counted": "v_counted"}),
            "live_slots": _with_variables(q.live_slots, {"named": "v_named_used"}),
            "starts": _with_variables(
                q.starts,
                {"wfs": "v_wfs", "limit": "v_lname", "since": "v_since", "n": "v_n", "cap": "v_n"},
            ),
            "walked": _with_variables(q.walked, {}),
            "candidates": _with_variables(q.candidates, read),
            "candidates_each": _with_variables(q.candidates_each, read),
            "timers": _with_variables(q.timers, {"no_starts": "v_nostart"}),
            "lease": _with_variables(q.lease, {"pks": "v_picked", "pauses": "v_pauses"}),
            "park": _with_variables(parking.park, {"keys": "v_park"}),
            "bring_back_of": _into(
                _with_variables(parking.bring_back_of, {"pks": "v_pauses", "since": "v_back_since"})
            ),
            "fleet_wide_uw": fleet_wide("v_rules->u.w"),
            "fleet_wide_d": fleet_wide("d"),
            "named_of_lw": _named_of("v_rules->l.w"),
            "named_of_ru": _named_of("v_rules->u.w"),
            "named_of_rc": _named_of("v_rules->c"),
            "named_of_d": _named_of("d"),
            "capped_uw": "COALESCE((v_taken->>u.w)::int >= (a_caps->>u.w)::int, false)",
            "inc_run": _inc("v_run", "r.workflow", "r.n"),
            "inc_krun_n": _inc("v_krun", "v_kk", "r.n"),
            "inc_krun_1": _inc("v_krun", "v_kk", "1"),
            "inc_lrun_n": _inc("v_lrun", "x", "r.n"),
            "inc_lrun_cnt": _inc("v_lrun", "x", "v_cnt"),
            "inc_run_w": _inc("v_run", "w", "1"),
            "inc_st_w": _inc("v_st", "w", "1"),
            "inc_lrun_1": _inc("v_lrun", "x", "1"),
            "inc_lst_1": _inc("v_lst", "x", "1"),
            "inc_taken_w": _inc("v_taken", "w", "1"),
            "floor_margin": repr(float(FLOOR_MARGIN)),
            "park_after": str(PARK_AFTER),
            "passes": str(PASSES),
        }
        body = _BODY
        for fragment, text in (
            ("{active}", _ACTIVE),
            ("{full}", _FULL),
            ("{nostart}", _NO_STARTS),
            ("{open_candidates}", _OPEN_CANDIDATES),
            ("{walk_from}", _WALK_FROM),
            ("{walk_to}", _WALK_TO),
        ):
            body = body.replace(fragment, text)
        for marker, text in parts.items():
            body = body.replace("{" + marker + "}", text)
        body = body.replace("{s}", sql.Identifier(schema).as_string())
        digest = hashlib.blake2b(body.encode(), digest_size=6).hexdigest()
        name = f"claim_under_limits_{digest}"
        qualified = f"{sql.Identifier(schema).as_string()}.{sql.Identifier(name).as_string()}"
        create = body.replace("{fn}", qualified)
        if "%(" in create or re.search(r"\{\w+\}", create):
            raise RuntimeError("the claim function has a parameter or marker left unfilled")
        call = (
            f"SELECT * FROM {qualified}(%(now)s::float8, %(floor)s::float8,"
            " %(workflows)s::text[], %(limit)s::int, %(owner)s::text, %(nonce)s::bigint,"
            " %(token)s::bigint, %(expires)s::float8, %(caps)s::jsonb, %(lock_prefix)s::text,"
            " %(sweep)s::boolean, %(may_park)s::boolean)"
        )
        return cls(name, create, call)
