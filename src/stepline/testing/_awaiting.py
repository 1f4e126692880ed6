"""Calls of the toolkit that a test forgot to await, reported by name.

A coroutine method called without ``await`` does nothing, and Python says so only with a
"never awaited" warning at garbage collection, far from the test. Every coroutine method of the
environment and its instances notes its coroutine here; the next one that starts, and the
environment's close, raise :class:`NotAwaitedError` for any noted earlier that has neither
started nor been scheduled (``asyncio.create_task``, ``asyncio.gather``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


class NotAwaitedError(TypeError):
    """A coroutine method of :mod:`stepline.testing` was called without ``await``."""


class Tracker:
    """The coroutines of one environment's calls that have not started yet."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: list[tuple[Coroutine[Any, Any, Any], str]] = []

    def note(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        self._calls.append((coro, what))

    def check(self) -> None:
        """Raise for a call made earlier that nothing awaited or scheduled (it is closed: it
        never runs)."""
        if not self._calls:
            return
        waiting = [
            c for c in self._calls if inspect.getcoroutinestate(c[0]) == inspect.CORO_CREATED
        ]
        self._calls = []
        if not waiting:
            return
        try:
            scheduled = {id(task.get_coro()) for task in asyncio.all_tasks()}
        except RuntimeError:  # no running loop: nothing can be scheduled
            scheduled = set()
        forgotten = [c for c in waiting if id(c[0]) not in scheduled]
        self._calls = [c for c in waiting if id(c[0]) in scheduled]
        if forgotten:
            for coro, _ in forgotten:
                coro.close()
            what = forgotten[0][1]
            raise NotAwaitedError(
                f"{what} was never awaited, so it did not run; write `await {what}`"
            )


class HasTracker(Protocol):
    @property
    def tracker(self) -> Tracker: ...


S = TypeVar("S", bound=HasTracker)


async def _checked(tracker: Tracker, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
    tracker.check()
    return await start()


def tracked(
    owner: str,
) -> Callable[
    [Callable[Concatenate[S, P], Coroutine[Any, Any, T]]],
    Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
]:
    """Note each call of a coroutine method (shown in errors as ``owner.method(args)``)."""

    def decorate(
        method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
        def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
            shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
            what = f"{owner}.{method.__name__}({', '.join(shown)})"
            tracker = self.tracker
            # The method's own coroutine is made only when this one starts: a call closed
            # unawaited leaves nothing behind to warn at garbage collection.
            coro = _checked(tracker, functools.partial(method, self, *args, **kwargs))
            tracker.note(coro, what)
            return coro

        functools.update_wrapper(call, method)
        return call

    return decorate
