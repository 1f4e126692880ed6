"""The attempt clock: when a step attempt in flight is written as ``running``, and its timeout.

An attempt that runs longer than :data:`RECORD_RUNNING_AFTER` is written as ``running`` so that
observers in other processes see it; quick steps skip that write. An attempt that outlives its
timeout is cancelled (and becomes a :class:`~stepline.StepTimeoutError`). One sweep per worker
serves every attempt in flight instead of timers per attempt, so an attempt that ends quickly
costs a dictionary insert and delete.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

RECORD_RUNNING_AFTER = 0.2
"""Seconds after which a running step attempt is written to the store as ``running``."""

RecordRunning = Callable[[], Coroutine[Any, Any, None]]
"""Writes the attempt's ``running`` record (best effort)."""


class RunningMarks:
    """The clocks of a worker's attempts in flight, swept every ``SWEEP`` seconds.

    So the ``running`` record comes up to ``SWEEP`` after ``RECORD_RUNNING_AFTER``, and a
    timeout of ``PRECISE_BELOW`` seconds or more fires up to ``SWEEP`` late; a shorter timeout
    gets a timer of its own and fires on time.
    """

    SWEEP = 0.05
    PRECISE_BELOW = 2.0

    def __init__(self, now: Callable[[], float] | None = None) -> None:
        self._pending: dict[int, AttemptMark] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._now = now
        """The clock attempts are timed by; None: the event loop's. A virtual clock (a test
        harness's) moves by jumps, so every timeout waits for a sweep: :meth:`sweep_now` after
        each jump, or the regular one."""

    def add(
        self, record_running: RecordRunning, timeout: float, loop: asyncio.AbstractEventLoop
    ) -> AttemptMark:
        """Start the clock of an attempt of the current task, on ``loop`` (the running loop,
        passed in: asking asyncio for it costs a system call)."""
        now = loop.time() if self._now is None else self._now()
        mark = AttemptMark(self, record_running, now + RECORD_RUNNING_AFTER, now + timeout, loop)
        if timeout < self.PRECISE_BELOW and self._now is None:
            mark.timer = loop.call_at(mark.timeout_at, mark.expire)
        self._pending[id(mark)] = mark
        if self._handle is None or self._loop is not loop:
            self._loop = loop
            self._handle = loop.call_later(self.SWEEP, self._sweep)
        return mark

    def discard(self, mark: AttemptMark) -> None:
        self._pending.pop(id(mark), None)

    def _sweep(self) -> None:
        self._handle = None
        loop = self._loop
        if loop is None:
            return
        self.sweep_now()
        if self._pending:
            self._handle = loop.call_later(self.SWEEP, self._sweep)

    def sweep_now(self) -> None:
        """Write the ``running`` records and expire the timeouts that are due now."""
        loop = self._loop
        if loop is None:
            return
        now = loop.time() if self._now is None else self._now()
        for mark in list(self._pending.values()):
            if mark.running_at <= now:
                mark.running_at = math.inf
                mark.record_running()
            if mark.timeout_at <= now:
                mark.expire()


class AttemptMark:
    """The clock of one attempt (see :class:`RunningMarks`).

    Its timeout works like ``asyncio.timeout``: it cancels the attempt's task, and
    :meth:`timed_out` tells that cancellation from any other.
    """

    __slots__ = (
        "_cancelling",
        "_expired",
        "_marks",
        "_owner",
        "_record_running",
        "_task",
        "running_at",
        "timeout_at",
        "timer",
    )

    def __init__(
        self,
        marks: RunningMarks,
        record_running: RecordRunning,
        running_at: float,
        timeout_at: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._marks = marks
        self._record_running = record_running
        self._task: asyncio.Task[None] | None = None
        self._owner = asyncio.current_task(loop)
        self._cancelling = self._owner.cancelling() if self._owner is not None else 0
        self._expired = False
        self.running_at = running_at
        """When to write the ``running`` record (loop time; inf once written)."""
        self.timeout_at = timeout_at
        """When the attempt times out (loop time; inf once its callback is over)."""
        self.timer: asyncio.TimerHandle | None = None

    def record_running(self) -> None:
        """The attempt has run long enough to be shown ``running``: write it, in a task."""
        self._task = asyncio.get_running_loop().create_task(self._record_running())

    def expire(self) -> None:
        """The timeout is up: cancel the attempt (once)."""
        if self._expired or self.timeout_at == math.inf or self._owner is None:
            return
        self._expired = True
        self._owner.cancel()

    def disarm(self) -> None:
        """The attempt's callback is over: its timeout no longer applies."""
        self.timeout_at = math.inf
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def timed_out(self) -> bool:
        """After a ``CancelledError`` in the attempt: whether it was this timeout alone (then the
        cancellation is absorbed) rather than a cancellation from outside."""
        if not self._expired or self._owner is None:
            return False
        self._expired = False
        return self._owner.uncancel() <= self._cancelling

    def stop(self) -> asyncio.Task[None] | None:
        """The attempt is over: stop its clock. Returns the write of its ``running`` record if
        one was started: the attempt's final record waits for it, so that the two never race."""
        self.disarm()
        self._marks.discard(self)
        return self._task

    def cancel(self) -> None:
        """The attempt was cut off: stop its clock and its ``running`` record's write."""
        self.disarm()
        self._marks.discard(self)
        if self._task is not None:
            self._task.cancel()
