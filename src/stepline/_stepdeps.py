"""The decorator form of ``step.do``: steps declared as functions, their dependencies named by
their parameters, as in Cloudflare's Python Workflows SDK.

``@step.do(...)`` turns a function into a :class:`StepHandle`; ``await handle()`` resolves the
handle's dependencies (each parameter names a step declared earlier in the same ``run()``, whose
result it receives; ``ctx`` receives the step context), then runs the function as an ordinary
``step.do(name, config, callback)``: replay, retries, timeouts and rollbacks are the runtime's
own. A dependency is resolved once per ``run()`` whatever the number of its dependents: its
result is kept, and a dependency still running is awaited rather than run again. Calling a
handle directly always runs a new step (its next occurrence), as Cloudflare's SDK does.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ._callbacks import is_async
from .config import StepConfig, parse_step_config
from .errors import DefinitionError
from .values import returns_of

CONTEXT_PARAMETER = "ctx"
_CONTEXT: Any = object()
"""Where a step's arguments take the step context (its ``ctx`` parameter)."""
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)

Do = Callable[..., Coroutine[Any, Any, Any]]
"""``step.do(name, config, callback, rollback=..., rollback_config=...)``: how a declared step
runs."""
Track = Callable[[str, str, Coroutine[Any, Any, Any]], Coroutine[Any, Any, Any]]
"""The activation's note of a step call (a handle called and never awaited is caught there)."""
Adapt = Callable[[Any], Any]


class StepDependencyError(DefinitionError, TypeError):
    """A decorated step cannot be resolved: a parameter names no declared step (nor ``ctx``),
    its dependencies form a cycle, or two functions claim one step name in one ``run()``.

    A :class:`~stepline.DefinitionError`, and a ``TypeError`` as Cloudflare's SDK raises for an
    unexpected parameter."""


class StepHandle:
    """What ``@step.do(...)`` returns: ``await handle()`` runs the step and returns its result."""

    __slots__ = (
        "_depends", "_steps", "concurrent", "config", "fn", "name", "parameters", "rollback",
        "rollback_config",
    )  # fmt: skip

    def __init__(
        self,
        steps: DeclaredSteps,
        name: str,
        fn: Callable[..., Any],
        config: StepConfig | None,
        concurrent: bool,
        depends: tuple[StepHandle, ...] | None,
        parameters: tuple[inspect.Parameter, ...],
        rollback: tuple[Callable[..., Any] | None, Any] = (None, None),
    ) -> None:
        self._steps = steps
        self.rollback, self.rollback_config = rollback
        self.name = name
        self.fn = fn
        self.config = config
        self.concurrent = concurrent
        self._depends = depends
        self.parameters = parameters

    def __repr__(self) -> str:
        return f"<step {self.name!r}: {_label(self.fn)}>"

    def __call__(self) -> Coroutine[Any, Any, Any]:
        return self._steps.call(self)


class DeclaredSteps:
    """The decorated steps of one ``run()``: declared by name, the results of those that ran
    (each dependency resolved once) and those running now.

    ``context`` and ``result`` adapt what the function receives (the step context, the results
    of its dependencies) and what a handle returns, and ``failure`` the error a failed step
    raises (the exception to raise instead, or the one given); Cloudflare's layer passes its
    shapes."""

    __slots__ = (
        "_context", "_do", "_failure", "_handles", "_result", "_results", "_running", "_track",
    )  # fmt: skip

    def __init__(
        self,
        do: Do,
        track: Track,
        *,
        context: Adapt | None = None,
        result: Adapt | None = None,
        failure: Callable[[Exception], BaseException] | None = None,
    ) -> None:
        self._do = do
        self._track = track
        self._context = context
        self._result = result
        self._failure = failure
        self._handles: dict[str, StepHandle] = {}
        self._results: dict[str, Any] = {}
        self._running: dict[str, asyncio.Future[Any]] = {}

    def decorator(
        self,
        name: str | None,
        *,
        concurrent: bool = False,
        config: Any = None,
        depends: Sequence[StepHandle] | None = None,
        rollback: Callable[..., Any] | None = None,
        rollback_config: Any = None,
    ) -> Callable[[Callable[..., Any]], StepHandle]:
        """``@step.do(name, concurrent=..., config=...)``: checks the arguments now, the
        function when it is decorated."""
        if name is not None and not isinstance(name, str):
            raise TypeError(
                f"step.do(name) takes the step's name as a string, got {type(name).__name__}; "
                "decorate a function with @step.do() or @step.do('name')"
            )
        if not isinstance(concurrent, bool):
            raise TypeError(f"step.do(concurrent=...) takes True or False, got {concurrent!r}")
        checked = _config(name, config)
        given = _depends(name, depends)
        if rollback is not None and not callable(rollback):
            raise TypeError(f"step.do(rollback=...) takes a function, got {rollback!r}")
        undo = (rollback, _config(name, rollback_config) if rollback is not None else None)

        def decorate(fn: Callable[..., Any]) -> StepHandle:
            return self.declare(name, fn, checked, concurrent, given, undo)

        return decorate

    def declare(
        self,
        name: str | None,
        fn: Callable[..., Any],
        config: StepConfig | None,
        concurrent: bool,
        depends: tuple[StepHandle, ...] | None,
        rollback: tuple[Callable[..., Any] | None, Any] = (None, None),
    ) -> StepHandle:
        if not callable(fn):
            raise TypeError(f"@step.do decorates a function, not {fn!r}")
        step_name = getattr(fn, "__name__", None) if name is None else name
        if not isinstance(step_name, str):
            raise TypeError(f"@step.do() needs a name for {fn!r}, which has no __name__")
        try:
            parameters = tuple(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError) as exc:
            raise TypeError(f"step {step_name!r}: cannot read the parameters of {fn!r}") from exc
        existing = self._handles.get(step_name)
        if existing is not None and _code(existing.fn) is not _code(fn):
            raise StepDependencyError(
                f"two functions are declared as step {step_name!r} in one run(): "
                f"{_label(existing.fn)} and {_label(fn)}; give one of them another name with "
                "@step.do('...') (declaring the same function again, in a loop, is fine)"
            )
        handle = StepHandle(self, step_name, fn, config, concurrent, depends, parameters, rollback)
        self._handles[step_name] = handle
        return handle

    # -- running ---------------------------------------------------------------------------------

    def track(self, method: str, name: str, call: Coroutine[Any, Any, Any]) -> Any:
        """Note a step call of ``run()`` (for a layer that wraps another step method)."""
        return self._track(method, name, call)

    def call(self, handle: StepHandle) -> Coroutine[Any, Any, Any]:
        """``handle()``: the step's next occurrence, noted as a step call of ``run()``."""
        return self._track("do", handle.name, self._call(handle))

    async def _call(self, handle: StepHandle) -> Any:
        self._check(handle, (handle.name,), set())
        try:
            value = await self._run(handle)
        except Exception as exc:
            instead = exc if self._failure is None else self._failure(exc)
            if instead is exc:
                raise
            raise instead from exc
        return value if self._result is None else self._result(value)

    async def _run(self, handle: StepHandle) -> Any:
        """Resolve the dependencies, then run the step; its result is kept for dependents."""
        sources = self._sources(handle)
        if handle.concurrent:
            values = list(await asyncio.gather(*(self._resolve(s) for s in sources)))
        else:
            values = [await self._resolve(source) for source in sources]
        callback = _callback(handle, values, self._context)
        call = self._do(
            handle.name,
            handle.config,
            callback,
            rollback=handle.rollback,
            rollback_config=handle.rollback_config,
            type=returns_of(handle.fn),
        )
        running = asyncio.ensure_future(call)
        self._running[handle.name] = running
        try:
            value = await running
        finally:
            if self._running.get(handle.name) is running:
                del self._running[handle.name]
        self._results[handle.name] = value
        return value

    async def _resolve(self, source: StepHandle | None) -> Any:
        """A dependency's result: kept, awaited while it runs, or run now. None: ``ctx``."""
        if source is None:
            return _CONTEXT
        if source.name in self._results:
            value = self._results[source.name]
        elif source.name in self._running:
            value = await self._running[source.name]
        else:
            value = await self._run(source)
        return value if self._result is None else self._result(value)

    def _sources(self, handle: StepHandle) -> list[StepHandle | None]:
        """Per parameter, in order: the step it receives the result of, or None for ``ctx``."""
        if handle._depends is not None:
            given = iter(handle._depends)
            return [None if p.name == CONTEXT_PARAMETER else next(given) for p in handle.parameters]
        found: list[StepHandle | None] = []
        for parameter in handle.parameters:
            source = self._named(parameter.name)
            if source is None and parameter.name != CONTEXT_PARAMETER:
                raise self._unknown(handle, parameter)
            found.append(source)
        return found

    def _named(self, name: str) -> StepHandle | None:
        """The step a parameter names: by step name, else by the name of its function."""
        handle = self._handles.get(name)
        if handle is not None:
            return handle
        matches = [h for h in self._handles.values() if getattr(h.fn, "__name__", None) == name]
        return matches[-1] if matches else None

    def _check(self, handle: StepHandle, chain: tuple[str, ...], done: set[str]) -> None:
        """Walk the dependencies not yet resolved before anything runs: a parameter that names
        no step, or a cycle, is an error naming it (a cycle would otherwise wait forever)."""
        for parameter in handle.parameters:
            if parameter.kind not in (*_POSITIONAL, inspect.Parameter.KEYWORD_ONLY):
                raise self._unknown(handle, parameter)
        if handle._depends is not None:
            _check_depends(handle)
        for source in self._sources(handle):
            if source is None or source.name in self._results or source.name in done:
                continue
            if source.name in chain:
                cycle = " -> ".join((*chain[chain.index(source.name) :], source.name))
                raise StepDependencyError(
                    f"the dependencies of step {handle.name!r} form a cycle: {cycle}; a step's "
                    "parameters must name steps that do not depend on it"
                )
            self._check(source, (*chain, source.name), done)
            done.add(source.name)

    def _unknown(self, handle: StepHandle, parameter: inspect.Parameter) -> StepDependencyError:
        declared = ", ".join(repr(name) for name in self._handles) or "none"
        return StepDependencyError(
            f"step {handle.name!r} ({_label(handle.fn)}) has a parameter {parameter.name!r} "
            "that names no step declared before it is awaited (declared steps: "
            f"{declared}); each parameter must be the name of a @step.do step, whose result "
            f"it receives, or {CONTEXT_PARAMETER!r} for the step context"
        )


def _callback(
    handle: StepHandle, values: list[Any], adapt_context: Adapt | None
) -> Callable[..., Any]:
    """The ``step.do`` callback: the function, given its dependencies' results and, where it
    has a ``ctx`` parameter, the step context (sync functions run in the thread pool)."""
    fn = handle.fn
    parameters = handle.parameters

    def arguments(ctx: Any) -> tuple[list[Any], dict[str, Any]]:
        given = adapt_context(ctx) if adapt_context is not None else ctx
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for parameter, value in zip(parameters, values, strict=True):
            chosen = given if value is _CONTEXT else value
            if parameter.kind in _POSITIONAL:
                args.append(chosen)
            else:
                kwargs[parameter.name] = chosen
        return args, kwargs

    if is_async(fn):

        async def run_async(ctx: Any) -> Any:
            args, kwargs = arguments(ctx)
            return await fn(*args, **kwargs)

        return run_async

    def run_sync(ctx: Any) -> Any:
        args, kwargs = arguments(ctx)
        return fn(*args, **kwargs)

    return run_sync


def _config(name: str | None, config: Any) -> StepConfig | None:
    """A config checked where the step is declared (``None``: the defaults)."""
    if config is None:
        return None
    try:
        return parse_step_config(config)
    except ValueError as exc:
        where = f"step {name!r}" if name is not None else "@step.do()"
        raise DefinitionError(f"{where}: {exc}") from None


def _depends(
    name: str | None, depends: Sequence[StepHandle] | None
) -> tuple[StepHandle, ...] | None:
    if depends is None:
        return None
    if isinstance(depends, StepHandle) or not isinstance(depends, Sequence):
        depends = [depends]
    for item in depends:
        if not isinstance(item, StepHandle):
            where = f"step {name!r}" if name is not None else "@step.do()"
            raise StepDependencyError(
                f"{where}: depends=[...] lists steps declared with @step.do, not {item!r}"
            )
    return tuple(depends)


def _check_depends(handle: StepHandle) -> None:
    """``depends=[...]`` (the SDK's older form) gives one step per parameter other than ctx."""
    wanted = [p.name for p in handle.parameters if p.name != CONTEXT_PARAMETER]
    given = handle._depends or ()
    if len(wanted) != len(given):
        raise StepDependencyError(
            f"step {handle.name!r} ({_label(handle.fn)}) has {len(wanted)} parameter(s) besides "
            f"ctx ({', '.join(wanted) or 'none'}) but depends=[...] lists {len(given)} step(s); "
            "give one step per parameter, in order"
        )


def _code(fn: Callable[..., Any]) -> object:
    """What tells one function from another (a ``def`` run again in a loop is the same)."""
    return getattr(fn, "__code__", fn)


def _label(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
