"""A write that a worker in this process takes the instances of at once: the slots it holds for
them (:class:`Reservation`), claimed by the write itself (a create: ``Store.create_and_claim``;
an update's send: ``MessageStore.send_update_and_claim``) and handed over, or given back when
the write fails."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from .records import DEFAULT_VERSION, InstanceRecord
from .store.base import Claim, NewInstance, Store
from .store.types import PatchesKnown

T = TypeVar("T")


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

    @property
    def versions(self) -> Mapping[str, Sequence[str]]:
        """The versions of each workflow the worker runs (a claim's routing)."""
        ...

    @property
    def patches(self) -> PatchesKnown:
        """The patch ids its code has, by workflow and version (a claim's routing)."""
        ...

    def take_created(self, claims: Sequence[Claim]) -> None: ...

    def release(self) -> None: ...


ReserveSlots = Callable[[str, int, str], Reservation | None]
"""Asks the worker running in this process, if one is, to hold slots for up to ``count``
instances of ``workflow`` at a version about to be created
(:meth:`stepline.worker.Worker.reserve`); None when it takes none."""

ReserveForUpdate = Callable[[str], Reservation | None]
"""Asks the worker running in this process, if one is, to hold a slot for the instance of
``workflow`` an update is about to be sent to (:meth:`stepline.worker.Worker.reserve_update`);
None when it takes none."""


def _hand_over(reservation: Reservation, task: asyncio.Task[tuple[Any, Sequence[Claim]]]) -> None:
    if task.cancelled() or task.exception() is not None:
        reservation.release()
    else:
        reservation.take_created(task.result()[1])


async def handed_over(reservation: Reservation, write: Awaitable[tuple[T, Sequence[Claim]]]) -> T:
    """What ``write`` returns, a write that claims for ``reservation``: the claims it made are
    handed to the worker, or the slots given back if it failed."""
    task = asyncio.ensure_future(write)
    # The worker starts what the write claimed for it even if this caller is cancelled
    # meanwhile: otherwise those instances would wait for their lease to expire.
    task.add_done_callback(functools.partial(_hand_over, reservation))
    result, _ = await asyncio.shield(task)
    return result


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
    write = store.create_and_claim(
        workflow,
        items,
        trigger=trigger,
        skip_existing=skip_existing,
        owner=reservation.owner,
        lease_seconds=reservation.lease_seconds,
        limit=reservation.slots,
    )
    return await handed_over(reservation, write)
