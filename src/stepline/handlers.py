"""Declaring message handlers on a workflow class: ``@stepline.query``, ``@stepline.update`` and
an update's ``@handler.validator`` (docs/messaging.md), and finding them on a class.

A handler is a method of the workflow: queries read what ``run()`` (and earlier updates) kept on
``self``; updates may change it and run steps (their ``step`` argument). Decorated, a method
stays callable as before (``self.total()``); on the class it is the handler object, which names
it and carries the validator.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from ._shown import shown
from .errors import DefinitionError

_NAME_RE = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9_-]{0,99}$")
F = TypeVar("F", bound=Callable[..., Any])


def check_handler_name(name: object, *, what: str) -> str:
    """Query and update names share the pattern of workflow names (they go into URLs)."""
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"invalid {what} name {shown(name)}: use 1-100 ASCII letters, digits, '_' or '-', "
            "not starting with '-'"
        )
    return name


class _Handler(Generic[F]):
    """A decorated method: callable through the instance as before; on the class, itself."""

    kind = "handler"

    def __init__(self, fn: F, name: str | None) -> None:
        if not callable(fn):
            raise DefinitionError(f"@{self.kind} decorates a method, not {shown(fn)}")
        self.fn = fn
        label = getattr(fn, "__qualname__", repr(fn))
        try:
            self.name = check_handler_name(name or fn.__name__, what=self.kind)
        except ValueError as exc:
            raise DefinitionError(f"@{self.kind} on {label}: {exc}") from None
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _Handler[F]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[..., Any]: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return self.fn.__get__(obj, owner)

    def signature(self, skip: int) -> inspect.Signature | None:
        """The handler's signature without its first ``skip`` parameters (``self``, ``step``);
        None if it cannot be read."""
        try:
            sig = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return None
        return sig.replace(parameters=list(sig.parameters.values())[skip:])

    def check_arguments(self, args: tuple[Any, ...], skip: int) -> str | None:
        """Why ``args`` do not fit the handler (after ``self`` and, for updates, ``step``), or
        None if they do."""
        sig = self.signature(skip)
        if sig is None:
            return None
        try:
            sig.bind(*args)
        except TypeError as exc:
            return f"{self.kind} {self.name!r} takes ({_params(sig)}): {exc}"
        return None


def _params(sig: inspect.Signature) -> str:
    """The parameters as a caller passes them: names and defaults, no annotations."""
    return ", ".join(str(p.replace(annotation=p.empty)) for p in sig.parameters.values())


class QueryHandler(_Handler[F]):
    """A method that answers a query from the workflow's state (``@stepline.query``)."""

    kind = "query"


class UpdateHandler(_Handler[F]):
    """A method that handles an update (``@stepline.update``): ``(self, step, *args)``."""

    kind = "update"

    def __init__(self, fn: F, name: str | None) -> None:
        super().__init__(fn, name)
        if not self.is_async:
            raise DefinitionError(
                f"@update {fn.__qualname__} must be an async method: write `async def "
                f"{fn.__name__}(self, step, ...)` (it may run steps)"
            )
        self.validator_fn: Callable[..., Any] | None = None

    def validator(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorate the method that checks this update's arguments before it is accepted
        (``@decide.validator``): it takes ``(self, *args)`` like the handler without ``step``,
        sees the workflow's state, and raises to turn the update down; what it returns is
        ignored. Returns ``fn`` unchanged."""
        if not callable(fn):
            raise DefinitionError(f"@{self.name}.validator decorates a method, not {shown(fn)}")
        self.validator_fn = fn
        return fn


@overload
def query(fn: F, /) -> QueryHandler[F]: ...


@overload
def query(name: str | None = None, /) -> Callable[[F], QueryHandler[F]]: ...


def query(arg: Any = None, /) -> Any:
    """Declare a query: ``@stepline.query`` (named after the method) or
    ``@stepline.query("name")`` on ``def total(self, *args)`` (sync or async) of a workflow
    class. It answers from the state ``run()`` keeps on ``self``; it must not run steps or
    change that state (docs/messaging.md)."""
    if callable(arg):
        return QueryHandler(arg, None)
    return lambda fn: QueryHandler(fn, arg)


@overload
def update(fn: F, /) -> UpdateHandler[F]: ...


@overload
def update(name: str | None = None, /) -> Callable[[F], UpdateHandler[F]]: ...


def update(arg: Any = None, /) -> Any:
    """Declare an update: ``@stepline.update`` (or ``@stepline.update("name")``) on
    ``async def decide(self, step, *args)`` of a workflow class. It runs once per update id,
    in the instance's order of events, may run steps with ``step`` and change the state on
    ``self``; what it returns is the caller's reply (docs/messaging.md)."""
    if callable(arg):
        return UpdateHandler(arg, None)
    return lambda fn: UpdateHandler(fn, arg)


@dataclass(frozen=True)
class Handlers:
    """The queries and updates a workflow class declares, by name."""

    queries: dict[str, QueryHandler[Any]] = field(default_factory=dict)
    updates: dict[str, UpdateHandler[Any]] = field(default_factory=dict)


def handlers_of(cls: type) -> Handlers:
    """The handlers declared on ``cls`` and its bases (see :func:`_handlers_of`)."""
    return _handlers_of(cls)


@functools.cache
def _handlers_of(cls: Any) -> Handlers:
    """The handlers declared on ``cls`` and its bases (a subclass's attribute of the same name
    wins); two handlers of one kind under one name raise :class:`DefinitionError`."""
    found = Handlers()
    seen: set[str] = set()
    for klass in cls.__mro__:
        for attr, value in vars(klass).items():
            if attr in seen:
                continue
            seen.add(attr)
            if isinstance(value, QueryHandler):
                table: dict[str, Any] = found.queries
            elif isinstance(value, UpdateHandler):
                table = found.updates
            else:
                continue
            other = table.get(value.name)
            if other is not None:
                raise DefinitionError(
                    f"workflow class {cls.__qualname__} has two {value.kind} handlers named "
                    f"{value.name!r} ({other.attr} and {attr}); give one of them another name"
                )
            table[value.name] = value
    return found
