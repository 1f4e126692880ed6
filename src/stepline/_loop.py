"""The event loop stepline's own entry points run on: uvloop where it is installed.

The CLI (``stepline worker``, ``serve``, ``run`` and the rest) and the synchronous API start
their own event loops; an application that embeds an :class:`~stepline.Engine` runs it on
whatever loop the application chose. uvloop's loop is written in C on libuv: every database
round trip wakes a task when its socket becomes readable, and that costs a fraction of what
asyncio's pure-Python selector loop pays (docs/performance.md has the figures).
Behaviour is the same on both; the choice only moves speed.

``$STEPLINE_EVENT_LOOP`` overrides the choice: ``auto`` (the default: uvloop if importable),
``uvloop`` (required: an error if it is missing) or ``asyncio``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from .errors import ConfigError

T = TypeVar("T")

ENV_EVENT_LOOP = "STEPLINE_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_name(environ: Mapping[str, str] | None = None) -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`new_event_loop` makes under ``environ``."""
    env = os.environ if environ is None else environ
    wanted = env.get(ENV_EVENT_LOOP, "").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise ConfigError(
            f"{ENV_EVENT_LOOP}={env[ENV_EVENT_LOOP]!r} is not one of {', '.join(CHOICES)}"
        )
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ConfigError(
                f"{ENV_EVENT_LOOP}=uvloop, but uvloop is not installed (pip install uvloop)"
            ) from None
        return "asyncio"
    return "uvloop"


def running_loop_name() -> str:
    """``uvloop`` or ``asyncio``: the kind of the running loop (an application's may be either)."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def loop_factory(environ: Mapping[str, str] | None = None) -> LoopFactory:
    """The factory of the loop :func:`loop_name` names."""
    if loop_name(environ) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the configured kind (for a loop in a thread of its own)."""
    return loop_factory()()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """:func:`asyncio.run` on the configured loop."""
    try:
        factory = loop_factory()
    except BaseException:
        coro.close()  # never started: no "never awaited" warning on top of the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)
