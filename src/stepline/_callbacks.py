"""Calling user code: what a callback takes (its shape) and how it is invoked.

Step callbacks, rollbacks and DAG node functions may be sync or async, and may declare fewer
parameters than the engine can pass them; a :class:`CallbackShape`, read from the signature, says
both. :func:`invoke` runs async callbacks on the loop and sync ones in the step threads
(:mod:`._threads`), or on the loop when the step says they do not block.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType, MethodType
from typing import Any

from . import _threads


@dataclass(frozen=True, slots=True)
class CallbackShape:
    is_async: bool
    """Calling it returns a coroutine (async functions and async callable objects)."""
    arity: int
    """How many of the arguments the engine offers it takes (see the functions below)."""


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` returns a coroutine (async functions and async callable objects)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )


def positional_arity(fn: Callable[..., Any], *, fill: int, varargs: int, unknown: int) -> int:
    """How many positional arguments to pass ``fn``: its required ones, and at least ``fill`` of
    those it declares (parameters with defaults past that, such as ``n=name`` in a loop, are left
    alone); ``varargs`` if it takes ``*args``, ``unknown`` if its signature cannot be read."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return unknown
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return varargs
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(1 for p in positional if p.default is p.empty)
    return max(required, min(fill, len(positional)))


def step_shape(fn: Callable[..., Any]) -> CallbackShape:
    """A ``step.do`` callback: arity 1 takes the :class:`~stepline.StepContext`, 0 nothing."""
    return CallbackShape(is_async(fn), min(1, positional_arity(fn, fill=0, varargs=1, unknown=0)))


def rollback_shape(fn: Callable[..., Any]) -> CallbackShape:
    """A ``step.do`` rollback: how many of ``(error, output, ctx)`` it takes, as
    :func:`rollback_arguments` passes them (two if it declares two, as ``output=None``)."""
    return CallbackShape(is_async(fn), min(3, positional_arity(fn, fill=2, varargs=2, unknown=2)))


def rollback_arguments(arity: int, error: Any, output: Any, ctx: Any) -> tuple[Any, ...]:
    """The arguments of a ``step.do`` rollback: ``()``, ``(ctx)``, ``(error, output)`` or
    ``(error, output, ctx)``."""
    if arity == 2:
        return (error, output)
    if arity == 3:
        return (error, output, ctx)
    return (ctx,) if arity == 1 else ()


class ShapeMemo:
    """The shapes of step callbacks already seen, by code object: a workflow passes the same few
    functions (or closures of one ``def``) to ``step.do`` over and over, and reading a signature
    costs more than the rest of a step's bookkeeping. Owned by a worker's activation settings.
    """

    __slots__ = ("_shapes",)

    def __init__(self) -> None:
        self._shapes: dict[object, CallbackShape] = {}

    def step(self, fn: Callable[..., Any]) -> CallbackShape:
        key = _code_key(fn)
        if key is None:
            return step_shape(fn)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = step_shape(fn)
        return shape


def _code_key(fn: Callable[..., Any]) -> object | None:
    """What determines ``fn``'s shape, if its code alone does: plain functions and methods of
    them. One with attributes of its own (``functools.wraps`` sets ``__wrapped__``, which the
    signature follows) is read every time."""
    if type(fn) is FunctionType:
        return None if fn.__dict__ else fn.__code__
    if type(fn) is MethodType:
        func = fn.__func__
        if type(func) is FunctionType and not func.__dict__:
            return (func.__code__, "method")  # a bound method takes one argument less
    return None


async def invoke(
    fn: Callable[..., Any], is_async: bool, args: tuple[Any, ...], inline: bool = False
) -> Any:
    """Call a user callback with ``args``: async ones on the loop, sync ones in a step thread in
    a copy of the caller's context as ``asyncio.to_thread`` does, or on the loop if ``inline``
    (the step's config says it does not block). A sync callback that returns an awaitable has
    it awaited on the loop."""
    if is_async:
        return await fn(*args)
    if inline:
        result = fn(*args)
    else:
        result = await _threads.call(asyncio.get_running_loop(), fn, args)
    if inspect.isawaitable(result):
        return await result
    return result
