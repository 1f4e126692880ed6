"""Ending instances the engine stops on its own, the same way in every store: a deadline that
passed (``WorkflowTimeoutError``) and a parent's end applied to its children (their
``on_parent_close``); and keyed creates that end or join queued instances of their key. The
rules are here, the contract is :class:`ClosingStore` (``Store.closing``); the stores execute
them in their transactions.

An instance that never started (no step ran, so it has no rollback to run) ends ``errored`` at
once. One that started is *interrupted*: marked with a control (``timeout`` or ``cancel``) and
made runnable now, its running activation fenced out, as a termination with rollback does; the
worker that claims it runs its rollbacks and ends it ``errored`` with the error below.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Literal

from ..records import InstanceRecord
from .types import BatchItem, KeyedConflict, Lease, NewInstance

Interruption = Literal["timeout", "cancel"]
"""The controls an interrupted instance carries to the activation that ends it."""

INTERRUPTIONS: tuple[Interruption, ...] = ("timeout", "cancel")

ERRORS: dict[str, dict[str, str]] = {
    "timeout": {
        "name": "WorkflowTimeoutError",
        "message": "the instance ran past its deadline",
    },
    "cancel": {
        "name": "WorkflowCancelledError",
        "message": "its parent ended, and it was started with on_parent_close='request_cancel'",
    },
}
"""The error an interrupted instance ends with, by its control."""

PARENT_CLOSE_POLICIES = ("terminate", "request_cancel", "abandon")
"""What a parent's end (errored or terminated) does to its unfinished children."""

DEADLINE_BATCH = 200
"""Deadlines carried out per transaction of :meth:`ClosingStore.expire_deadlines`."""


def interruption(
    status: str, started: bool, leased: bool, control: str | None
) -> dict[str, Any] | None:
    """How an unfinished instance is stopped: ``{"end": True}`` (never started: end it errored
    now), ``{"status", "fence"}`` (mark it and make it runnable, fencing out a lease), or None
    (a termination or another interruption is pending already: it carries on with that)."""
    if control is not None:
        return None
    if not started and not leased:
        return {"end": True}
    return {
        "status": "running" if status in ("running", "waitingForPause") else "queued",
        "fence": leased,
    }


class ClosingStore(abc.ABC):
    """Deadlines carried out, a parent's end applied to its children, keyed creates."""

    @abc.abstractmethod
    async def create_keyed(
        self,
        workflow: str,
        item: NewInstance,
        *,
        trigger: str,
        on_conflict: KeyedConflict,
        ready_at: float | None = None,
    ) -> InstanceRecord:
        """Create one instance with a ``key`` durably, settling what its key holds in the same
        transaction; of concurrent calls for one workflow and key, each sees the others' whole.

        ``"replace_queued"``: every instance of ``workflow`` with ``item.key`` that is queued
        and never started ends ``terminated`` (started or running ones are untouched), then
        ``item`` is created as :meth:`Store.create_instances` does, runnable at once.

        ``"debounce"``: if an instance of ``workflow`` with ``item.key`` created by an earlier
        debounce is queued and has not started, it takes ``item.params`` and becomes runnable
        at ``ready_at`` (no other column changes; it is returned, with its own id); otherwise
        ``item`` is created queued, runnable at ``ready_at``, and returned.

        An existing ``item.id`` raises ``InstanceAlreadyExistsError``, a dedup key held
        ``DuplicateInstanceError``, and nothing is written.
        """

    @abc.abstractmethod
    async def create_keyed_batch(
        self, workflow: str, items: Sequence[BatchItem], *, trigger: str
    ) -> list[InstanceRecord | None]:
        """Create ``items`` in order in one durable transaction, each as one call would:
        one with ``on_conflict`` as :meth:`create_keyed` does (so a later item of a key sees
        what an earlier one did), one without as :meth:`Store.create_instances` does.

        An item whose id exists (or came earlier in ``items``) is skipped before anything of
        its key is settled: its place in the result is None. Otherwise its place holds the
        instance it created, or for a debounce that joined one, that instance (its own id).
        Of concurrent calls for one workflow and key, each sees the others' whole.
        """

    @abc.abstractmethod
    async def expire_deadlines(self, workflows: Sequence[str], now: float) -> float | None:
        """Carry out the deadlines of ``workflows``' unfinished instances that have passed
        (``deadline_at <= now``), in one transaction; return the earliest deadline still ahead
        (``now`` if more were due than one call carries out, None if none).

        Each instance's ``deadline_at`` is cleared. One that never started (no ``started_at``,
        no lease: queued, held by a limit, paused) ends ``errored`` with
        ``WorkflowTimeoutError`` at once, waking a parent as :meth:`Store.finish` does. Any
        other is marked with the control ``"timeout"`` (:attr:`Claim.control`) and made
        runnable now (``queued``, or ``running`` if it was, its lease fenced out and its running
        steps closed as a terminate does, its slots freed): the worker that claims it runs its
        rollbacks and ends it ``errored`` with ``WorkflowTimeoutError``. One with a control
        already pending (a termination with rollback, a cancellation) keeps it. An instance
        made runnable calls the ready listeners.
        """

    @abc.abstractmethod
    async def close_children(self, lease: Lease, now: float) -> None:
        """Apply the ``on_parent_close`` of each unfinished child of the leased instance (the
        instances created with ``parent_pk`` = its pk), before its activation ends it errored
        or terminated; fenced on the lease (``LeaseLostError``, nothing written), durable.

        ``"terminate"``: the child ends ``terminated`` at once (fenced out, as
        :meth:`Store.control` does), and this applies to its own children in turn.
        ``"request_cancel"``: the child is interrupted with the control ``"cancel"``, as
        :meth:`expire_deadlines` interrupts an instance (it ends ``errored`` with
        ``WorkflowCancelledError`` after its rollbacks). ``"abandon"`` or none: left alone.
        :meth:`Store.control`'s terminate without rollback applies the same in its transaction.
        """
