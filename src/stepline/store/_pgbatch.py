"""Group commit for the PostgreSQL store: operations submitted while others are in flight are
run together, as one statement over arrays, in one round trip and one transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

RunBatch = Callable[[list[Item]], Awaitable[Sequence[Result | BaseException]]]


class Batcher(Generic[Item, Result]):
    """Queues items and hands them to ``run`` in batches.

    Up to ``flushers`` batches are in flight at once; an item submitted while all of them are busy
    waits and joins the next batch, so batches grow exactly when the database is the bottleneck
    (and a lone item goes out at once). ``run`` returns one result or exception per item, in
    order. Items with equal ``key`` never share a batch (their statements would conflict); the
    later one waits for the next batch. An item whose caller was cancelled is still run: its
    write may save work later. When a whole batch fails and ``split(error)`` says so (an error
    that one bad item could have caused), each item is run alone, so only the bad one fails.
    """

    def __init__(
        self,
        run: RunBatch[Item, Result],
        key: Callable[[Item], Hashable],
        *,
        split: Callable[[Exception], bool] = lambda exc: False,
        max_batch: int = 500,
        flushers: int = 2,
    ) -> None:
        self._run = run
        self._key = key
        self._split = split
        self._max_batch = max_batch
        self._max_flushers = flushers
        self._queue: list[tuple[Item, asyncio.Future[Result]]] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Task[None] | None = None
        """A flusher task that was started and has not taken its first batch yet."""

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._schedule()
        return await future

    async def drain(self) -> None:
        """Wait until everything submitted so far has been run."""
        while self._flushers or self._queue:
            if self._flushers:
                await asyncio.wait(set(self._flushers))
            else:
                self._start()

    def _schedule(self) -> None:
        # A flusher takes its batch when its task first runs (the next loop iteration), so items
        # submitted in this iteration join it anyway: no need to wait a turn before starting one.
        # A flusher that has not taken its batch yet serves every item queued meanwhile.
        if self._idle is not None or len(self._flushers) >= self._max_flushers:
            return
        task = asyncio.get_running_loop().create_task(self._flush())
        self._idle = task
        self._flushers.add(task)
        task.add_done_callback(self._done)

    def _start(self) -> None:
        if self._queue:
            self._schedule()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._flushers.discard(task)
        if self._idle is task:  # cancelled before it ran
            self._idle = None
        if self._queue:
            self._schedule()

    def _take(self) -> list[tuple[Item, asyncio.Future[Result]]]:
        batch: list[tuple[Item, asyncio.Future[Result]]] = []
        rest: list[tuple[Item, asyncio.Future[Result]]] = []
        keys: set[Hashable] = set()
        for entry in self._queue:
            key = self._key(entry[0])
            if len(batch) < self._max_batch and key not in keys:
                keys.add(key)
                batch.append(entry)
            else:
                rest.append(entry)
        self._queue = rest
        return batch

    async def _flush(self) -> None:
        self._idle = None
        while self._queue:
            batch = self._take()
            outcomes = await self._outcomes([item for item, _ in batch])
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    async def _outcomes(self, items: list[Item]) -> Sequence[Result | BaseException]:
        try:
            return await self._run(items)
        except Exception as exc:  # handed to the callers of the batch
            if len(items) == 1 or not self._split(exc):
                return [exc] * len(items)
        outcomes: list[Result | BaseException] = []
        for item in items:
            try:
                outcomes.extend(await self._run([item]))
            except Exception as exc:  # handed to this item's caller
                outcomes.append(exc)
        return outcomes
