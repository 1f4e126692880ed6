"""Step calls made where no step can run: never awaited, after run() ended, inside a step.

``WorkflowStep``'s methods return the step's coroutine after noting it here. When ``run()``
ends, the calls still unstarted are closed (so no "never awaited" warning escapes) and, if
``run()`` returned, the instance ends errored naming them: the step never ran, and completing
the instance as if it had would be wrong. A call once the activation has ended (a ``step`` kept
past ``run()``, a task left running) is refused, and so is a call from inside a step's callback:
a step there would be recorded under the outer one, and replayed when the outer one is not.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from ..errors import DefinitionError, InstanceFatalError

_T = TypeVar("_T")

_PRUNE_AT = 1024
"""Calls noted before the list is pruned of those already started (amortised)."""


class CallbackScope:
    """The step attempt whose callback the current context runs: its label, and how many items
    the attempt published (a retried attempt counts from 0 again, so its items have the origins
    the first one's had, see :mod:`.streams`)."""

    __slots__ = ("label", "published")

    def __init__(self, label: str) -> None:
        self.label = label
        self.published = 0


IN_CALLBACK: ContextVar[CallbackScope | None] = ContextVar("stepline_step_callback", default=None)
"""The step whose callback the current context runs (set by the step while it calls it)."""

IN_QUERY: ContextVar[str | None] = ContextVar("stepline_read_only", default=None)
"""The read-only code the current context runs (``"query 'total'"``, an update's validator:
:mod:`.readonly`): no step may run there."""


class StepCalls:
    """The step calls of one run(): (method, name, coroutine)."""

    __slots__ = ("_calls", "_ended", "_instance")

    def __init__(self, instance: str) -> None:
        self._calls: list[tuple[str, str, Coroutine[Any, Any, Any]]] = []
        self._ended = False
        self._instance = instance

    def end(self) -> None:
        """The activation is over: refuse every later call."""
        self._ended = True

    def track(
        self, method: str, name: str, call: Coroutine[Any, Any, _T]
    ) -> Coroutine[Any, Any, _T]:
        """Note a step call (returned as is), or refuse it (closed) where no step can run. A
        step's callback may publish (not a step of ``run()``: returned untracked)."""
        inside = IN_CALLBACK.get()
        if self._ended or inside is not None or IN_QUERY.get() is not None:
            if method == "publish" and inside is not None and not self._ended:
                return call
            call.close()
            self._refuse(f"step.{method}({name!r})")
        calls = self._calls
        calls.append((method, name, call))
        if len(calls) >= _PRUNE_AT:
            self._calls = [
                c for c in calls if inspect.getcoroutinestate(c[2]) == inspect.CORO_CREATED
            ]
        return call

    def _refuse(self, what: str) -> None:
        where = IN_QUERY.get()
        if where is not None:
            raise DefinitionError(
                f"{where} called {what}; it may only read the workflow's state: run steps in "
                "run() or in an update handler"
            )
        scope = IN_CALLBACK.get()
        if scope is not None:
            outer = scope.label
            # Ends the instance at once: retrying the outer step would only nest it again.
            raise InstanceFatalError(
                "DefinitionError",
                f"{what} was called inside the callback of step {outer!r}; steps do not nest: "
                f"call it from run(), before or after {outer!r}",
            )
        raise DefinitionError(
            f"{what} was called after run() of {self._instance} ended, so it cannot run; "
            "use `step` only inside run(), and await every task that uses it before run() "
            "returns"
        )

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
