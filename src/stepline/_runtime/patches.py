"""Patches: ``step.patched(id)`` and ``step.deprecate_patch(id)``, for changing the code of a
workflow with instances in flight.

A patch is decided once per instance and patch id, and the decision is recorded: a marker, a
history record of kind ``patch`` named ``patch:<id>``, sent when ``patched`` first answers true
on new ground. Records commit in the order they are sent, so the marker is durable before any
step of the new path. The rule:

- the history holds the marker: true (the instance took the new path before);
- the replay has recorded steps it has not reached yet: false (an instance that went past this
  point without the patch follows its history: the old path);
- otherwise the instance runs new ground: true, and the marker is recorded.

The store adds the id to the instance's patches with the marker (``Store.record_step``): a
worker claims the instance only if its code has every patch it took (a worker whose code does
not call ``patched(id)`` would diverge on the marker). The marker is a recorded step like any
other, so removing a ``patched`` call while instances
that recorded it are unfinished is a divergence (:mod:`.divergence`), and
``deprecate_patch(id)`` keeps such instances replaying: it consumes the marker if there is one
and records nothing.
"""

from __future__ import annotations

from ..step import validate_patch_id
from ..store.types import PATCH_PREFIX
from .replay import StepKey
from .state import ActivationState
from .writer import StepRef


def marker_key(patch_id: str) -> StepKey:
    return (PATCH_PREFIX + patch_id, 1)


class Patches:
    """The patches one activation has decided, by id (a second call of one id answers alike)."""

    __slots__ = ("_decided", "_record", "_state")

    def __init__(self, state: ActivationState, *, record: bool) -> None:
        """``record``: write the markers (false for a query's replay, which writes nothing)."""
        self._state = state
        self._record = record
        self._decided: dict[str, bool] = {}

    def patched(self, patch_id: str) -> bool:
        decided = self._decided.get(validate_patch_id(patch_id))
        if decided is not None:
            return decided
        state = self._state
        replay = state.replay
        key = marker_key(patch_id)
        if replay.lookup(key, "patch") is not None:
            decided = True
        elif replay.check.unvisited:
            decided = False
        else:
            decided = True
            if self._record:
                now = state.store.now()
                step = StepRef(key, replay.seq_for(None), "patch", started_at=now)
                state.writer.send(step, "complete", ended_at=now)
                state.emit("patch", {"patch": patch_id})
                taken = state.settings.patch_taken
                if taken is not None:
                    taken(state.instance.workflow, state.instance.version, patch_id)
        self._decided[patch_id] = decided
        return decided

    def deprecate(self, patch_id: str) -> None:
        if validate_patch_id(patch_id) not in self._decided:
            self._state.replay.lookup(marker_key(patch_id), "patch")
            self._decided[patch_id] = True
