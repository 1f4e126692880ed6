"""The ``step`` a Cloudflare Python workflow's ``run()`` receives: the methods of the SDK's
``WorkflowStep``, with its signatures and units, over stepline's own step (one runtime path)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from .._stepdeps import StepHandle
from ..step import WorkflowStep as SteplineStep
from ._values import (
    context_of,
    converted,
    epoch_seconds,
    failure_of,
    received_event,
    seconds,
    step_config,
)


class WorkflowStep:
    """Cloudflare's Python ``WorkflowStep``: ``@step.do(...)``, ``sleep``, ``sleep_until`` and
    ``wait_for_event``. A bare number is a duration in milliseconds (or epoch milliseconds),
    as the SDK hands it to JavaScript."""

    __slots__ = ("_declared", "_step")

    def __init__(self, step: SteplineStep) -> None:
        self._step = step
        self._declared = step._declared_steps(
            context=context_of, result=converted, failure=failure_of
        )

    def do(
        self,
        name: str | None = None,
        *,
        concurrent: bool = False,
        config: dict[str, Any] | None = None,
        depends: Sequence[StepHandle] | None = None,
    ) -> Callable[[Callable[..., Any]], StepHandle]:
        """``@step.do(name=None, *, concurrent=False, config=None)``: the decorated function is
        the step (named after it by default); its parameters name earlier steps, whose results
        it receives, and ``ctx`` the step context. ``config`` is Cloudflare's step config
        (``retries``: ``limit``, ``delay``, ``backoff``; ``timeout``). ``depends=[...]`` is the
        SDK's older form, listing the steps in parameter order."""
        checked = step_config(config, name)
        return self._declared.decorator(
            name, concurrent=concurrent, config=checked, depends=depends
        )

    def sleep(self, name: str, duration: Any) -> Coroutine[Any, Any, None]:
        """Sleep durably for ``duration``: ``"10 seconds"`` or a number of milliseconds."""
        return self._step.sleep(name, seconds(duration, what=f"duration of sleep {name!r}"))

    def sleep_until(self, name: str, timestamp: Any) -> Coroutine[Any, Any, None]:
        """Sleep durably until ``timestamp``: a datetime (naive: UTC) or epoch milliseconds."""
        when = epoch_seconds(timestamp, what=f"timestamp of sleep_until {name!r}")
        return self._step.sleep_until(name, when)

    def wait_for_event(self, name: str, event_type: str, /, timeout: Any = "24 hours") -> Any:
        """Wait durably for an event of ``event_type``; returns ``{payload, timestamp, type}``.
        ``timeout``: ``"1 hour"`` or milliseconds (on timeout
        :class:`~stepline.StepTimeoutError`)."""
        limit = seconds(timeout, what=f"timeout of wait_for_event {name!r}")
        return self._declared.track("wait_for_event", name, self._wait(name, event_type, limit))

    async def _wait(self, name: str, event_type: str, limit: float) -> Any:
        record = await self._step.wait_for_event(name, type=event_type, timeout=limit)
        return received_event(record)
