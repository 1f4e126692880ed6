"""Group commit, for both stores: operations submitted while others are in flight are run
together, in one transaction (PostgreSQL: one statement over arrays, in one round trip; SQLite:
every write queued in one turn of the event loop, in one ``BEGIN IMMEDIATE ... COMMIT``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

RunBatch = Callable[[list[Item]], Awaitable[Sequence[Result | BaseException]]]
LONE_FLUSHES = 2
"""Flushes in a row that must find an item alone before lone items run inline again. One lone
item between bursts (a worker's claim between two waves of step writes) says nothing of what
comes next, and the next burst's first item, run inline, would pay for a commit of its own."""


class Busy(Exception):
    """An outcome of ``run`` for an item it could not run yet, having done nothing (SQLite: the
    database is locked by another connection). Never raised: the item is run again after a
    backoff, first in a batch with the items queued meanwhile."""


class Batcher(Generic[Item, Result]):
    """Queues items and hands them to ``run`` in batches.

    Up to ``flushers`` batches are in flight at once; an item submitted while all of them are busy
    waits and joins the next batch, so batches grow exactly when the database is the bottleneck
    (and a lone item goes out at once). ``run`` returns one result or exception per item, in
    order. Items with equal ``key`` never share a batch (their statements would conflict); the
    later one waits for the next batch (without ``key``, any items may share one). When a whole
    batch fails and ``split(error)`` says so (an error that one bad item could have caused),
    each item is run alone, so only the bad one fails. ``max_batch`` None: no limit.

    Adaptive: while items come one at a time (a sequential caller), an item submitted with
    nothing in flight or queued runs at once in its caller's task, as a batch of one that counts
    as a flusher, and pays for no task and no extra turns of the event loop. As soon as an item
    comes while another is in flight, items go to flusher tasks (which take everything queued by
    the time they run), until flushers find a lone item :data:`LONE_FLUSHES` times in a row.
    (Running the first of several items inline would send it alone and split every burst in
    two.) An item queued for a flusher whose caller was cancelled is still run (its write may
    save work later); an item run in its caller's task is interrupted with it, and whether it
    took effect is then unknown, as after a crash. ``inline``, if given, says whether a lone
    item may run in its caller's task now: if not, it waits for a flusher, which takes what else
    came in the meantime.

    ``by_turn``, for a ``run`` that usually completes without yielding (an embedded database's
    commit): such a run is never seen in flight, so items also overlap when a second task
    submits one in a turn of the event loop in which another task's item ran inline. (A task's
    own items are sequential, each waiting for the one before: they never overlap.)

    An item whose outcome is :class:`Busy` goes back to the head of the queue, and a flusher
    runs it again after ``backoff`` (the first delay, doubled after each busy batch up to the
    second), in its own task: a caller cancelled meanwhile does not take it back.
    """

    def __init__(
        self,
        run: RunBatch[Item, Result],
        key: Callable[[Item], Hashable] | None = None,
        *,
        split: Callable[[Exception], bool] = lambda exc: False,
        max_batch: int | None = 500,
        flushers: int = 2,
        by_turn: bool = False,
        backoff: tuple[float, float] = (0.0005, 0.02),
        inline: Callable[[], bool] | None = None,
    ) -> None:
        self._run = run
        self._key = key
        self._split = split
        self._max_batch = max_batch
        self._max_flushers = flushers
        self._by_turn = by_turn
        self._backoff = backoff
        self._may_inline = inline
        self._delay = 0.0
        """The wait before the next batch: not zero while ``run`` reports items busy."""
        self._turn_task: asyncio.Task[object] | None = None
        """With ``by_turn``: the task whose item ran inline in this turn of the loop, if any."""
        self._queue: list[tuple[Item, asyncio.Future[Result]]] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Task[None] | None = None
        """A flusher task that was started and has not taken its first batch yet."""
        self._inline: asyncio.Future[None] | None = None
        """Set while a lone item runs in its caller's task; done when it has run."""
        self._eager = True
        """Whether items have been coming one at a time (then a lone one runs inline)."""
        self._lone = LONE_FLUSHES
        """Flushes in a row that found an item alone (since a burst, or as many as it takes
        from the start)."""

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        if self._inline is None and not self._flushers and not self._queue:
            if (
                self._eager
                and (self._may_inline is None or self._may_inline())
                and (not self._by_turn or self._alone_in_turn(loop))
            ):
                return await self._run_inline(item, loop)
        elif self._inline is not None:
            self._eager = False  # items overlap: batch them from now on
        future: asyncio.Future[Result] = loop.create_future()
        self._queue.append((item, future))
        self._schedule()
        return await future

    async def _run_inline(self, item: Item, loop: asyncio.AbstractEventLoop) -> Result:
        done = self._inline = loop.create_future()
        later: asyncio.Future[Result] | None = None
        try:
            outcomes: Sequence[Result | BaseException]
            try:
                outcomes = await self._run([item])
            except Exception as exc:  # handed to the caller
                outcomes = [exc]
            (outcome,) = outcomes
            if isinstance(outcome, Busy):
                later = loop.create_future()
                self._defer([(item, later)])
        finally:
            self._inline = None
            done.set_result(None)
            self._start()  # items that came meanwhile
        if later is not None:
            return await later
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _alone_in_turn(self, loop: asyncio.AbstractEventLoop) -> bool:
        """With ``by_turn``: whether no other task's item ran inline in this turn (if one did,
        items overlap: batch them from now on)."""
        task = asyncio.current_task(loop)
        if self._turn_task is None:
            self._turn_task = task
            loop.call_soon(self._end_turn)
        elif self._turn_task is not task:
            self._eager = False
            return False
        return True

    def _end_turn(self) -> None:
        self._turn_task = None

    async def drain(self) -> None:
        """Wait until everything submitted so far has been run."""
        while self._flushers or self._queue or self._inline is not None:
            if self._flushers or self._inline is not None:
                running: set[asyncio.Future[None]] = set(self._flushers)
                if self._inline is not None:
                    running.add(self._inline)
                await asyncio.wait(running)
            else:
                self._start()

    def _schedule(self) -> None:
        # A flusher takes its batch when its task first runs (the next loop iteration), so items
        # submitted in this iteration join it anyway: no need to wait a turn before starting one.
        # A flusher that has not taken its batch yet serves every item queued meanwhile.
        if self._idle is not None:
            return
        if len(self._flushers) + (self._inline is not None) >= self._max_flushers:
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
        limit = len(self._queue) if self._max_batch is None else self._max_batch
        if self._key is None:
            taken, self._queue = self._queue[:limit], self._queue[limit:]
            return taken
        batch: list[tuple[Item, asyncio.Future[Result]]] = []
        rest: list[tuple[Item, asyncio.Future[Result]]] = []
        keys: set[Hashable] = set()
        for entry in self._queue:
            key = self._key(entry[0])
            if len(batch) < limit and key not in keys:
                keys.add(key)
                batch.append(entry)
            else:
                rest.append(entry)
        self._queue = rest
        return batch

    def _defer(self, entries: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        self._queue[:0] = entries
        first, most = self._backoff
        self._delay = min(self._delay * 2, most) if self._delay else first

    async def _flush(self) -> None:
        self._idle = None
        while self._queue:
            if self._delay:
                await asyncio.sleep(self._delay)
            batch = self._take()
            self._lone = self._lone + 1 if len(batch) == 1 else 0
            self._eager = self._lone >= LONE_FLUSHES
            outcomes = await self._outcomes([item for item, _ in batch])
            busy: list[tuple[Item, asyncio.Future[Result]]] = []
            for entry, outcome in zip(batch, outcomes, strict=True):
                future = entry[1]
                if isinstance(outcome, Busy):
                    busy.append(entry)  # even if its caller is gone: it may save work later
                elif future.done():
                    continue
                elif isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
            if busy:
                self._defer(busy)
            else:
                self._delay = 0.0
        # Out of the running now, not when the task's done callback comes a turn later: a caller
        # this batch woke may submit its next item inline.
        self._flushers.discard(asyncio.current_task())

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
