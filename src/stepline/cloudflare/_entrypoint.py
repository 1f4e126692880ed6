"""``WorkflowEntrypoint``: a Cloudflare Python workflow class, run by stepline's engine.

A subclass's ``async def run(self, event, step)`` is wrapped, as the SDK wraps it, so that it
receives the SDK's shapes: the event as a dict (:class:`~._values.WorkflowEvent`) and the step
as Cloudflare's :class:`~._step.WorkflowStep`. It is a :class:`stepline.Workflow`, so the engine,
the CLI, the HTTP APIs and ``stepline.testing`` take it as any other.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..step import WorkflowStep as SteplineStep
from ..workflow import Workflow
from ..workflow import WorkflowEvent as SteplineEvent
from ._bindings import Env
from ._step import WorkflowStep
from ._values import event_of

_WRAPPED = "_stepline_cloudflare_run"


class WorkflowEntrypoint(Workflow):
    """Base class of a Cloudflare Python workflow: ``async def run(self, event, step)``.

    ``self.env`` holds the project's bindings (:class:`~._bindings.Env`), given by
    ``stepline.cloudflare.load_wrangler`` (empty otherwise); ``self.ctx`` is None (there is no
    Workers execution context). The workflow's name is the wrangler file's, or the class name in
    kebab-case.
    """

    env: Env = Env()
    ctx: Any = None

    def __init__(self, ctx: Any = None, env: Env | None = None) -> None:
        self.ctx = ctx
        if env is not None:
            self.env = env

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        run = cls.__dict__.get("run")
        if run is not None and not getattr(run, _WRAPPED, False):
            cls.run = _shaped(run)  # type: ignore[method-assign]


def _shaped(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` given the SDK's event and step (a sync ``run`` returning an awaitable is awaited,
    as the SDK does)."""

    @functools.wraps(run)
    async def wrapped(self: WorkflowEntrypoint, event: Any, step: Any) -> Any:
        if isinstance(event, SteplineEvent):
            event = event_of(event)
        if isinstance(step, SteplineStep):
            step = WorkflowStep(step)
        result = run(self, event, step)
        if inspect.isawaitable(result):
            result = await result
        return result

    setattr(wrapped, _WRAPPED, True)
    return wrapped


class WorkerEntrypoint:
    """The SDK's base of a Worker's handlers (``fetch``, ``queue``, ...), so that a module that
    defines one imports; stepline never calls its handlers (it serves the workflows)."""

    env: Env = Env()
    ctx: Any = None

    def __init__(self, ctx: Any = None, env: Env | None = None) -> None:
        self.ctx = ctx
        if env is not None:
            self.env = env
