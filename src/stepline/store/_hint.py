"""The timer hint: what a claim learned of the next wake-up, kept for the ``next_wakeup`` a
worker asks right after a claim that left nothing runnable: it took fewer instances than it
asked for, or (under limits) all it asked for with nothing more the limits let run.

Such a claim has just read, under the same view, everything ``next_wakeup`` would read again:
nothing else is runnable now, and it knows the earliest timer. The hint answers one
``next_wakeup`` for the same workflows or some of them (a worker whose claim filled a
workflow's room asks for the others; the timer of more workflows is at worst earlier, which
wakes the worker once for nothing), unless something became runnable in this process after
the claim began (a readiness notification moves the generation on)."""

from __future__ import annotations

from collections.abc import Sequence


class TimerHint:
    """One store's hint: set by its claims, taken once by its ``next_wakeup``."""

    __slots__ = ("_generation", "_held")

    def __init__(self) -> None:
        self._generation = 0
        self._held: tuple[tuple[str, ...], int, float | None] | None = None

    def changed(self) -> None:
        """Something may have become runnable: a hint from a claim begun earlier is stale."""
        self._generation += 1

    def begin(self) -> int:
        """Mark a claim's start; pass the mark to :meth:`keep` once it is known."""
        return self._generation

    def keep(self, workflows: Sequence[str], begun: int, at: float | None) -> None:
        """A claim of ``workflows`` begun at ``begun`` found the next wake-up at ``at`` (None:
        no timer at all)."""
        self._held = (tuple(workflows), begun, at)

    def clear(self) -> None:
        """The last claim learned nothing that holds: the next ``next_wakeup`` reads."""
        self._held = None

    def take(self, workflows: Sequence[str]) -> tuple[bool, float | None]:
        """(whether the hint holds for ``workflows``, its time); either way it is used up."""
        held, self._held = self._held, None
        if held is None or held[1] != self._generation:
            return False, None
        claimed = held[0]
        if tuple(workflows) != claimed and not set(workflows).issubset(claimed):
            return False, None
        return True, held[2]
