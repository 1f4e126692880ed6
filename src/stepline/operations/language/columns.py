"""The built-in columns a filter may name, their kinds, and how a name is read: a built-in
column, ``tag.<key>``, or a bare tag key (unless it looks like a misspelt built-in)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from ...records import INSTANCE_STATUSES

Kind = Literal["text", "time", "number", "status"]


@dataclass(frozen=True)
class Builtin:
    """A column of ``instances``: its SQL name, its kind, and whether it may be NULL."""

    sql: str
    kind: Kind
    nullable: bool = False


BUILTINS: dict[str, Builtin] = {
    "id": Builtin("id", "text"),
    "workflow": Builtin("workflow", "text"),
    "status": Builtin("status", "status"),
    "created": Builtin("created_at", "time"),
    "started": Builtin("started_at", "time", nullable=True),
    "ended": Builtin("ended_at", "time", nullable=True),
    "updated": Builtin("updated_at", "time"),
    "key": Builtin("key", "text", nullable=True),
    "priority": Builtin("priority", "number"),
    "trigger": Builtin("trigger", "text"),
}

STATUSES: tuple[str, ...] = INSTANCE_STATUSES

TAG_PREFIX = "tag."


def misspelt(name: str) -> str | None:
    """The built-in column ``name`` is probably a misspelling of, if any."""
    close = difflib.get_close_matches(name.lower(), BUILTINS, n=1, cutoff=0.75)
    return close[0] if close else None
