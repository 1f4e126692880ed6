"""The PostgreSQL store's sends of updates: ``MessageStore.send_update``, one statement
autocommitted, and ``send_update_and_claim``, the same statement leasing the instance it woke
when it can run at once, with the history read after it, in one transaction sent in one round
trip (as a claim is)."""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from typing import Any

from ...errors import IllegalStateError, InstanceNotFoundError, StoreError
from ...records import FINISHED_STATUSES
from .._rows import update_from_row
from ..types import UPDATE_EVENT, Claim, Routing, UpdateRecord, new_lease_token
from .claim import claim_with_history, routes_params
from .claim_sql import HISTORY, LEASE_SET, ROUTED, fleet_wide
from .db import Database
from .notes import Notes
from .pools import Conn
from .sql import render

_SEND_TRIES = 5
"""Runs of the send before giving up on a row it neither inserted nor sees (one more than the
first only after a concurrent send of the same update id)."""
UPDATE_COLUMNS = "u.update_id, u.name, u.status, u.reply, u.error, u.created_at, u.ended_at"

_TEMPLATES = {
    # One statement. The instance's row is locked first (a concurrent finish is waited for, and
    # its status read as committed); the update's row goes in before its event (ON CONFLICT: of
    # two sends of one update id, one inserts), and the event takes the number the update's row
    # was given. A concurrent send of the same id that committed while the lock was awaited is
    # not in this statement's snapshot: nothing is inserted, nothing is returned as old, and
    # the caller runs the statement again. With ``take``, an instance that can run at once
    # (``send_update_and_claim``) is leased instead of woken, and the notification tells other
    # processes' workers that nothing became runnable.
    "send": """
        WITH inst AS (
            SELECT pk, status, workflow, version, patches,
                status IN ('queued', 'waiting') AND (status = 'waiting' OR ready_at <= %(now)s)
                AND (lease_owner IS NULL OR lease_expires_at <= %(now)s) AND control IS NULL
                AND (deadline_at IS NULL OR deadline_at > %(now)s) AS free
            FROM {s}.instances WHERE workflow = %(workflow)s AND id = %(id)s
            FOR UPDATE
        ), old AS (
            SELECT """
    + UPDATE_COLUMNS
    + """ FROM {s}.updates u JOIN inst ON u.instance_pk = inst.pk
            WHERE u.update_id = %(update_id)s
        ), up AS (
            INSERT INTO {s}.updates (instance_pk, update_id, name, event_pk, status, created_at)
            SELECT pk, %(update_id)s, %(name)s,
                nextval(pg_get_serial_sequence('{s}.events', 'pk')), 'pending', %(now)s
            FROM inst
            WHERE status NOT IN ('complete', 'errored', 'terminated')
                AND NOT EXISTS (SELECT 1 FROM old)
            ON CONFLICT (instance_pk, update_id) DO NOTHING
            RETURNING instance_pk, event_pk
        ), ev AS (
            INSERT INTO {s}.events (pk, instance_pk, type, payload, created_at)
            SELECT event_pk, instance_pk, %(type)s, %(payload)s, %(now)s FROM up
            RETURNING pk, instance_pk
        ), take AS (
            SELECT COALESCE(%(take)s::boolean AND free AND {routed} AND NOT EXISTS (
                SELECT 1 FROM {s}.workflows w WHERE w.name = inst.workflow AND {fleet_wide}
            ), false) AS yes
            FROM inst WHERE EXISTS (SELECT 1 FROM ev)
        ), woke AS (
            UPDATE {s}.instances SET event_seq = event_seq + 1,
                ready_at = CASE WHEN status = 'waiting' THEN %(now)s ELSE ready_at END
            WHERE pk IN (SELECT instance_pk FROM ev) AND NOT (SELECT yes FROM take)
        ), leased AS (
            UPDATE {s}.instances {lease_set}, event_seq = event_seq + 1
            WHERE pk IN (SELECT instance_pk FROM ev) AND (SELECT yes FROM take)
        ), note AS (
            SELECT pg_notify(%(channel)s, CASE WHEN (SELECT yes FROM take) THEN %(taken_note)s
                ELSE %(note)s END) FROM ev
        )
        SELECT inst.status, (SELECT count(*) FROM note), old.* FROM inst LEFT JOIN old ON true
    """,
    # After the send, in its transaction: the instance it leased, with its history. Not read by
    # the send itself: its reads see the snapshot taken before it waited for the instance's
    # lock, which may miss an event committed meanwhile (see ``claim_sql``'s
    # ``claimed_histories``).
    "leased": "SELECT i.*, "
    + HISTORY
    + """ FROM (
            SELECT {icols}, lease_token, control, event_seq FROM {s}.instances
            WHERE workflow = %(workflow)s AND id = %(id)s AND lease_owner = %(owner)s
                AND lease_token = %(token)s
        ) AS i
    """,
}


@functools.cache
def _statements(schema: str) -> dict[str, str]:
    expanded = {
        name: text.replace("{routed}", ROUTED)
        .replace("{lease_set}", LEASE_SET)
        .replace("{fleet_wide}", fleet_wide("w.limits::jsonb"))
        for name, text in _TEMPLATES.items()
    }
    return render(expanded, schema)


@dataclass(frozen=True)
class Taker:
    """Who a send that claims leases the instance to, and the routing of its worker."""

    owner: str
    lease_seconds: float
    routing: Routing | None


async def send(
    db: Database,
    schema: str,
    notes: Notes,
    workflow: str,
    instance_id: str,
    update: tuple[str, str, str],
    now: float,
    taker: Taker | None,
) -> tuple[UpdateRecord, Claim | None]:
    """Send the update ``(update_id, name, payload)`` at ``now``; with ``taker``, lease the
    instance to it if it can run at once. Safe to repeat: a retry after a lost reply finds the
    update it recorded, and the lease under the same token."""
    update_id, name, payload = update
    sql = _statements(schema)
    params: dict[str, Any] = {
        "workflow": workflow,
        "id": instance_id,
        "update_id": update_id,
        "name": name,
        "type": UPDATE_EVENT,
        "payload": payload,
        "now": now,
        "channel": notes.channel,
        "note": notes.note(workflow, instance_id),
        "taken_note": notes.note(workflow, instance_id, idle=True),
        "take": taker is not None,
        "owner": None if taker is None else taker.owner,
        "token": new_lease_token(),
        "nonce": secrets.randbits(62),
        "expires": now + (0.0 if taker is None else taker.lease_seconds),
        **routes_params(None if taker is None else taker.routing),
    }

    async def alone(conn: Conn) -> tuple[list[Any], list[Any]]:
        cur = await conn.execute(sql["send"], params)
        return await cur.fetchall(), []

    async def claiming(conn: Conn) -> tuple[list[Any], list[Any]]:
        async with conn.pipeline():
            await conn.execute("BEGIN")
            sent = conn.cursor()
            await sent.execute(sql["send"], params)
            leased = conn.cursor()
            await leased.execute(sql["leased"], params)
            await conn.execute("COMMIT")
        return await sent.fetchall(), await leased.fetchall()

    what = f"sending an update to {instance_id!r}"
    for _ in range(_SEND_TRIES):
        rows, leased = await db.retrying(what, alone if taker is None else claiming)
        if not rows:
            raise InstanceNotFoundError(workflow, instance_id)
        status, sent, *old = rows[0]
        claim = claim_with_history(leased[0], params["owner"]) if leased else None
        if old[0] is not None:
            return update_from_row(old, status), claim
        if sent:
            return UpdateRecord(update_id, name, "pending", None, None, now, None, status), claim
        if status in FINISHED_STATUSES:
            raise IllegalStateError(workflow, instance_id, status, "send an update to")
        # A concurrent send of this update id committed after this statement's snapshot:
        # the next run sees it.
    raise StoreError(f"PostgreSQL: {what}: the update neither recorded nor found")
