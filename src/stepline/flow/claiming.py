"""One claim's decisions, apart from how a store reads and writes: which due instances it takes,
which it holds back and why, when to read again, and when the worker should look next.

A store reads the due instances of the claim's workflows in claim order (lowest priority, then
earliest ``ready_at``, then lowest pk), leaving out in its SQL what :meth:`ClaimSession.
leaves_out` says the limits hold back, and offers each row it read (:meth:`ClaimSession.offer`).
The session admits it by the rules (``admission``), carries out a pause pending instead, or
holds it back; a row held back because what the claim took filled a key or a limit changes
what the next read may leave out (``Offer.CHANGED``): a store that reads row by row reads again
from there. After a read the store asks :meth:`ClaimSession.read_more`; then it leases
:attr:`ClaimSession.taken`, carries out :attr:`ClaimSession.pauses`, and asks
:meth:`ClaimSession.next_look` when the worker should look again (``Claimed.wakeup``).

The session reads no clock and no database: the SQLite store runs it under its write lock, the
PostgreSQL store over a few pipelined round trips under advisory locks; both run these rules."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .admission import Admission, Held
from .rules import Rules, Usage


@dataclass(frozen=True, slots=True)
class Due:
    """A due instance as a store's read offers it to a claim."""

    pk: int
    workflow: str
    key: str | None
    ready_at: float
    starting: bool
    """Whether the claim would be its first start (a rate counts first starts)."""
    queued: bool
    """Whether it waits to start or to run again after a restart (may be set aside behind a
    busy key); not one woken from a sleep, say."""
    pausing: bool = False
    """A pause pending whose lease expired: the claim pauses it, whatever the limits."""


class Offer(enum.Enum):
    """What a claim did with a due instance offered to it."""

    TAKEN = "taken"
    PAUSED = "paused"
    HELD = "held"
    """Held back; what a read may leave out is unchanged."""
    CHANGED = "changed"
    """Held back, by a key or a limit that what the claim took filled: a read that leaves out
    more than before may follow (:meth:`ClaimSession.leaves_out`)."""


@dataclass(frozen=True, slots=True)
class NextLook:
    """When the worker that claimed should look for runnable instances again, if the claim
    could tell: ``at`` (None: no timer at all, only a notification or a poll brings work)."""

    at: float | None


class ClaimSession:
    """The decisions of one claim of at most ``limit`` instances of ``workflows`` under
    ``rules``, given their ``usage`` read under the limits' locks and the worker's ``caps``
    (its room of each capped workflow; None: no cap).

    ``reads``: how many reads of due instances the claim makes at most (None: as many as
    needed); a claim that stops before the end of what is due cannot tell the next look."""

    def __init__(
        self,
        rules: Rules,
        usage: Usage,
        workflows: Sequence[str],
        limit: int,
        caps: Mapping[str, int] | None = None,
        *,
        reads: int | None = None,
    ) -> None:
        self.rules = rules
        self.workflows = tuple(workflows)
        self.limit = limit
        limited = any(rules.limited(name) for name in workflows)
        self.admission: Admission | None = (
            Admission(rules, usage, caps) if limited or caps else None
        )
        self._usage = usage
        self._reads_left = reads
        self.taken: list[Due] = []
        self.pauses: list[int] = []
        self.behind_full_keys: dict[int, tuple[str, str]] = {}
        """The queued instances it held back because their key runs all it may: pk ->
        (workflow, key). A store may set them aside (``parking``)."""
        self.read_all = True
        """Whether its reads reached the end of what is due (none was cut short by ``reads``)."""
        self._leaves_out = self._held()

    @property
    def limited(self) -> bool:
        """Whether limits or caps apply (else every due instance is taken)."""
        return self.admission is not None

    @property
    def remaining(self) -> int:
        return self.limit - len(self.taken)

    @property
    def full(self) -> bool:
        return len(self.taken) >= self.limit

    def leaves_out(self) -> Held:
        """What a read of due instances may leave out now: it would be held back. (The next
        :meth:`offer` that holds an instance back compares with this.)"""
        self._leaves_out = self._held()
        return self._leaves_out

    def offer(self, due: Due) -> Offer:
        """Decide about one due instance, read in claim order after those offered before."""
        if due.pausing:
            self.pauses.append(due.pk)
            return Offer.PAUSED
        admission = self.admission
        if admission is None or admission.admit(due.workflow, due.key, due.starting):
            self.taken.append(due)
            return Offer.TAKEN
        if due.queued and due.key is not None and admission.key_full(due.workflow, due.key):
            self.behind_full_keys[due.pk] = (due.workflow, due.key)
            if admission.open(due.workflow, due.starting):
                return Offer.HELD  # only its key is full, as the read may not have known
        held = self._held()
        if held == self._leaves_out:
            return Offer.HELD
        self._leaves_out = held
        return Offer.CHANGED

    def read_more(self, asked: int, returned: int) -> bool:
        """After a read that asked for ``asked`` due instances and returned ``returned``
        (pauses pending included or not, as long as consistently): whether to read again,
        past what was read. Not when the claim is full, nothing more is due, or nothing may
        run; a claim that stops for want of reads left cannot tell the next look."""
        if self.full or returned < asked or not self._leaves_out.active:
            return False
        if self._reads_left is not None:
            self._reads_left -= 1
            if self._reads_left <= 0:
                self.read_all = False
                return False
        return True

    def held_all(self) -> bool:
        """Whether what it took leaves every workflow of the claim held back whole (by a
        concurrency limit or the worker's cap): none can start until one of theirs ends."""
        return self.admission is not None and not self._held().active

    def next_look(
        self,
        *,
        more: bool | None,
        timer: float | None,
        rate_held: Sequence[str] | None = None,
    ) -> NextLook | None:
        """When the worker should look again, or None if the claim cannot tell.

        ``more``: for a full claim, whether something more is runnable now (None: unknown);
        a claim that took fewer than it asked read all that is due. ``timer``: the earliest
        time after the claim at which an instance of its workflows may need a worker (a wake
        time, a lease's expiry, those it took included). ``rate_held``: the workflows with a
        first start due that a used-up rate holds back (None: unknown; every used-up rate's
        reopening then counts). A concurrency limit never sets a time: an end frees its slot,
        and an end notifies."""
        if self.full:
            if more is None and self.held_all():
                more = False
            if more is None or more:
                return None
        if not self.read_all:
            return None
        admission = self.admission
        if admission is not None and admission.filled_rate and not self.held_all():
            return None  # a start it took used up a rate, whose reopening was read before
        known = [at for at in (timer, *self.reopenings(rate_held)) if at is not None]
        return NextLook(min(known) if known else None)

    def reopenings(self, rate_held: Sequence[str] | None) -> list[float]:
        """When the used-up rates that hold back the first starts of ``rate_held`` reopen
        (None: every used-up rate of the claim's scopes)."""
        if self.admission is None:
            return []
        if rate_held is None:
            return list(self._usage.reopens.values())
        found = [self.admission.reopen_at(name) for name in rate_held]
        return [at for at in found if at is not None]

    def _held(self) -> Held:
        if self.admission is None:
            return Held(list(self.workflows), [], [])
        return self.admission.held(self.workflows)
