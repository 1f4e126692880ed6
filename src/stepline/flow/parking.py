"""Busy keys' queues set aside, and the one rule every write that frees a slot follows.

A workflow with ``key_concurrency`` may have a long queue behind a key that runs all it may. A
claim reading due instances in claim order would walk that queue at every claim, to take none
of it, so a claim that finds it sets it aside: ``ready_at`` is cleared (the instance leaves the
ready indexes) and ``held_ready_at`` keeps its place in line. Nothing else changes: it is still
``queued``, and ``describe`` says which key holds it.

**The rule for writes.** Whatever stops an instance running frees its slots, in the same
transaction or right after it: its key's first in line comes back (priority, then place in line,
then pk), and the instance parked longest on each named limit its workflow lists is woken. The
writes: a finish (complete, errored, terminated, suspended to sleep or wait), a release, a pause
carried out, a control action that fences a running instance out (terminate, pause, restart), a
delete of one that ran. Each store frees through one function, called by every such write
(SQLite ``flow.freed``; PostgreSQL the ``freed_*`` statements of ``parking``), and the contract
suite checks each write (``tests/contract/test_parking.py``). What no write brings back, a
claim does: the keys whose running instances all lost their lease (at every claim), and every
:data:`RECHECK` seconds the keys that run nothing at all (a connection lost between a write
and its bring-back).

What comes back is due from its place in line or from :func:`~stepline.flow.floor.due_since`,
whichever is later, so that no claim floor hides it.

**When to set aside** (:class:`SetAside`). Setting aside writes every instance of the queue once,
and bringing back writes one at a time; walking it costs a read of each at every claim. On
SQLite a walk happens under the write lock that every writer waits for, so a claim sets aside
each instance it reads behind a full key at once. On PostgreSQL a walk is an index scan that
blocks nobody, and a row written leaves a dead entry behind in each index, so claims set queues
aside only when their reads keep stepping over many instances behind full keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

RECHECK = 60.0
"""How often, at most, a store looks for keys whose slots freed with no write bringing back
their first in line (SQLite: a recheck time on each key's first in line, on multiples of it, so
that those of many keys come due in one claim; PostgreSQL: a look at every key with instances
set aside)."""


def recheck_time(now: float) -> float:
    """When instances set aside at ``now`` are read again though nothing brought them back:
    the second multiple of :data:`RECHECK` after ``now``."""
    return (math.floor(now / RECHECK) + 2) * RECHECK


@dataclass
class SetAside:
    """When a store's claims set the queues of full keys aside: once reads of due instances
    stepped over more than ``over`` instances behind full keys in ``claims`` claims in a row
    (of one set of workflows), the last of them does."""

    over: int
    claims: int
    _streaks: dict[tuple[str, ...], int] = field(default_factory=dict)

    def may(self, workflows: tuple[str, ...]) -> bool:
        """Whether the next claim of ``workflows`` sets aside if its reads step over many."""
        return self._streaks.get(workflows, 0) >= self.claims - 1

    def stepped_over(self, count: int) -> bool:
        """Whether a read that stepped over ``count`` instances behind full keys counts."""
        return count > self.over

    def claimed(self, workflows: tuple[str, ...], stepped_far: bool) -> None:
        """A claim of ``workflows`` ended; whether a read of it stepped over many."""
        self._streaks[workflows] = self._streaks.get(workflows, 0) + 1 if stepped_far else 0


SQLITE_SET_ASIDE_OVER = 0
"""SQLite: every instance a claim reads behind a full key is set aside."""
POSTGRES_SET_ASIDE_OVER = 1000
"""PostgreSQL: the instances a read may step over behind full keys before it counts; below
about this many index entries a read, setting aside costs more row writes than it saves."""
POSTGRES_SET_ASIDE_CLAIMS = 3
"""PostgreSQL: claims in a row that must step over many (one long read alone may have stepped
over rows that other claims held locked a moment)."""
