"""The ``step`` object that ``Workflow.run`` receives, and the context a step callback may take."""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, overload

from ._shown import shown
from ._stepdeps import Adapt, DeclaredSteps, StepHandle
from .config import StepConfig
from .durations import Duration, parse_duration
from .records import EventRecord
from .values import convert, returns_of

StepCallback = Callable[..., Any]
RollbackCallback = Callable[..., Any]
EventMatch = Mapping[str, Any] | Callable[[Any], bool]
"""What ``wait_for_event(match=...)`` takes: the payload's keys and values an event must have
(top-level, compared with ``==``), or a predicate called with the event's payload."""

_T = TypeVar("_T")

_PATCH_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def validate_patch_id(patch_id: object) -> str:
    """A patch id is 1-100 ASCII letters, digits, '_', '.' or '-', not starting with '.' or
    '-': else ``ValueError`` naming it."""
    if not isinstance(patch_id, str) or _PATCH_ID.fullmatch(patch_id) is None:
        raise ValueError(
            f"invalid patch id {shown(patch_id)}: use 1-100 ASCII letters, digits, '_', '.' or "
            "'-', starting with a letter, digit or '_'"
        )
    return patch_id


@dataclass(frozen=True)
class StepContext:
    """Optional argument of a step callback: which step and which attempt is running."""

    step_name: str
    count: int
    attempt: int
    config: StepConfig
    instance_id: str
    workflow_name: str
    traceparent: str | None = None
    """The W3C ``traceparent`` of this attempt's span while stepline traces (docs/observability.md),
    to carry the trace on to what the step calls; None otherwise."""


class StepRunner(Protocol):
    """What runs the steps of one activation (the runtime's ``Activation``): one coroutine per
    step call, and :meth:`track` to note each call of ``run()``."""

    def do(
        self,
        name: str,
        config: Any,
        callback: StepCallback,
        rollback: RollbackCallback | None,
        rollback_config: Any,
    ) -> Coroutine[Any, Any, Any]: ...

    def sleep(self, name: str, duration: Duration) -> Coroutine[Any, Any, None]: ...

    def sleep_until(self, name: str, when: datetime | float | int) -> Coroutine[Any, Any, None]: ...

    def wait_for_event(
        self, name: str, event_type: str, timeout: Duration, match: EventMatch | None
    ) -> Coroutine[Any, Any, EventRecord]: ...

    def publish(
        self, stream: str, value: Any, keep: int | None, keep_for: Duration | None
    ) -> Coroutine[Any, Any, None]: ...

    def tag(self, key: str, value: Any) -> Coroutine[Any, Any, None]: ...

    def start_workflow(
        self, workflow: str, params: Any, child_id: str | None, options: ChildOptions
    ) -> Coroutine[Any, Any, str]: ...

    def wait_for_workflow(
        self, workflow: str, child_id: str, timeout: Duration
    ) -> Coroutine[Any, Any, Any]: ...

    def track(
        self, method: str, name: str, call: Coroutine[Any, Any, _T]
    ) -> Coroutine[Any, Any, _T]: ...

    def patched(self, patch_id: str) -> bool: ...

    def deprecate_patch(self, patch_id: str) -> None: ...


ParentClosePolicy = Literal["terminate", "request_cancel", "abandon"]
PARENT_CLOSE_POLICIES: tuple[ParentClosePolicy, ...] = ("terminate", "request_cancel", "abandon")


@dataclass(frozen=True)
class ChildOptions:
    """How a child workflow is started (:meth:`WorkflowStep.start_workflow`)."""

    on_parent_close: ParentClosePolicy = "terminate"
    timeout: float | None = None
    """Its own deadline in seconds from its start; None: its workflow's, else its parent's."""

    @classmethod
    def checked(cls, on_parent_close: object, timeout: Duration | None) -> ChildOptions:
        """The options, or ``ValueError`` naming the value refused."""
        if on_parent_close not in PARENT_CLOSE_POLICIES:
            raise ValueError(
                f"invalid on_parent_close {on_parent_close!r}: use one of "
                f"{', '.join(PARENT_CLOSE_POLICIES)}"
            )
        seconds = None if timeout is None else parse_duration(timeout, what="timeout")
        return cls(on_parent_close, seconds)


async def _converted(call: Coroutine[Any, Any, Any], declared: Any, name: str) -> Any:
    """A step's result as the type it declares."""
    return convert(await call, declared, f"the result of step {name!r}")


class Stream:
    """One stream of the instance, to publish to (``step.stream(name)``)."""

    __slots__ = ("_activation", "_keep", "_keep_for", "name")

    def __init__(
        self, activation: StepRunner, name: str, keep: int | None, keep_for: Duration | None
    ) -> None:
        self._activation = activation
        self.name = name
        self._keep = keep
        self._keep_for = keep_for

    def publish(self, value: Any = None) -> Coroutine[Any, Any, None]:
        """Append ``value`` to the stream (as :meth:`WorkflowStep.publish`)."""
        activation = self._activation
        call = activation.publish(self.name, value, self._keep, self._keep_for)
        return activation.track("publish", self.name, call)


class WorkflowStep:
    """Durable steps. Every method records its result; replays return the recorded result.

    Created by the engine for each activation; user code only calls its methods.
    """

    __slots__ = ("_activation", "_declared")

    def __init__(self, activation: StepRunner) -> None:
        self._activation = activation
        self._declared: DeclaredSteps | None = None

    # Every method returns the coroutine of the step (await it, or pass it to asyncio.gather):
    # the activation notes each one, so that a step call run() never awaits ends the instance
    # errored instead of letting it complete as if the step had run.

    @overload
    def do(
        self,
        name: str | None = None,
        /,
        *,
        concurrent: bool = False,
        config: StepConfig | dict[str, Any] | None = None,
        depends: Sequence[StepHandle] | None = None,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
    ) -> Callable[[StepCallback], StepHandle]: ...

    @overload
    def do(
        self,
        name: str,
        callback: StepCallback,
        /,
        *,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
        type: builtins.type[_T],
    ) -> Coroutine[Any, Any, _T]: ...

    @overload
    def do(
        self,
        name: str,
        config: StepConfig | dict[str, Any],
        callback: StepCallback,
        /,
        *,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
        type: builtins.type[_T],
    ) -> Coroutine[Any, Any, _T]: ...

    @overload
    def do(
        self,
        name: str,
        callback: StepCallback,
        /,
        *,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
        type: Any = None,
    ) -> Coroutine[Any, Any, Any]: ...

    @overload
    def do(
        self,
        name: str,
        config: StepConfig | dict[str, Any],
        callback: StepCallback,
        /,
        *,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
        type: Any = None,
    ) -> Coroutine[Any, Any, Any]: ...

    def do(
        self,
        name: str | None = None,
        *args: Any,
        concurrent: bool = False,
        config: StepConfig | dict[str, Any] | None = None,
        depends: Sequence[StepHandle] | None = None,
        rollback: RollbackCallback | None = None,
        rollback_config: StepConfig | dict[str, Any] | None = None,
        type: Any = None,
    ) -> Any:
        """Run ``callback`` once (with retries) and record its result.

        ``step.do(name, callback)`` or ``step.do(name, config, callback)``. The callback is sync
        (run in a thread, or on the loop with ``{"inline": True}``) or async, taking no argument
        or one :class:`StepContext`. When retries are exhausted
        :class:`~stepline.StepFailedError` is raised here. ``rollback`` is
        called if a later error ends the instance (saga), as ``rollback(error, output)``,
        ``rollback(error, output, ctx)`` or ``rollback(ctx)`` (``ctx``: the rollback step's
        :class:`StepContext`), after the parameters it declares. The result may be any value
        docs/data.md lists; ``type=Order`` (or the callback's ``-> Order``) converts what is
        read back into that type, on the first run and on every replay.

        Without a callback it is a decorator (Cloudflare's Python form): ``@step.do()`` (the
        step is named after the function), ``@step.do("name", concurrent=..., config=...)``.
        The function's parameters name earlier decorated steps, whose results it receives (a
        parameter ``ctx`` receives the :class:`StepContext`); ``await fn()`` resolves them, each
        once per ``run()`` (all at once with ``concurrent=True``), then runs the step;
        ``rollback`` as above. ``depends=[...]`` lists the steps in parameter order instead
        (the SDK's older form).
        """
        if not args:
            return self._declared_steps().decorator(
                name,
                concurrent=concurrent,
                config=config,
                depends=depends,
                rollback=rollback,
                rollback_config=rollback_config,
            )
        if concurrent or config is not None or depends is not None:
            raise TypeError(
                "concurrent=, config= and depends= belong to the @step.do decorator; a step "
                "with a callback takes its config as step.do(name, config, callback)"
            )
        if len(args) == 1:
            step_config, callback = None, args[0]
        elif len(args) == 2:
            step_config, callback = args
        else:
            raise TypeError("use step.do(name, callback) or step.do(name, config, callback)")
        if not isinstance(name, str):
            raise TypeError(f"step.do takes the step's name first, got {name!r}")
        activation = self._activation
        call = activation.do(name, step_config, callback, rollback, rollback_config)
        declared = returns_of(callback) if type is None else type
        if declared is not None:
            call = _converted(call, declared, name)
        return activation.track("do", name, call)

    def _declared_steps(
        self,
        *,
        context: Adapt | None = None,
        result: Adapt | None = None,
        failure: Callable[[Exception], BaseException] | None = None,
    ) -> DeclaredSteps:
        """The decorated steps of this ``run()``; Cloudflare's layer makes its own, with its
        shapes of the step context, the results and a failed step's error."""
        if context is not None or result is not None or failure is not None:
            return DeclaredSteps(
                self.do, self._activation.track, context=context, result=result, failure=failure
            )
        if self._declared is None:
            self._declared = DeclaredSteps(self.do, self._activation.track)
        return self._declared

    def sleep(self, name: str, duration: Duration) -> Coroutine[Any, Any, None]:
        """Sleep durably: the instance is ``waiting`` and holds no memory, thread or lease."""
        activation = self._activation
        return activation.track("sleep", name, activation.sleep(name, duration))

    def sleep_until(self, name: str, when: datetime | float | int) -> Coroutine[Any, Any, None]:
        """Sleep durably until a datetime (naive means UTC) or epoch seconds."""
        activation = self._activation
        return activation.track("sleep_until", name, activation.sleep_until(name, when))

    def wait_for_event(
        self,
        name: str,
        *,
        type: str,
        timeout: Duration = "24 hours",
        match: EventMatch | None = None,
    ) -> Coroutine[Any, Any, EventRecord]:
        """Wait durably for an event of ``type`` sent with ``instance.send_event``.

        Events sent before the wait are kept and delivered in order. On timeout
        :class:`~stepline.StepTimeoutError` is raised (catchable; not retried).

        ``match``: only an event whose payload has these keys and values (``{"order_id":
        oid}``, top-level keys compared with ``==``), or for which this predicate of the
        payload returns true, ends the wait; the others stay pending for other waits. A
        predicate that raises is taken as "no" for that event (logged as a warning).
        """
        activation = self._activation
        call = activation.wait_for_event(name, type, timeout, match)
        return activation.track("wait_for_event", name, call)

    def publish(self, stream: str, value: Any = None) -> Coroutine[Any, Any, None]:
        """Append ``value`` (JSON) to the instance's stream ``stream``, for readers of
        ``instance.subscribe(stream)`` (docs/messaging.md). From ``run()`` it is recorded as a
        step (a replay publishes nothing again); from a step's async callback it is written at
        once, and a retried attempt's items are not appended twice. Kept: the engine's
        ``stream_keep`` last items, for ``stream_keep_for``."""
        activation = self._activation
        return activation.track("publish", stream, activation.publish(stream, value, None, None))

    def tag(self, key: str, value: Any) -> Coroutine[Any, Any, None]:
        """Tag the instance ``key = value`` (text, a number or a boolean), to find it by with a
        filter (docs/operations.md): merged into its tags at once, from ``run()`` or a step's
        async callback. Calling it again on a replay writes the same value again."""
        activation = self._activation
        return activation.track("tag", key, activation.tag(key, value))

    def stream(
        self, name: str, *, keep: int | None = None, keep_for: Duration | None = None
    ) -> Stream:
        """A handle on the stream ``name`` for many values: ``await progress.publish(v)``;
        ``keep`` (items) and ``keep_for`` (a duration) bound what it keeps instead of the
        engine's defaults."""
        return Stream(self._activation, name, keep, keep_for)

    def patched(self, patch_id: str) -> bool:
        """Whether this instance takes the code under the patch ``patch_id``
        (``if step.patched("sms-reminder"): ...``), decided once per instance and recorded.

        True for an instance that reaches this call on new ground (it records a marker, so its
        replays answer true too) or that recorded the marker before; false for an instance that
        went past this point without the patch (it replays its history: the old path). Not
        awaited. An invalid id raises ``ValueError``. See docs/versioning.md.
        """
        return self._activation.patched(patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """Say that the patch ``patch_id`` is now the only path (its ``if`` removed): instances
        that recorded its marker keep replaying; nothing is recorded. Remove this call once no
        instance that recorded the marker is unfinished."""
        self._activation.deprecate_patch(patch_id)

    def start_workflow(
        self,
        workflow: str,
        params: Any = None,
        *,
        id: str | None = None,
        on_parent_close: ParentClosePolicy = "terminate",
        timeout: Duration | None = None,
    ) -> Coroutine[Any, Any, str]:
        """Start an instance of another workflow, once (replay does not start a second one).

        Returns the child's instance id (``id``, or one derived from this instance and step).
        ``on_parent_close``: what this instance's end, errored or terminated, does to the child
        while it is unfinished: ``"terminate"`` (the default) ends it ``terminated``,
        ``"request_cancel"`` makes it run its rollbacks and end ``errored`` with
        :class:`~stepline.WorkflowCancelledError`, ``"abandon"`` leaves it running.
        ``timeout``: the child's deadline from now; by default its workflow's ``timeout``,
        else this instance's deadline (docs/operations.md, "Children and their parent").
        """
        options = ChildOptions.checked(on_parent_close, timeout)
        activation = self._activation
        call = activation.start_workflow(workflow, params, id, options)
        return activation.track("start_workflow", workflow, call)

    def wait_for_workflow(
        self, workflow: str, id: str, *, timeout: Duration = "24 hours"
    ) -> Coroutine[Any, Any, Any]:
        """Suspend until the instance ``id`` of ``workflow`` ends; return its output.

        Raises :class:`~stepline.WorkflowFailedError` if it ended errored or terminated, and
        :class:`~stepline.StepTimeoutError` after ``timeout``.
        """
        activation = self._activation
        call = activation.wait_for_workflow(workflow, id, timeout)
        return activation.track("wait_for_workflow", id, call)
