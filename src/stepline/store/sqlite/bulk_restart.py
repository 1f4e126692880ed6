"""A bulk job's restart of a batch of instances, set-based: the batch's instances are checked
and restarted in a few statements, whatever its size, in the bulk job's write transaction.

Each instance gets what ``transactions.control`` does for a restart (the version kept), and is
skipped for what it would refuse, before anything is written: an instance gone since the batch
was read, a finished instance whose dedup key an unfinished one holds, a restart from a step it
never ran. The batch's pks travel as one JSON array parameter (``json_each``): no cap on
parameters, and one statement text whatever the batch's size.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...errors import DuplicateInstanceError, InstanceNotFoundError

_FINISHED = "('complete', 'errored', 'terminated')"

# Per instance: an unfinished instance holding its dedup key if it is finished (one is enough
# to refuse), and the seq of the step it restarts from (none asked: NULL).
_CHECK = f"""
    SELECT i.pk, h.dedup_key, h.id, s.seq FROM instances i
    LEFT JOIN instances h ON i.status IN {_FINISHED} AND i.dedup_key IS NOT NULL
        AND h.pk = (SELECT o.pk FROM instances o WHERE o.workflow = i.workflow
            AND o.dedup_key = i.dedup_key AND o.status NOT IN {_FINISHED} LIMIT 1)
    LEFT JOIN steps s ON s.instance_pk = i.pk AND s.name = ? AND s.count = ?
    WHERE i.pk IN (SELECT value FROM json_each(?))
"""
_PKS = "SELECT value FROM json_each(?1)"
# The seq of the step an instance restarts from (?2 its name, ?3 its count).
_FROM_SEQ = (
    "(SELECT x.seq FROM steps x WHERE x.instance_pk = {t}.instance_pk AND x.name = ?2"
    " AND x.count = ?3)"
)
_UNCONSUME_ALL = f"""
    UPDATE events SET consumed_by = NULL
    WHERE instance_pk IN ({_PKS}) AND consumed_by IS NOT NULL
"""
# The events that the steps about to go had consumed (label "name-count").
_UNCONSUME_FROM = f"""
    UPDATE events SET consumed_by = NULL
    WHERE instance_pk IN ({_PKS}) AND consumed_by IN (
        SELECT s.name || '-' || s.count FROM steps s WHERE s.instance_pk = events.instance_pk
        AND s.seq >= {_FROM_SEQ.format(t="events")}
    )
"""
_DELETE_ALL = f"DELETE FROM steps WHERE instance_pk IN ({_PKS})"
_DELETE_FROM = f"""
    DELETE FROM steps WHERE instance_pk IN ({_PKS}) AND seq >= {_FROM_SEQ.format(t="steps")}
"""
_RESTART = """
    UPDATE instances SET status = 'queued', output = NULL, error = NULL, rollback = NULL,
        control = NULL, ready_at = ?2, held_ready_at = NULL, lease_token = lease_token + 1,
        lease_owner = NULL, lease_expires_at = NULL, started_at = NULL, ended_at = NULL,
        updated_at = ?2
    WHERE pk IN (SELECT value FROM json_each(?1))
"""


def restart_batch(
    c: sqlite3.Connection,
    rows: Sequence[tuple[int, str, str]],
    from_step: tuple[str, int] | None,
    now: float,
) -> tuple[list[tuple[str, str]], list[str]]:
    """Restart the instances ``rows`` (pk, workflow, id) from ``from_step`` (name, count) if
    given: those restarted, and ``workflow/id: reason`` of each skipped, in pk order."""
    acted: list[tuple[str, str]] = []
    skipped: list[str] = []
    if not rows:
        return acted, skipped
    name, count = from_step if from_step is not None else (None, None)
    pks = json.dumps([pk for pk, _, _ in rows])
    checks = {row[0]: row[1:] for row in c.execute(_CHECK, (name, count, pks))}
    targets: list[int] = []
    for pk, workflow, instance_id in rows:
        refusal = _refusal(workflow, instance_id, checks.get(pk), from_step)
        if refusal is not None:
            skipped.append(f"{workflow}/{instance_id}: {refusal}")
            continue
        targets.append(pk)
        acted.append((workflow, instance_id))
    if targets:
        given = json.dumps(targets)
        # Events first: the labels they were consumed by are the steps about to go.
        if from_step is None:
            c.execute(_UNCONSUME_ALL, (given,))
            c.execute(_DELETE_ALL, (given,))
        else:
            c.execute(_UNCONSUME_FROM, (given, name, count))
            c.execute(_DELETE_FROM, (given, name, count))
        c.execute(_RESTART, (given, now))
    return acted, skipped


def _refusal(
    workflow: str,
    instance_id: str,
    check: tuple[str | None, str | None, int | None] | None,
    from_step: tuple[str, int] | None,
) -> Exception | None:
    """What the single restart would raise for this instance, in its order, or None."""
    if check is None:
        return InstanceNotFoundError(workflow, instance_id)
    dedup_key, holder, seq = check
    if dedup_key is not None and holder is not None:
        return DuplicateInstanceError(workflow, dedup_key, holder)
    if from_step is not None and seq is None:
        name, count = from_step
        return ValueError(f"instance has no recorded step {name!r} (count {count}) to restart from")
    return None
