"""Finding a step call's record: step names, occurrence counts and the recorded history.

A step is identified by its name and its occurrence count in this run (``charge-1``,
``charge-2``), as in Cloudflare Workflows. A recorded step returns its stored result without
running; :mod:`.divergence` tells a replay that follows the history from one that has left it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import InstanceFatalError, NonDeterminismError
from ..records import StepKind, StepRecord
from .divergence import ReplayCheck

StepKey = tuple[str, int]
"""(name, occurrence count)."""

ROLLBACK_SUFFIX = ":rollback"
"""A rollback is recorded as a step of its own, named after its step with this suffix."""

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def validate_step_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 256:
        raise ValueError(f"invalid step name {name!r}: use 1 to 256 characters")
    # isprintable() is the quick test; a name it rejects may still be valid (only ASCII control
    # characters are refused)
    if not name.isprintable() and _CONTROL_CHARS.search(name):
        raise ValueError(f"invalid step name {name!r}: control characters are not allowed")
    if name.endswith(ROLLBACK_SUFFIX):
        raise ValueError(f"invalid step name {name!r}: the suffix ':rollback' is reserved")
    return name


class Replay:
    """The history an activation replays, and the step calls it has counted so far."""

    __slots__ = ("_counts", "_next_seq", "check", "recorded")

    def __init__(self, steps: Iterable[StepRecord]) -> None:
        self.recorded: dict[StepKey, StepRecord] = {(s.name, s.count): s for s in steps}
        self.check = ReplayCheck(self.recorded.values())
        self._counts: dict[str, int] = {}
        self._next_seq = max((s.seq for s in self.recorded.values()), default=0) + 1

    def find(self, name: str, kind: StepKind) -> tuple[StepKey, StepRecord | None]:
        """A call of the step ``name``: its key (the next occurrence) and its record, if any."""
        count = self._counts.get(name, 0) + 1
        self._counts[name] = count
        key = (name, count)
        return key, self.lookup(key, kind)

    def lookup(self, key: StepKey, kind: StepKind) -> StepRecord | None:
        """The record of ``key``, if any (noting it called); a record of another kind ends the
        instance (the replay called a different step under its name)."""
        record = self.recorded.get(key)
        if record is None:
            return None
        if self.check.unvisited:
            self.check.visit(key)
        if record.kind != kind:
            raise InstanceFatalError(
                "NonDeterminismError",
                str(
                    NonDeterminismError(
                        f"step '{key[0]}-{key[1]}' was recorded as {record.kind!r} but run() now "
                        f"calls it as {kind!r}; run() must call the same steps on every replay"
                    )
                ),
            )
        return record

    def seq_for(self, record: StepRecord | None) -> int:
        """The step's position in the history: its record's, or the next free one."""
        if record is not None:
            return record.seq
        seq = self._next_seq
        self._next_seq += 1
        return seq
