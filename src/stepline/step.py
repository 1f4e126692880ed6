"""The ``step`` object that ``Workflow.run`` receives, and the context a step callback may take."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

from .config import StepConfig
from .durations import Duration
from .records import EventRecord

if TYPE_CHECKING:
    from ._runtime import Activation

StepCallback = Callable[..., Any]
RollbackCallback = Callable[..., Any]


@dataclass(frozen=True)
class StepContext:
    """Optional argument of a step callback: which step and which attempt is running."""

    step_name: str
    count: int
    attempt: int
    config: StepConfig
    instance_id: str
    workflow_name: str


class WorkflowStep:
    """Durable steps. Every method records its result; replays return the recorded result.

    Created by the engine for each activation; user code only calls its methods.
    """

    __slots__ = ("_activation",)

    def __init__(self, activation: Activation) -> None:
        self._activation = activation

    @overload
    async def do(
        self,
        name: str,
        callback: StepCallback,
        /,
        *,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
    ) -> Any: ...

    @overload
    async def do(
        self,
        name: str,
        config: StepConfig | dict[str, Any],
        callback: StepCallback,
        /,
        *,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
    ) -> Any: ...

    async def do(
        self,
        name: str,
        *args: Any,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
    ) -> Any:
        """Run ``callback`` once (with retries) and record its JSON result.

        ``step.do(name, callback)`` or ``step.do(name, config, callback)``. The callback is sync
        (run in a thread pool) or async, taking no argument or one :class:`StepContext`. When
        retries are exhausted :class:`~stepline.StepFailedError` is raised here. ``rollback`` is
        called as ``rollback(error, output)`` if a later error ends the instance (saga).
        """
        if len(args) == 1:
            config, callback = None, args[0]
        elif len(args) == 2:
            config, callback = args
        else:
            raise TypeError("use step.do(name, callback) or step.do(name, config, callback)")
        return await self._activation.do(name, config, callback, rollback, rollback_config)

    async def sleep(self, name: str, duration: Duration) -> None:
        """Sleep durably: the instance is ``waiting`` and holds no memory, thread or lease."""
        await self._activation.sleep(name, duration)

    async def sleep_until(self, name: str, when: datetime | float | int) -> None:
        """Sleep durably until a datetime (naive means UTC) or epoch seconds."""
        await self._activation.sleep_until(name, when)

    async def wait_for_event(
        self, name: str, *, type: str, timeout: Duration = "24 hours"
    ) -> EventRecord:
        """Wait durably for an event of ``type`` sent with ``instance.send_event``.

        Events sent before the wait are kept and delivered in order. On timeout
        :class:`~stepline.StepTimeoutError` is raised (catchable; not retried).
        """
        return await self._activation.wait_for_event(name, type, timeout)

    async def start_workflow(
        self, workflow: str, params: Any = None, *, id: str | None = None
    ) -> str:
        """Start an instance of another workflow, once (replay does not start a second one).

        Returns the child's instance id (``id``, or one derived from this instance and step).
        """
        return await self._activation.start_workflow(workflow, params, id)

    async def wait_for_workflow(
        self, workflow: str, id: str, *, timeout: Duration = "24 hours"
    ) -> Any:
        """Suspend until the instance ``id`` of ``workflow`` ends; return its output.

        Raises :class:`~stepline.WorkflowFailedError` if it ended errored or terminated, and
        :class:`~stepline.StepTimeoutError` after ``timeout``.
        """
        return await self._activation.wait_for_workflow(workflow, id, timeout)
