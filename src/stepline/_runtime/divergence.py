"""Telling a replay that follows the recorded history from one that has left it.

Steps are identified by name and occurrence count. A replay that calls a step with no record
while recorded steps have not been called yet in this activation *may* have diverged (a step
renamed, reordered or inserted), or a sibling of a parallel step may simply not have reached its
recorded step yet (``asyncio.gather`` and DAG branches start in any order). So the new step is
*held* before it runs anything: it is released as soon as every recorded step has been called,
and the activation concludes it diverged only once the event loop has quiesced with the new step
still held (the same quiescence that suspends an instance). :mod:`.quiesce` drives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..errors import InstanceFatalError, NonDeterminismError
from ..records import StepRecord

_NAMED = 5
"""How many step names a message lists before "and N more"."""

_ADVICE = (
    "steps are identified by name and occurrence, so run() must call the recorded steps of an "
    "instance in flight on every replay: do not rename, reorder or remove steps of a workflow "
    "with unfinished instances (add steps only after the existing ones, or deploy the change "
    "under a new workflow name)"
)


def _names(labels: list[str]) -> str:
    shown = ", ".join(repr(label) for label in labels[:_NAMED])
    more = len(labels) - _NAMED
    return shown + (f" and {more} more" if more > 0 else "")


class ReplayCheck:
    """Which recorded steps this activation has called; the new steps held meanwhile."""

    __slots__ = ("_recorded", "diverged", "held", "unvisited")

    def __init__(self, steps: Iterable[StepRecord]) -> None:
        # Rollbacks run after run() returns, in an order of their own: not part of the replay.
        self._recorded = {(s.name, s.count): s for s in steps if s.kind != "rollback"}
        self.unvisited: set[tuple[str, int]] = set(self._recorded)
        """Recorded steps not called yet in this activation (empty for a new instance)."""
        self.held: list[tuple[str, asyncio.Future[None]]] = []
        """New steps waiting for the recorded ones to be called: (label, future)."""
        self.diverged: str | None = None
        """The message, once the replay has been found to diverge."""

    def visit(self, key: tuple[str, int]) -> None:
        """A recorded step was called; when it was the last one, the held steps may go on."""
        unvisited = self.unvisited
        unvisited.discard(key)
        if not unvisited and self.held:
            held, self.held = self.held, []
            for _, fut in held:
                if not fut.done():
                    fut.set_result(None)

    def fatal(self) -> InstanceFatalError:
        return InstanceFatalError("NonDeterminismError", self.diverged or "the replay diverged")

    def _unvisited_labels(self) -> list[str]:
        found = sorted((self._recorded[key] for key in self.unvisited), key=lambda s: s.seq)
        return [s.display_name for s in found]

    def diverge_at(self) -> None:
        """The loop has quiesced with new steps held: the replay has left the history."""
        new = [label for label, _ in self.held]
        self.diverged = str(
            NonDeterminismError(
                f"run() reached the new step(s) {_names(new)} while the recorded step(s) "
                f"{_names(self._unvisited_labels())} were not called in this replay; {_ADVICE}"
            )
        )

    def diverge_at_end(self) -> None:
        """run() returned without calling every recorded step."""
        self.diverged = str(
            NonDeterminismError(
                f"run() returned without calling the recorded step(s) "
                f"{_names(self._unvisited_labels())}; {_ADVICE}"
            )
        )

    def release(self, parked: Iterable[asyncio.Future[None]]) -> None:
        """After a divergence: fail the held steps and ``parked`` with the error, so that every
        branch of run() unwinds."""
        held, self.held = self.held, []
        for fut in [f for _, f in held] + list(parked):
            if not fut.done():
                fut.set_exception(self.fatal())
