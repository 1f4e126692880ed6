"""The SQLite store's statements of flow control (executed by ``flow``): the limits as
registered, what runs and what started under them, instances parked behind a busy key and
woken, and the slots of named limits that steps take."""

from __future__ import annotations

from .sql import HELD, qmarks

# -- flow control ----------------------------------------------------------------------------

WORKFLOW_LIMITS = "SELECT name, limits FROM workflows WHERE limits IS NOT NULL"
NAMED_LIMITS = "SELECT name, concurrency, rate_count, rate_period FROM limits"


def running(n_workflows: int) -> str:
    """How many instances run (a live lease) per workflow and key. Parameters: the workflows,
    now. (``instances_status`` finds them; only those running or pausing are read.)"""
    return (
        f"SELECT workflow, key, count(*) FROM instances WHERE workflow IN ({qmarks(n_workflows)})"
        " AND status IN ('running', 'waitingForPause') AND lease_expires_at > ?"
        " GROUP BY workflow, key"
    )


# An instance of a busy key is set aside (parked) by the claim that finds its key full: its
# place in line goes to ``held_ready_at`` and ``ready_at`` to NULL, so that no claim walks the
# key's backlog again. What frees a slot of the key brings back the first in line. The first in
# line alone has a recheck time as its ``ready_at``, so that a slot freed some other way is
# found, and a long line is not read again at every recheck.


def park_behind_keys(n: int) -> str:
    """Set ``n`` due queued instances aside behind their busy keys (one that was already
    keeps its place in line). Parameters: the pks."""
    return (
        "UPDATE instances SET held_ready_at = COALESCE(held_ready_at, ready_at), ready_at = NULL"
        f" WHERE pk IN ({qmarks(n)})"
    )


_FIRST_IN_LINE = (
    "SELECT pk FROM instances INDEXED BY instances_key_parked"
    " WHERE workflow = ? AND key = ? AND held_ready_at IS NOT NULL"
    " ORDER BY priority, held_ready_at, pk LIMIT 1"
)
UNPARK_NEXT = (
    "UPDATE instances SET ready_at = held_ready_at, held_ready_at = NULL"
    f" WHERE pk = ({_FIRST_IN_LINE})"
)
"""Bring back the first in line of a key. Parameters: the workflow, the key."""
RECHECK_FIRST = (
    f"UPDATE instances SET ready_at = ? WHERE pk = ({_FIRST_IN_LINE}) AND ready_at IS NULL"
)
"""Give the first in line of a key a recheck time, unless it has one. Parameters: the time,
the workflow, the key."""
UNPARK_WORKFLOW = (
    "UPDATE instances SET ready_at = held_ready_at, held_ready_at = NULL"
    " WHERE workflow = ? AND held_ready_at IS NOT NULL"
)
"""Bring back every instance of a workflow set aside (its limits changed)."""
KEY_OF = "SELECT workflow, key FROM instances WHERE pk = ?"


def expired_keys(n_workflows: int) -> str:
    """The keys of the workflows with instances set aside that run nothing but instances whose
    lease expired: their first in line comes back, to run in ``ready_at`` order with those, as
    without parking. Parameters: the workflows, now, now. (Named indexes: the planner would
    otherwise scan every instance.)"""
    return (
        "SELECT DISTINCT i.workflow, i.key FROM instances i INDEXED BY instances_status"
        f" WHERE i.workflow IN ({qmarks(n_workflows)})"
        " AND i.status IN ('running', 'waitingForPause') AND i.lease_expires_at <= ?"
        " AND i.key IS NOT NULL AND EXISTS (SELECT 1 FROM instances p INDEXED BY"
        " instances_key_parked WHERE p.workflow = i.workflow AND p.key = i.key"
        " AND p.held_ready_at IS NOT NULL) AND NOT EXISTS (SELECT 1 FROM instances r"
        " INDEXED BY instances_status WHERE r.workflow = i.workflow AND r.key = i.key"
        " AND r.status IN ('running', 'waitingForPause') AND r.lease_expires_at > ?)"
    )


def running_by_worker(n_workflows: int) -> str:
    """How many instances run (a live lease) per worker and workflow. Parameters: the
    workflows, now. (``instances_status``, as :func:`running`.)"""
    return (
        f"SELECT lease_owner, workflow, count(*) FROM instances"
        f" WHERE workflow IN ({qmarks(n_workflows)})"
        " AND status IN ('running', 'waitingForPause') AND lease_expires_at > ?"
        " GROUP BY lease_owner, workflow"
    )


def recent_starts(n_workflows: int) -> str:
    """The latest first starts of the workflows after a time, latest first (``instances_started``).
    Parameters: the workflows, the time, how many."""
    return (
        f"SELECT started_at FROM instances WHERE workflow IN ({qmarks(n_workflows)})"
        " AND started_at > ? ORDER BY started_at DESC LIMIT ?"
    )


def count_starts(n_workflows: int) -> str:
    """How many first starts the workflows made after a time. Parameters: the workflows, the
    time."""
    return (
        f"SELECT count(*) FROM instances WHERE workflow IN ({qmarks(n_workflows)})"
        " AND started_at > ?"
    )


# -- named limits on steps -------------------------------------------------------------------

LIMIT_BY_NAME = "SELECT concurrency, rate_count, rate_period FROM limits WHERE name = ?"
FENCE_LIMIT = f"SELECT workflow, lease_expires_at FROM instances {HELD}"
SLOT_HELD = (
    "SELECT 1 FROM limit_slots WHERE limit_name = ? AND instance_pk = ? AND step = ?"
    " AND lease_token = ?"
)
OWN_SLOTS = (
    "SELECT count(*) FROM limit_slots WHERE limit_name = ? AND instance_pk = ? AND lease_token = ?"
)
# A slot whose instance no longer holds the lease it was taken under (its holder ended,
# released or was fenced out); one whose lease merely expired is not counted, but kept.
DELETE_DEAD_SLOTS = (
    "DELETE FROM limit_slots WHERE limit_name = ? AND NOT EXISTS (SELECT 1 FROM instances i"
    " WHERE i.pk = limit_slots.instance_pk AND i.lease_token = limit_slots.lease_token"
    " AND i.lease_owner IS NOT NULL)"
)
LIVE_SLOTS = (
    "SELECT i.workflow, count(*), count(DISTINCT s.instance_pk) FROM limit_slots s"
    " JOIN instances i ON i.pk = s.instance_pk AND i.lease_token = s.lease_token"
    " AND i.status IN ('running', 'waitingForPause') AND i.lease_expires_at > ?"
    " WHERE s.limit_name = ? GROUP BY i.workflow"
)
"""Live slots of a limit by their instances' workflow: how many, held by how many instances.
Parameters: now, the limit."""
TAKE_SLOT = (
    "INSERT OR REPLACE INTO limit_slots (limit_name, instance_pk, step, lease_token,"
    " acquired_at) VALUES (?, ?, ?, ?, ?)"
)
LOG_LIMIT_START = "INSERT INTO limit_starts (limit_name, at) VALUES (?, ?)"
PRUNE_LIMIT_STARTS = "DELETE FROM limit_starts WHERE limit_name = ? AND at <= ?"
RECENT_LIMIT_STARTS = (
    "SELECT at FROM limit_starts WHERE limit_name = ? AND at > ? ORDER BY at DESC LIMIT ?"
)
COUNT_LIMIT_STARTS = "SELECT count(*) FROM limit_starts WHERE limit_name = ? AND at > ?"
RELEASE_SLOT = (
    "DELETE FROM limit_slots WHERE limit_name = ? AND instance_pk = ? AND step = ?"
    " AND lease_token = ?"
)
WAKE_PARKED = (
    "UPDATE instances SET ready_at = ? WHERE pk = (SELECT pk FROM instances"
    " WHERE parked_on = ? AND ready_at > ? AND status = 'waiting' ORDER BY ready_at LIMIT 1)"
)
"""Make the instance parked on a limit that would wake first ready now. Parameters: now, the
limit, now."""
WAKE_PARKED_ON_LISTED = (
    "UPDATE instances SET ready_at = ? WHERE pk IN (SELECT (SELECT pk FROM instances"
    " WHERE parked_on = l.value AND ready_at > ? AND status = 'waiting' AND pk <> ?"
    " ORDER BY ready_at LIMIT 1) FROM workflows w, json_each(w.limits, '$.limits') l"
    " JOIN limits n ON n.name = l.value AND n.concurrency IS NOT NULL"
    " WHERE w.name = ? AND l.value IS NOT ?)"
)
"""For each named limit with a concurrency that a workflow lists, what :data:`WAKE_PARKED`
does: one of its instances stopped running, which frees a slot of each. Not the instance
itself, nor on a limit it parks on now: it was refused a slot there, so what it frees leaves
no room. Parameters: now, now, the instance, the workflow, the limit it parks on (or None)."""
