"""The claim floor: where in the ``ready_at`` index a worker's claims start reading, on
PostgreSQL, and the rule that every write of ``ready_at`` follows for it.

Every change of an instance's state rewrites its row and changes ``ready_at``, so each leaves a
dead entry in that index, at or below the live ones, until a VACUUM removes it. A claim reading
the index from its low end walks all of them, which dominates its cost once many instances have
changed since the last VACUUM. So a claim that came back short (it read the earliest live timer)
sets the floor of the next claims a margin below that timer; a full claim (a backlog, or a busy
worker filling its free slots) picked every live row below its first pick that it could lock, so
the floor moves to a margin below that pick. Without that, the claims of a backlog kept the floor
of its start and each walked the dead entries of every instance claimed since.

**The rule for writes.** A write sets ``ready_at`` to its own clock or later (now, a wake-up
time, a lease expiry); a write that makes an instance due at an earlier time (a busy key's next
in line brought back to its place in line) makes it due at :func:`due_since` at the earliest.
A runnable row that another transaction held locked during a claim without changing its
``ready_at`` can still be left below the floor: every :data:`FLOOR_RECHECK` seconds, or if the
clock went back, a claim reads from the low end again.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOOR_MARGIN = 2.0
"""Seconds below the earliest timer (or the claim's time) that the next claim reads from: room
for a write whose time was taken a little before it committed, and for other processes' clocks."""
FLOOR_RECHECK = 10.0
"""Seconds between claims that read the ``ready_at`` index from its low end, for any straggler
below the floor (a write that took longer than the margin to commit)."""


def due_since(now: float) -> float:
    """The earliest ``ready_at`` a write at ``now`` may give an instance it makes due."""
    return now - FLOOR_MARGIN


@dataclass(frozen=True)
class ClaimFloor:
    """Where the claims of one set of workflows read the ``ready_at`` index from."""

    at: float
    measured: float
    """The store-clock time of the claim that set it."""
    rechecked: float
    """When a claim last read the index from its low end."""

    def holds(self, now: float) -> bool:
        return self.measured <= now < self.rechecked + FLOOR_RECHECK

    @classmethod
    def after(cls, previous: ClaimFloor | None, earliest: float, now: float) -> ClaimFloor:
        """The floor after a claim at ``now`` whose earliest live row (or timer) was
        ``earliest``; ``previous``: the floor it read from (None: the low end)."""
        rechecked = now if previous is None else previous.rechecked
        return cls(earliest - FLOOR_MARGIN, now, rechecked)
