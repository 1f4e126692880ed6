"""A create that a worker in this process takes at once: the slots it holds for the instances
(:class:`Reservation`), claimed as they are created (``Store.create_and_claim``) and handed
over, or given back when the create fails."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Protocol

from .records import DEFAULT_VERSION, InstanceRecord
from .store.base import Claim, NewInstance, Store


class Reservation(Protocol):
    """Slots that a worker in this process holds for instances about to be created here
    (:class:`stepline.worker.Reservation`): the create claims up to ``slots`` of them for
    ``owner`` (:meth:`Store.create_and_claim`), then either hands the claims over
    (:meth:`take_created`) or, if it failed, gives the slots back (:meth:`release`)."""

    @property
    def owner(self) -> str: ...

    @property
    def lease_seconds(self) -> float: ...

    @property
    def slots(self) -> int: ...

    def take_created(self, claims: Sequence[Claim]) -> None: ...

    def release(self) -> None: ...


ReserveSlots = Callable[[str, int, str], Reservation | None]
"""Asks the worker running in this process, if one is, to hold slots for up to ``count``
instances of ``workflow`` at a version about to be created
(:meth:`stepline.worker.Worker.reserve`); None when it takes none."""


def _hand_over(
    reservation: Reservation,
    task: asyncio.Task[tuple[list[InstanceRecord], list[Claim]]],
) -> None:
    if task.cancelled() or task.exception() is not None:
        reservation.release()
    else:
        reservation.take_created(task.result()[1])


async def create_reserved(
    store: Store,
    workflow: str,
    items: Sequence[NewInstance],
    trigger: str,
    skip_existing: bool,
    reserve: ReserveSlots | None,
) -> list[InstanceRecord]:
    """Create ``items`` of ``workflow``; a worker in this process (``reserve``) takes what it
    has room for at once."""
    versions = {item.version for item in items} or {DEFAULT_VERSION}
    # Slots are held for one version (Worker.reserve); a batch of several is left to claims.
    reservation = None
    if reserve is not None and len(versions) == 1:
        reservation = reserve(workflow, len(items), versions.pop())
    if reservation is None:
        return await store.create_instances(
            workflow, items, trigger=trigger, skip_existing=skip_existing
        )
    task = asyncio.ensure_future(
        store.create_and_claim(
            workflow,
            items,
            trigger=trigger,
            skip_existing=skip_existing,
            owner=reservation.owner,
            lease_seconds=reservation.lease_seconds,
            limit=reservation.slots,
        )
    )
    # The worker starts what the create claimed for it even if this caller is cancelled
    # meanwhile: otherwise those instances would wait for their lease to expire.
    task.add_done_callback(functools.partial(_hand_over, reservation))
    created, _ = await asyncio.shield(task)
    return created
