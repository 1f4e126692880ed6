"""Step calls that ``run()`` never awaited.

``WorkflowStep``'s methods return the step's coroutine after noting it here. When ``run()``
ends, the calls still unstarted are closed (so no "never awaited" warning escapes) and, if
``run()`` returned, the instance ends errored naming them: the step never ran, and completing
the instance as if it had would be wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")

_PRUNE_AT = 1024
"""Calls noted before the list is pruned of those already started (amortised)."""


class StepCalls:
    """The step calls of one run(): (method, name, coroutine)."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: list[tuple[str, str, Coroutine[Any, Any, Any]]] = []

    def track(
        self, method: str, name: str, call: Coroutine[Any, Any, _T]
    ) -> Coroutine[Any, Any, _T]:
        """Note a step call (returned as is)."""
        calls = self._calls
        calls.append((method, name, call))
        if len(calls) >= _PRUNE_AT:
            self._calls = [
                c for c in calls if inspect.getcoroutinestate(c[2]) == inspect.CORO_CREATED
            ]
        return call

    def drop_unawaited(self) -> str | None:
        """Close the calls never awaited; say which they were (None: there were none)."""
        dropped: list[tuple[str, str]] = []
        for method, name, call in self._calls:
            if inspect.getcoroutinestate(call) == inspect.CORO_CREATED:
                dropped.append((method, name))
                call.close()
        self._calls = []
        if not dropped:
            return None
        calls = ", ".join(f"step.{method}({name!r})" for method, name in dropped[:5])
        more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
        return (
            f"run() called {calls}{more} without awaiting it, so the step never ran; write "
            "`await step.do(...)`, or pass the calls to asyncio.gather(...) and await that"
        )
