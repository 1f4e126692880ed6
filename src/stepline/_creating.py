"""A create's options, checked before anything is stored: the flow control key and priority,
a deadline (``timeout``), and what a create does with the instances its key holds
(``on_conflict``: ``"debounce"``, ``"replace_queued"``, executed by ``ClosingStore.create_keyed``;
docs/operations.md tells the user)."""

from __future__ import annotations

import re
from typing import Literal

from ._shown import shown
from .durations import Duration, parse_duration
from .store.base import KeyedConflict

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
MAX_KEY_LENGTH = 200
"""The longest ``key`` or ``dedup_key`` (characters)."""
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
"""The priorities a store keeps (a 32-bit signed integer); lower is claimed first."""


def is_text(value: object) -> bool:
    """A str without control characters that encodes to UTF-8 (no lone surrogate)."""
    if not isinstance(value, str) or _CONTROL_CHARS.search(value):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_key(value: object, *, what: str) -> str | None:
    """A flow control key or dedup key: None, or text of 1 to 200 characters (UTF-8, no control
    characters, which no store keeps alike); else ``ValueError`` naming ``what``."""
    if value is None:
        return None
    if not is_text(value) or not 1 <= len(str(value)) <= MAX_KEY_LENGTH:
        raise ValueError(
            f"invalid {what} {shown(value)}: a string of 1 to {MAX_KEY_LENGTH} characters without "
            "control characters (or None)"
        )
    return str(value)


def check_priority(value: object, *, what: str = "priority") -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(
            f"invalid {what} {shown(value)}: a whole number from {low} to {high} (lower runs first)"
        )
    return value


OnConflict = Literal["debounce", "replace_queued"]
ON_CONFLICT: tuple[OnConflict, ...] = ("debounce", "replace_queued")


def deadline(timeout: Duration | None, default: float | None, now: float) -> float | None:
    """The deadline of an instance created at ``now``: ``timeout`` (a duration), else the
    workflow's ``default`` (seconds), else none; a bad ``timeout`` raises ``ValueError``."""
    seconds = default if timeout is None else parse_duration(timeout, what="timeout")
    return None if seconds is None else now + seconds


def keyed_conflict(
    on_conflict: object, key: str | None, debounce: Duration | None
) -> tuple[KeyedConflict | None, float | None]:
    """``on_conflict`` checked with the ``key`` and ``debounce`` it needs: the conflict and the
    quiet period in seconds; ``ValueError`` naming the value refused."""
    if on_conflict is None:
        if debounce is not None:
            raise ValueError(
                f"debounce={debounce!r} is given without on_conflict='debounce': pass both"
            )
        return None, None
    if on_conflict not in ON_CONFLICT:
        raise ValueError(
            f"invalid on_conflict {on_conflict!r}: use one of {', '.join(ON_CONFLICT)}"
        )
    if key is None:
        raise ValueError(f"on_conflict={on_conflict!r} needs a key: pass key=...")
    if on_conflict == "replace_queued":
        if debounce is not None:
            raise ValueError(
                f"debounce={debounce!r} applies to on_conflict='debounce', not 'replace_queued'"
            )
        return "replace_queued", None
    if debounce is None:
        raise ValueError("on_conflict='debounce' needs a quiet period: pass debounce='5 seconds'")
    return "debounce", parse_duration(debounce, what="debounce")
