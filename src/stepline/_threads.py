"""The threads sync callbacks run in, so that they never block the event loop.

A small pool with a cheaper hand-off than ``loop.run_in_executor``: a call goes to the threads
through one queue, as the function, its arguments and a copy of the caller's context, and its
outcome comes back with one ``loop.call_soon_threadsafe`` that settles an asyncio future. The
executor's path adds a ``concurrent.futures.Future`` (a condition, its callbacks) and a chained
asyncio future to every call (docs/performance.md has the figures).

The pool serves the whole process, every loop: threads start as calls arrive, up to
:data:`LIMIT` (the size of asyncio's default executor), and wait for the next call when done.
They are daemon threads: a callback past its timeout or its worker's grace period keeps running
(Python cannot stop a thread), and the process need not wait for it to exit. An engine that
closes ends the threads left idle (:func:`release_idle`); later calls start new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

LIMIT = min(32, (os.cpu_count() or 1) + 4)
"""Threads at most; calls beyond them wait in the queue for one to finish."""

NAME = "stepline-step"
"""The threads' name prefix."""

_Call = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    contextvars.Context,
    Callable[..., Any],
    tuple[Any, ...],
]


class StepThreads:
    """The pool. Every count is kept under one lock, so that each queued call is matched by a
    thread that will take it: an idle one, a new one, or (at the limit) the next to finish."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._threads = 0
        """Threads running or starting, not counting those told to exit."""
        self._idle = 0
        """Threads waiting for a call that none is queued for."""
        self._backlog = 0
        """Calls queued for the next thread to finish (all threads busy)."""
        self._started = 0

    def call(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: tuple[Any, ...]
    ) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` in a thread, in a copy of the current context; the future (of
        ``loop``, the running loop) gets its result or exception. One cancelled meanwhile (a
        timeout, a stopped activation) drops what the call returns."""
        future = loop.create_future()
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self._threads < self._limit:
                self._start()
            else:
                self._backlog += 1
        self._calls.put((loop, future, contextvars.copy_context(), fn, args))
        return future

    def _start(self) -> None:
        """Start a thread for a call (under the lock)."""
        self._started += 1
        thread = threading.Thread(target=self._work, name=f"{NAME}-{self._started}", daemon=True)
        thread.start()  # raises if the system has no thread left: nothing was counted
        self._threads += 1

    def release_idle(self) -> None:
        """End the threads that wait for a call; busy ones carry on and wait when done."""
        with self._lock:
            idle, self._idle = self._idle, 0
            self._threads -= idle
        for _ in range(idle):
            self._calls.put(None)

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for no call to be running or queued; whether none
        is."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._idle < self._threads or self._backlog:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def _work(self) -> None:
        get, lock = self._calls.get, self._lock
        while (call := get()) is not None:
            loop, future, context, fn, args = call
            del call
            try:
                outcome: tuple[bool, Any] = (True, context.run(fn, *args))
            except BaseException as exc:  # the awaiting task gets any error, as from an executor
                outcome = (False, exc)
            # Free before the outcome is out: whoever it wakes may release idle threads.
            with lock:
                if self._backlog:
                    self._backlog -= 1
                else:
                    self._idle += 1
                    if self._idle == self._threads:
                        lock.notify_all()
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
                loop.call_soon_threadsafe(_settle, future, outcome)
            del loop, future, context, fn, args, outcome


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return  # cancelled while the call ran: its outcome is discarded
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


THREADS = StepThreads()
"""The process's pool."""


def _after_fork() -> None:
    global THREADS
    THREADS = StepThreads()  # the parent's threads do not exist in a forked child


os.register_at_fork(after_in_child=_after_fork)


def call(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: tuple[Any, ...]
) -> asyncio.Future[Any]:
    """:meth:`StepThreads.call` on the process's pool."""
    return THREADS.call(loop, fn, args)


def release_idle() -> None:
    """:meth:`StepThreads.release_idle` on the process's pool."""
    THREADS.release_idle()


def wait_idle(timeout: float) -> bool:
    """:meth:`StepThreads.wait_idle` on the process's pool."""
    return THREADS.wait_idle(timeout)
