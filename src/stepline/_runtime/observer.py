"""The one seam through which observers (:mod:`stepline.telemetry`: traces, metrics, log
context) see what the engine does: creates, activations, step attempts, waits, rollbacks and
store failures, told as they happen.

Every place that tells an observer holds it in one attribute that is None when nothing observes
(an engine without telemetry): each event costs an ``is None`` test there, and nothing here
imports a telemetry library. An :class:`Observer` belongs to one engine; it hands out an
:class:`ActivationObservation` per activation, in the activation's own task (an observer may
make its span the task's current context), which hands out an :class:`AttemptObservation` per
step attempt, in the task that runs the attempt, just before its callback runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from ..records import StepKind
from ..store.base import Claim, NewInstance

AttemptOutcome = Literal["success", "retry", "failed", "interrupted"]
"""How an attempt ended: succeeded; failed and will be retried; failed for good (the step
fails); stopped before it ended (the activation stopped: shutdown, termination, a lost lease)."""

WaitOutcome = Literal["complete", "received", "timeout", "errored"]
"""How a wait ended: a sleep's end or a child that completed; an event received; a timeout; a
child that ended errored or terminated."""

TickOutcome = Literal["fired", "missed"]
"""A tick that created its instance (at once, or later once buffered); one passed over without
an instance (by its catch-up or overlap policy)."""

CreateEnd = Callable[[int, BaseException | None], None]
"""Called once a create has ended: how many instances it created, and its error if it failed."""


class AttemptObservation(Protocol):
    """One attempt of a step (a ``step.do`` or a rollback), from just before its callback runs."""

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of the attempt's span (for :class:`~stepline.StepContext`),
        None when nothing traces."""
        ...

    def ended(self, outcome: AttemptOutcome, error: BaseException | None) -> None:
        """The attempt ended (``error``: what it raised, for ``retry`` and ``failed``). Called
        again on some paths (a write that failed after it): only the first call counts."""


class ActivationObservation(Protocol):
    """One activation of one instance, from its claim to its last write."""

    def attempt(self, kind: StepKind, name: str, count: int, number: int) -> AttemptObservation:
        """Attempt ``number`` of step ``name`` (occurrence ``count``) starts now."""
        ...

    def waited(
        self,
        kind: StepKind,
        name: str,
        count: int,
        started_at: float | None,
        ended_at: float,
        outcome: WaitOutcome,
    ) -> None:
        """A wait is known from its start to its end, told once: a sleep when it starts (its
        end is its wake-up time), an event wait or a child wait when it ends. ``started_at``
        None: not recorded (a record of an older version)."""

    def rollbacks(self) -> Callable[[str], None]:
        """The instance's rollbacks start now; the function returned is called with their
        outcome when they have all run (``complete``, ``failed``) or were stopped
        (``interrupted``)."""
        ...

    def child_traceparent(self) -> str | None:
        """The ``traceparent`` a child workflow started now stores, so that its activations
        are children of this one in the trace; None when nothing traces."""
        ...

    def created(self, workflow: str, trigger: str, count: int) -> None:
        """This activation created ``count`` instances of ``workflow`` (child workflows)."""

    def ended(self, outcome: str, error: dict[str, str] | None) -> None:
        """The activation ended: the instance's status after its finish (``complete``,
        ``errored``, ``terminated``, ``waiting``, ``paused``...), or ``released`` (shutdown),
        ``abandoned`` (its lease lost), ``failed`` (a store failure); ``error``: the instance's
        stored error when it ended errored."""


class Observer(Protocol):
    """What an engine's observers see (see the module's docstring)."""

    def creating(
        self, workflow: str, trigger: str, items: Sequence[NewInstance]
    ) -> tuple[Sequence[NewInstance], CreateEnd]:
        """Instances of ``workflow`` are about to be created by ``trigger`` (``api``, ``http``,
        ``cron``, a queue trigger's label...). Returns the items to create (each with the
        ``traceparent`` its activations continue) and the function to call when the create has
        ended."""
        ...

    def activation(self, claim: Claim) -> ActivationObservation:
        """An activation of ``claim`` starts now, in its own task."""
        ...

    def tick(self, schedule: str, outcome: TickOutcome) -> None:
        """A cron schedule's tick was handled by this process's scheduler."""

    def store_error(self, operation: str, error: BaseException) -> None:
        """A store operation of the worker failed (``claim``, ``activation``)."""
