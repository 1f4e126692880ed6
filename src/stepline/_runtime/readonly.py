"""Calling user code that must only read the workflow's state: a query's handler, an update's
validator. It may not run a step (refused by :mod:`.calls` while :data:`~.calls.IN_QUERY` is
set), and a change to the attributes of the workflow object is reported as an error.

What counts as a change: an attribute added, removed or bound to another object, or a value
made of plain data (``dict``, ``list``, ``tuple``, ``set``, ``str``, numbers, ``None``) that no
longer equals the copy taken before the call (a list appended to, a dict changed). Other
values (objects of the workflow's own classes, the ``step``) are watched for rebinding only:
copying them could copy anything they reach.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import DefinitionError
from .calls import IN_QUERY

_UNCOMPARED = object()
_ATOMS = (str, int, float, bool, bytes, type(None))
_CONTAINERS = (list, tuple, set, frozenset)
_DEPTH = 20
"""How deep a value is looked into to tell that it is plain data."""


def _plain(value: object, depth: int = 0) -> bool:
    if isinstance(value, _ATOMS):
        return True
    if depth >= _DEPTH:
        return False
    if type(value) is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    if type(value) in _CONTAINERS:
        return all(_plain(v, depth + 1) for v in value)  # type: ignore[attr-defined]
    return False


def _snapshot(obj: object) -> dict[str, tuple[int, Any]]:
    state = getattr(obj, "__dict__", None)
    if not isinstance(state, dict):
        return {}
    taken: dict[str, tuple[int, Any]] = {}
    for name, value in state.items():
        kept = copy.deepcopy(value) if _plain(value) else _UNCOMPARED
        taken[name] = (id(value), kept)
    return taken


def _changed(obj: object, before: dict[str, tuple[int, Any]]) -> str | None:
    """The first attribute that changed since ``before`` was taken, described; None if none."""
    state = getattr(obj, "__dict__", None)
    after = state if isinstance(state, dict) else {}
    for name in after.keys() - before.keys():
        return f"it set self.{name}"
    for name in before.keys() - after.keys():
        return f"it deleted self.{name}"
    for name, (identity, kept) in before.items():
        value = after[name]
        if id(value) != identity:
            return f"it set self.{name}"
        if kept is not _UNCOMPARED and value != kept:
            return f"it changed self.{name}"
    return None


async def read_only_call(
    workflow: object, fn: Callable[..., Any], args: Sequence[Any], where: str
) -> Any:
    """``fn(workflow, *args)`` (awaited if it returns an awaitable), where no step may run and
    the workflow's state must not change (else :class:`DefinitionError`); ``where`` names the
    code in messages (``"query 'total'"``)."""
    before = _snapshot(workflow)
    token = IN_QUERY.set(where)
    try:
        result = fn(workflow, *args)
        if inspect.isawaitable(result):
            result = await result
    finally:
        IN_QUERY.reset(token)
    change = _changed(workflow, before)
    if change is not None:
        raise DefinitionError(
            f"{where} changed the workflow's state ({change}); it may only read it: change the "
            "state in run() or in an update handler"
        )
    return result
