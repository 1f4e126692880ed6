"""A stopping worker ends its side jobs even when one of them loses a cancellation.

On Python 3.11, ``asyncio.wait_for`` can return a result that lands together with a cancellation
of the task awaiting it, and the cancellation is lost: a side job's loop (the heartbeat, say,
whose store call waits for a pooled connection that way) then goes on, and a worker waiting for
it to end never stops (``SyncEngine.close`` hung so under load). The worker cancels again.
"""

from __future__ import annotations

import asyncio

import pytest

from stepline.worker import _worker


async def test_a_side_job_that_loses_its_cancellation_is_cancelled_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_worker, "RECANCEL_SECONDS", 0.05, raising=False)
    lost = 0
    beats = 0

    async def loses_one() -> None:
        nonlocal lost, beats
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # as the race in asyncio.wait_for does: the loop goes on
                current = asyncio.current_task()
                assert current is not None
                current.uncancel()
            beats += 1

    async def plain() -> None:
        await asyncio.sleep(3600)

    tasks = [asyncio.create_task(loses_one()), asyncio.create_task(plain())]
    await asyncio.sleep(0)
    await asyncio.wait_for(_worker._cancel(tasks), timeout=5)
    assert all(task.cancelled() for task in tasks)
    assert (lost, beats) == (1, 1)
