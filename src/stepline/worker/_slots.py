"""The worker's slots: the instances it holds (claimed, counted against its concurrency,
their leases renewed) and those reserved for instances about to be created in its process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from .._runtime import Activation
from ..store.base import Claim
from ..store.types import PatchesKnown


class Slot:
    """One claimed instance: counted against concurrency and renewed from claim to end."""

    __slots__ = ("activation", "claim", "ending", "stop_reason", "task")

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.task: asyncio.Task[None] | None = None
        self.activation: Activation | None = None
        self.stop_reason: str | None = None
        self.ending = False
        """Set while the activation's final write (finish or release) is in flight."""

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.activation is not None:
            self.activation.request_stop(reason)


class Slots:
    """Which slots of ``concurrency`` are taken: by claimed instances (``active``, by lease pk)
    and by reservations for creates in flight (``reserved``)."""

    __slots__ = ("active", "concurrency", "reserved")

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.active: dict[int, Slot] = {}
        self.reserved = 0

    def free(self) -> int:
        # An activation whose final write is in flight (``ending``) holds its lease until that
        # commits, but no slot: it runs no more code.
        running = sum(1 for slot in self.active.values() if not slot.ending)
        return self.concurrency - running - self.reserved

    def reserve(self, count: int) -> int:
        """Hold up to ``count`` free slots; return how many were taken."""
        take = min(count, self.free())
        if take <= 0:
            return 0
        self.reserved += take
        return take


class Reservation:
    """Slots of a worker held for instances that a write in its process is about to claim for
    it (:meth:`Worker.reserve <stepline.worker.Worker.reserve>`, :meth:`Worker.reserve_update
    <stepline.worker.Worker.reserve_update>`).

    The write claims up to ``slots`` instances for ``owner`` with a lease of ``lease_seconds``
    (a create: :meth:`~stepline.store.base.Store.create_and_claim`; an update's send, routed to
    ``versions`` and ``patches``:
    :meth:`~stepline.store.messages.MessageStore.send_update_and_claim`), then calls
    :meth:`take_created` with the claims it made, or :meth:`release` if it failed. The slots
    count against the worker's concurrency until then.
    """

    __slots__ = ("_held", "_start", "lease_seconds", "owner", "patches", "slots", "versions")

    def __init__(
        self,
        held: Slots,
        start: Callable[[Claim], object],
        owner: str,
        lease_seconds: float,
        slots: int,
        routing: tuple[Mapping[str, Sequence[str]], PatchesKnown],
    ) -> None:
        self._held: Slots | None = held
        self._start = start
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.slots = slots
        self.versions, self.patches = routing

    def take_created(self, claims: Sequence[Claim]) -> None:
        """Start the instances the write claimed, at once, and give back the other slots."""
        self._end()
        for claim in claims:
            self._start(claim)

    def release(self) -> None:
        """The write failed: give the slots back."""
        self._end()

    def _end(self) -> None:
        held, self._held = self._held, None
        if held is None:
            raise RuntimeError("a reservation is taken or released once")
        held.reserved -= self.slots
