"""Create options beyond an instance's params and flow control: a deadline (``timeout``) and
what a create does with the instances its key holds (``on_conflict``: ``"debounce"``,
``"replace_queued"``). Checked here, before anything is stored; executed by the store
(``Store.create_keyed``, ``Store.expire_deadlines``). docs/operations.md tells the user."""

from __future__ import annotations

from typing import Literal

from .durations import Duration, parse_duration
from .store.base import KeyedConflict

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
