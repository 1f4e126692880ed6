"""The threads sync callbacks run in, so that they never block the event loop.

A small pool with a cheaper hand-off than ``loop.run_in_executor``. A call goes to the threads
through one queue, as the function, its arguments and a copy of the caller's context, and a
byte on a pipe wakes an idle thread. Its outcome comes back in one of two ways:

- Waited for: a call made while no other runs in the pool (one sync step after another, the
  common case) has the calling thread wait up to :data:`WAIT` for it, in ``select`` on a pipe
  of its own that the step thread writes a byte to when done. Both wake-ups are then syscalls
  made with the GIL released, so that neither thread wakes only to wait for the GIL the other
  still holds, and the loop skips its own wake-up (docs/performance.md has the figures). Past
  the bound the call goes on as below and the loop runs on: a slow callback holds the loop for
  :data:`WAIT` at most. In one turn of the loop only one task waits, for a few calls at most,
  so that tasks ready together (instances side by side) hand their calls to the threads
  together and a task calling in a loop lets the others run.
- Otherwise: one ``loop.call_soon_threadsafe`` settles an asyncio future.

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
import select
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

LIMIT = min(32, (os.cpu_count() or 1) + 4)
"""Threads at most; calls beyond them wait in the queue for one to finish."""

NAME = "stepline-step"
"""The threads' name prefix."""

WAIT = 50e-6
"""How long a call made while the pool is otherwise idle waits for its outcome on the calling
thread (the event loop's) before the loop runs on: long enough for a quick callback's round trip
on a busy machine, and no longer than a step's checkpoint commit holds the loop anyway. (Not on
Windows, where ``select`` takes no pipe.)"""


WAITS_PER_TURN = 16
"""How many calls, one after another, one task may wait for in one turn of the loop."""


class _Call:
    """One call and, while its caller waits for it, the pipe to ring when it ends."""

    __slots__ = ("args", "bell", "context", "fn", "future", "loop", "outcome")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        bell: _Bell | None,
    ) -> None:
        self.loop = loop
        self.future = future
        self.context = contextvars.copy_context()
        self.fn = fn
        self.args = args
        self.bell = bell
        """Under the pool's lock: the caller's pipe while it waits, None once it stopped."""
        self.outcome: tuple[bool, Any] | None = None
        """Set (under the pool's lock) only for a caller that still waits."""


class _Bell:
    """A calling thread's pipe: a step thread writes a byte when the call waited for ends."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        self.waiter: tuple[asyncio.AbstractEventLoop, object] | None = None
        """The loop and task whose calls were waited for in this turn of the loop, if any."""
        self.left = 0
        """How many more of its calls may be waited for in this turn."""

    def next_turn(self) -> None:
        self.waiter = None

    def __del__(self, close: Callable[[int], None] = os.close) -> None:  # its thread ended
        close(self.read)
        close(self.write)


_bells = threading.local()


def _bell() -> _Bell:
    bell: _Bell | None = getattr(_bells, "bell", None)
    if bell is None:
        bell = _bells.bell = _Bell()
    return bell


class StepThreads:
    """The pool. Every count is kept under one lock, so that each queued call is matched by a
    thread that will take it: an idle one (woken by a byte on the pipe), a new one, or (at the
    limit) the next to finish."""

    def __init__(self, limit: int = LIMIT, wait: float = WAIT) -> None:
        self._limit = limit
        self._wait_for = 0.0 if sys.platform == "win32" else wait
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe()
        self._lock = threading.Condition()
        self._threads = 0
        """Threads running or starting, not counting those told to exit."""
        self._idle = 0
        """Threads waiting for a call that none is queued for."""
        self._backlog = 0
        """Calls queued for the next thread to finish (all threads busy)."""
        self._started = 0

    def __del__(self, close: Callable[[int], None] = os.close) -> None:  # no thread holds it
        close(self._wake_read)
        close(self._wake_write)

    def call(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: tuple[Any, ...]
    ) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` in a thread, in a copy of the current context; the future (of
        ``loop``, the running loop) gets its result or exception, done on return if the call
        ended within :data:`WAIT`. One cancelled meanwhile (a timeout, a stopped activation)
        drops what the call returns."""
        future = loop.create_future()
        bell = None
        with self._lock:
            if self._idle:
                wake = True
                if self._idle == self._threads and self._wait_for:
                    bell = self._may_wait(loop)
                self._idle -= 1
            else:
                wake = False
                if self._threads < self._limit:
                    self._start()
                else:
                    self._backlog += 1
        call = _Call(loop, future, fn, args, bell)
        self._calls.put(call)
        if wake:
            os.write(self._wake_write, b"\0")  # with the GIL released: the thread can take it
        if bell is not None:
            self._wait(call, bell)
        return future

    def _may_wait(self, loop: asyncio.AbstractEventLoop) -> _Bell | None:
        """The calling thread's bell if it may wait: in one turn of the loop, only one task
        waits (a step after another), so that tasks ready meanwhile go on at once and their
        calls reach the threads together, and for :data:`WAITS_PER_TURN` calls at most, so that
        a task making call after call without yielding lets the loop run."""
        bell = _bell()
        waiter = (loop, asyncio.current_task(loop))
        if bell.waiter is None or bell.waiter[0] is not loop:  # or that loop closed meanwhile
            bell.waiter, bell.left = waiter, WAITS_PER_TURN
            loop.call_soon(bell.next_turn)
        elif bell.waiter[1] is not waiter[1] or not bell.left:
            return None
        bell.left -= 1
        return bell

    def _wait(self, call: _Call, bell: _Bell) -> None:
        """Wait a while for ``call`` (:data:`WAIT`); settle its future if it ended."""
        try:
            select.select([bell.read], [], [], self._wait_for)
        finally:
            with self._lock:
                outcome, call.bell = call.outcome, None  # not ended: settled through the loop
            if outcome is not None:
                os.read(bell.read, 1)  # its byte, written or on its way: not for the next wait
        if outcome is not None:
            _settle(call.future, outcome)

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
        if idle:
            os.write(self._wake_write, b"\0" * idle)

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
        get, lock, read, wake = self._calls.get, self._lock, os.read, self._wake_read
        call = get()  # a new thread is started for a call, not woken for it
        while call is not None:
            try:
                outcome: tuple[bool, Any] = (True, call.context.run(call.fn, *call.args))
            except BaseException as exc:  # the awaiting task gets any error, as from an executor
                outcome = (False, exc)
            # Free before the outcome is out: whoever it wakes may release idle threads.
            with lock:
                if self._backlog:
                    self._backlog -= 1
                    idle = False
                else:
                    self._idle += 1
                    idle = True
                    if self._idle == self._threads:
                        lock.notify_all()
                bell = call.bell
                if bell is not None:
                    call.outcome = outcome
            if bell is not None:
                os.write(bell.write, b"\0")
            else:
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
                    call.loop.call_soon_threadsafe(_settle, call.future, outcome)
            del call, outcome, bell
            if idle:
                read(wake, 1)
            call = get()


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
    global THREADS, _bells
    THREADS = StepThreads()  # the parent's threads do not exist in a forked child
    _bells = threading.local()  # nor may its pipes be shared: a byte could reach either side


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
