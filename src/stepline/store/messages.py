"""The store contract's messaging operations: :class:`MessageStore`, ``Store.messages``
(docs/messaging.md).

- *Updates* travel to their instance as events of type :data:`~.types.UPDATE_EVENT` (so a claim's
  history carries them, and they wake the instance as any event does), with a row of their own
  that keeps the reply once the handler's record (kind ``update``, :attr:`StepWrite.update`)
  ends, for callers that retry with the same update id.
- *Streams* are rows with a cursor: items numbered 1, 2, ... per stream, appended by a leased
  activation, read after a cursor by anyone.
- *Routed queries* are requests a client without a workflow's code leaves for a worker that
  has it, and the answers the worker leaves back.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from .types import (
    Claim,
    Lease,
    NewStreamItem,
    PatchesKnown,
    QueryAnswer,
    QueryRequest,
    StreamItem,
    StreamRead,
    UpdateRecord,
)

QUERY_EXPIRY = 3600.0
"""Seconds after which a routed query request is deleted whether answered or not (its caller
gave up long before)."""


class MessageStore(abc.ABC):
    """Updates with their replies, stream items, and routed queries."""

    # -- updates ---------------------------------------------------------------------------------

    @abc.abstractmethod
    async def send_update(
        self, workflow: str, instance_id: str, update_id: str, name: str, payload: str
    ) -> UpdateRecord:
        """Record update ``update_id`` of the instance durably (on disk before returning) and
        wake the instance, as :meth:`Store.send_event` does with an event of type
        :data:`~.types.UPDATE_EVENT` and payload ``payload`` (JSON text); return it, ``pending``.

        If the instance already has an update ``update_id``, nothing is written and that one is
        returned as it stands (whatever its name and payload: a retry). Otherwise a finished
        instance raises ``IllegalStateError``; an unknown one ``InstanceNotFoundError``. Of
        concurrent sends of one update id, exactly one records it.
        """

    @abc.abstractmethod
    async def send_update_and_claim(
        self,
        workflow: str,
        instance_id: str,
        update_id: str,
        name: str,
        payload: str,
        *,
        owner: str,
        lease_seconds: float,
        versions: Mapping[str, Sequence[str]] | None = None,
        patches: PatchesKnown | None = None,
    ) -> tuple[UpdateRecord, Claim | None]:
        """:meth:`send_update`, claiming the instance for ``owner`` in the same transaction when
        it can run at once (a worker in the sending process runs the update's handler without
        claiming it, as :meth:`Store.create_and_claim` hands over new instances). Everything is
        durable on return; the answer and its errors are :meth:`send_update`'s.

        Claimed only if the update is recorded by this call (not one recorded before) and the
        instance is ``queued`` or ``waiting``, due once the update woke it (``ready_at <= now``),
        without a live lease, a pending control action or a passed ``deadline_at``; its workflow
        has no limit registered that applies across workers (``concurrency``, a rate,
        ``key_concurrency``, named limits: a claim applies those); and it is routed to
        ``versions`` and ``patches`` as :meth:`Store.claim` routes. Then it is claimed as
        :meth:`Store.claim` would at ``now``: ``running``, a fresh lease token,
        ``lease_expires = ready_at = now + lease_seconds``, ``started_at`` set if unset; the
        :class:`Claim` has no control action, an ``event_seq`` that counts the update's event,
        and the history, with that event among the unconsumed ones. No worker is told that it is
        ready. Otherwise the instance is left as :meth:`send_update` leaves it and the claim is
        None.
        """

    @abc.abstractmethod
    async def get_update(
        self, workflow: str, instance_id: str, update_id: str
    ) -> UpdateRecord | None:
        """The update ``update_id`` of the instance as it stands (with the instance's status),
        None if it has none; an unknown instance raises ``InstanceNotFoundError``. One read."""

    @abc.abstractmethod
    async def reject_update(
        self, lease: Lease, event: int, update_id: str, error: dict[str, str], now: float
    ) -> None:
        """Turn down a pending update before its handler runs, fenced on the lease
        (``LeaseLostError``, nothing written): its event ``event`` is consumed and the update
        becomes ``rejected`` with ``error``, its end ``now``. No step is recorded. An update that
        is not pending is left as it is (its event is consumed all the same)."""

    # -- streams ---------------------------------------------------------------------------------

    @abc.abstractmethod
    async def publish(self, lease: Lease, item: NewStreamItem, now: float) -> int | None:
        """Append ``item`` to its stream of the leased instance, fenced on the lease
        (``LeaseLostError``, nothing written), created at ``now``; return its ``seq`` (one more
        than the stream's last, from 1), or None if the stream already holds an item of the
        same origin (nothing is written). In the same transaction, items beyond the last
        ``item.keep`` and, with ``item.keep_seconds``, those created more than that long before
        ``now`` are deleted (their numbers are not reused). Concurrent appends to one stream
        get distinct, increasing numbers."""

    @abc.abstractmethod
    async def read_stream(
        self, workflow: str, instance_id: str, stream: str, after: int, limit: int
    ) -> StreamRead:
        """Up to ``limit`` items of the instance's ``stream`` with ``seq > after``, in ``seq``
        order, and the instance's status (an unknown stream has no items); an unknown instance
        raises ``InstanceNotFoundError``. One read."""

    @abc.abstractmethod
    async def latest_stream_items(self, workflow: str, instance_id: str) -> list[StreamItem]:
        """The last item of each stream of the instance that has one, by stream name; an
        unknown instance raises ``InstanceNotFoundError``."""

    # -- routed queries ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def ask_query(
        self, workflow: str, instance_id: str, name: str, args: str, now: float
    ) -> int:
        """Leave a query request for a worker of ``workflow`` (``args``: JSON text, a list);
        return its number. Not durable: a request lost in a crash leaves its caller waiting
        until it gives up. Wakes the workers (as a create does). Requests created more than
        :data:`QUERY_EXPIRY` seconds before ``now`` are deleted in the same write."""

    @abc.abstractmethod
    async def take_queries(
        self, owner: str, workflows: Sequence[str], limit: int, lease_seconds: float, now: float
    ) -> list[QueryRequest]:
        """Take up to ``limit`` unanswered requests of ``workflows`` for ``owner``, oldest
        first, until ``now + lease_seconds``: those never taken, and those whose taker's time
        ran out (a worker that died answering). Two concurrent calls never take the same
        request."""

    @abc.abstractmethod
    async def answer_query(self, pk: int, answer: QueryAnswer, now: float) -> None:
        """Record the answer to request ``pk`` and wake its caller (a request answered already,
        or forgotten, is left as it is)."""

    @abc.abstractmethod
    async def query_answer(self, pk: int) -> QueryAnswer | None:
        """The answer to request ``pk`` once it has one, the request then deleted; None while it
        is unanswered. A request that does not exist raises ``LookupError``."""

    @abc.abstractmethod
    async def forget_query(self, pk: int) -> None:
        """Delete request ``pk``, answered or not (its caller gave up); nothing if it is gone."""
