"""A bulk job's restart of a batch of instances, set-based: the batch's instances are locked,
checked and restarted in a few statements, whatever its size, in the bulk job's transaction.

Each instance gets what :meth:`InstanceWrites.control_in` does for a restart (the version
kept), and is skipped for what it would refuse, before anything is written: an instance gone
since the batch was read, a finished instance whose dedup key an unfinished one holds, a
restart from a step it never ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import DuplicateInstanceError, InstanceNotFoundError
from .pools import Conn
from .sql import render

_FINISHED = "('complete', 'errored', 'terminated')"

_TEMPLATES = {
    # In pk order, as every batch locks them: two batches never wait on each other in a cycle.
    "lock": """
        SELECT pk FROM {s}.instances WHERE pk = ANY(%(pks)s::bigint[]) ORDER BY pk FOR UPDATE
    """,
    # Per instance: the unfinished instance holding its dedup key if it is finished (one is
    # enough to refuse), and the seq of the step it restarts from (none asked: NULL).
    "check": f"""
        SELECT i.pk, h.dedup_key, h.id, s.seq FROM {{s}}.instances i
        LEFT JOIN LATERAL (
            SELECT o.dedup_key, o.id FROM {{s}}.instances o
            WHERE o.workflow = i.workflow AND o.dedup_key = i.dedup_key AND o.pk <> i.pk
                AND o.status NOT IN {_FINISHED}
            LIMIT 1
        ) AS h ON i.status IN {_FINISHED}
        LEFT JOIN {{s}}.steps s
            ON s.instance_pk = i.pk AND s.name = %(name)s AND s.count = %(count)s
        WHERE i.pk = ANY(%(pks)s::bigint[])
    """,
    # seq NULL: every step goes and every event is unconsumed; else the steps from seq on go,
    # and the events those steps had consumed (label "name-count") are unconsumed.
    "restart": """
        WITH target AS (
            SELECT * FROM unnest(%(pks)s::bigint[], %(seqs)s::bigint[]) AS t(pk, seq)
        ), gone AS (
            DELETE FROM {s}.steps s USING target t
            WHERE s.instance_pk = t.pk AND (t.seq IS NULL OR s.seq >= t.seq)
            RETURNING s.instance_pk, s.name || '-' || s.count AS label
        ), unconsumed AS (
            UPDATE {s}.events e SET consumed_by = NULL FROM target t
            WHERE e.instance_pk = t.pk AND e.consumed_by IS NOT NULL AND (t.seq IS NULL
                OR e.consumed_by IN (SELECT g.label FROM gone g WHERE g.instance_pk = t.pk))
        )
        UPDATE {s}.instances SET status = 'queued', output = NULL, error = NULL,
            rollback = NULL, control = NULL, ready_at = %(now)s, held_ready_at = NULL,
            lease_token = lease_token + 1, lease_owner = NULL, lease_expires_at = NULL,
            started_at = NULL, ended_at = NULL, updated_at = %(now)s
        WHERE pk IN (SELECT pk FROM target)
    """,
}


@dataclass
class Restarted:
    """What a batch's restart did: the instances restarted, and why each other was skipped."""

    acted: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """``workflow/id: reason`` of each instance skipped, in pk order."""


class BulkRestart:
    """The statements of one schema."""

    def __init__(self, schema: str) -> None:
        self._q = render(_TEMPLATES, schema)

    async def run(
        self,
        conn: Conn,
        rows: Sequence[tuple[int, str, str]],
        from_step: tuple[str, int] | None,
        now: float,
    ) -> Restarted:
        """Restart the instances ``rows`` (pk, workflow, id) in the caller's transaction, from
        ``from_step`` (name, count) if given."""
        done = Restarted()
        if not rows:
            return done
        pks = [pk for pk, _, _ in rows]
        cur = await conn.execute(self._q["lock"], {"pks": pks})
        present = {pk for (pk,) in await cur.fetchall()}
        name, count = from_step if from_step is not None else (None, None)
        cur = await conn.execute(self._q["check"], {"pks": pks, "name": name, "count": count})
        checks = {row[0]: row[1:] for row in await cur.fetchall()}
        targets: list[tuple[int, int | None]] = []
        for pk, workflow, instance_id in rows:
            refusal = _refusal(workflow, instance_id, pk in present, checks.get(pk), from_step)
            if refusal is not None:
                done.skipped.append(f"{workflow}/{instance_id}: {refusal}")
                continue
            seq = checks[pk][2] if from_step is not None else None
            targets.append((pk, seq))
            done.acted.append((workflow, instance_id))
        if targets:
            await conn.execute(
                self._q["restart"],
                {"pks": [t[0] for t in targets], "seqs": [t[1] for t in targets], "now": now},
            )
        return done


def _refusal(
    workflow: str,
    instance_id: str,
    present: bool,
    check: tuple[str | None, str | None, int | None] | None,
    from_step: tuple[str, int] | None,
) -> Exception | None:
    """What the single restart would raise for this instance, in its order, or None."""
    if not present or check is None:
        return InstanceNotFoundError(workflow, instance_id)
    dedup_key, holder, seq = check
    if dedup_key is not None and holder is not None:
        return DuplicateInstanceError(workflow, dedup_key, holder)
    if from_step is not None and seq is None:
        name, count = from_step
        return ValueError(f"instance has no recorded step {name!r} (count {count}) to restart from")
    return None
