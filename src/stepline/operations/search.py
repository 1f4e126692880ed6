"""Filtered lists and counts, the client's side: a filter text and the plain ranges
(``created_after``...) made into one :class:`~stepline.operations.language.Filter`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict, Unpack

from .. import _json
from ..records import InstancePage
from ..store.base import Store
from .language import Filter, TagError, check_tags, parse
from .language.tree import And, Column, Compare, Expr, Value

Moment = float | int | datetime | str
"""A time given to a range: seconds since the epoch, a datetime (naive: UTC) or ISO 8601."""


def tags_json(tags: Mapping[str, Any] | None, *, where: str = "tags") -> str | None:
    """Checked tags as the JSON text the store keeps; None for none (``TagError``)."""
    checked = check_tags(tags, where=where)
    return _json.dumps(checked, what=where) if checked else None


def build_filter(
    where: str | Filter | None = None,
    *,
    workflow: str | None = None,
    status: str | None = None,
    created_after: Moment | None = None,
    created_before: Moment | None = None,
    ended_after: Moment | None = None,
    ended_before: Moment | None = None,
) -> Filter | None:
    """One filter of everything given (``FilterError`` for a bad text, ``ValueError`` for a
    bad time); None when nothing is."""
    parsed = parse(where) if isinstance(where, str) else where
    for name, value in (("workflow", workflow), ("status", status)):
        if value is not None and not plain_text(value):
            raise ValueError(f"invalid {name} {value!r}: text without control characters")
    tests: list[tuple[Expr, str]] = []

    def add(column: str, op: str, value: Value, shown: str) -> None:
        tests.append((Compare(Column(column, tag=False), op, value), shown))

    if workflow is not None:
        add("workflow", "=", workflow, f"workflow = {_quoted(workflow)}")
    if status is not None:
        add("status", "=", status, f"status = {_quoted(status)}")
    for column, op, moment, name in (
        ("created", ">=", created_after, "created_after"),
        ("created", "<", created_before, "created_before"),
        ("ended", ">=", ended_after, "ended_after"),
        ("ended", "<", ended_before, "ended_before"),
    ):
        if moment is not None:
            seconds = to_seconds(moment, what=name)
            add(column, op, seconds, f"{column} {op} {seconds!r}")
    if not tests:
        return parsed if parsed is not None and parsed.expr is not None else None
    ranges = Filter(
        tests[0][0] if len(tests) == 1 else And(tuple(e for e, _ in tests)),
        " and ".join(shown for _, shown in tests),
    )
    return Filter.all(parsed, ranges)


class Ranges(TypedDict, total=False):
    """The plain time ranges of a list: created or ended at or after a time, or before one."""

    created_after: Moment | None
    created_before: Moment | None
    ended_after: Moment | None
    ended_before: Moment | None


def listing_filter(
    where: str | Filter | None,
    *,
    workflow: str | None,
    status: str | None,
    **ranges: Unpack[Ranges],
) -> Filter | None:
    """What a list with these arguments filters on, or None when a plain list (by workflow and
    status) does it."""
    extra = build_filter(where, **ranges)
    if extra is None:
        return None
    return Filter.all(build_filter(workflow=workflow, status=status), extra)


def plain_text(value: object) -> bool:
    """Text a database stores as given: no control character, no lone surrogate."""
    if not isinstance(value, str) or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def to_seconds(moment: Moment, *, what: str) -> float:
    """``moment`` as seconds since the epoch (``ValueError`` naming ``what``)."""
    if isinstance(moment, bool):
        raise ValueError(f"{what}: a time, not a boolean")
    if isinstance(moment, int | float):
        if not math.isfinite(moment):
            raise ValueError(f"{what}: {moment!r} is not a time")
        return float(moment)
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(text := moment)
        except ValueError:
            raise ValueError(
                f"{what}: {text[:60]!r} is not an ISO 8601 time such as '2026-12-01T09:00Z'"
            ) from None
    if isinstance(moment, datetime):
        when = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return when.timestamp()
    raise ValueError(f"{what}: a time, not {type(moment).__name__}")


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


async def search(
    store: Store, where: Filter, limit: int, cursor: str | None, *, oldest_first: bool = False
) -> InstancePage:
    """A page of the instances ``where`` matches, each with its tags."""
    return await store.operations.search(where, limit, cursor, oldest_first=oldest_first)


__all__ = [
    "Moment",
    "Ranges",
    "TagError",
    "build_filter",
    "listing_filter",
    "search",
    "tags_json",
    "to_seconds",
]
