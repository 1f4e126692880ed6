"""Graceful shutdown: running activations get the grace period to finish their steps, then
what still runs is cancelled (and its instance released by the activation's own clean-up)."""

from __future__ import annotations

import asyncio

from ._log import log
from ._slots import Slots


async def drain(slots: Slots, worker_id: str, grace_period: float, at_once: asyncio.Event) -> None:
    """Stop every activation in ``slots`` and wait for them: the grace period, cut short when
    ``at_once`` is set."""
    active = slots.active
    if not active:
        return
    n = len(active)
    log.info("worker %s: waiting for %d running activation%s", worker_id, n, "" if n == 1 else "s")
    for slot in active.values():
        slot.request_stop("shutdown")
    by_task = {slot.task: slot for slot in active.values() if slot.task is not None}
    pending = await _grace(set(by_task), grace_period, at_once)
    if pending and at_once.is_set():
        log.warning("worker %s: stopping at once, cancelling %d", worker_id, len(pending))
    for task in pending:
        # One whose run is over only waits for its finish, a database write that carries its
        # last step records: let it land (the store gives up on its own if the database is
        # gone) rather than lose them and run those steps again.
        if not by_task[task].ending:
            task.cancel()
    if pending:
        await asyncio.wait(pending)


async def _grace(
    tasks: set[asyncio.Task[None]], grace_period: float, at_once: asyncio.Event
) -> set[asyncio.Task[None]]:
    """Wait for ``tasks`` until the grace period is over or ``at_once`` is set; return those
    still running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_period
    cut = asyncio.ensure_future(at_once.wait())
    try:
        while tasks and not cut.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait(
                {*tasks, cut}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            tasks = {task for task in tasks if not task.done()}
    finally:
        cut.cancel()
    return tasks
