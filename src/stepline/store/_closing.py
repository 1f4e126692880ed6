"""Ending instances the engine stops on its own, the same way in every store: a deadline that
passed (``WorkflowTimeoutError``) and a parent's end applied to its children (their
``on_parent_close``). The stores execute these rules in their transactions.

An instance that never started (no step ran, so it has no rollback to run) ends ``errored`` at
once. One that started is *interrupted*: marked with a control (``timeout`` or ``cancel``) and
made runnable now, its running activation fenced out, as a termination with rollback does; the
worker that claims it runs its rollbacks and ends it ``errored`` with the error below.
"""

from __future__ import annotations

from typing import Any, Literal

Interruption = Literal["timeout", "cancel"]
"""The controls an interrupted instance carries to the activation that ends it."""

INTERRUPTIONS: tuple[Interruption, ...] = ("timeout", "cancel")

ERRORS: dict[str, dict[str, str]] = {
    "timeout": {
        "name": "WorkflowTimeoutError",
        "message": "the instance ran past its deadline",
    },
    "cancel": {
        "name": "WorkflowCancelledError",
        "message": "its parent ended, and it was started with on_parent_close='request_cancel'",
    },
}
"""The error an interrupted instance ends with, by its control."""

PARENT_CLOSE_POLICIES = ("terminate", "request_cancel", "abandon")
"""What a parent's end (errored or terminated) does to its unfinished children."""

DEADLINE_BATCH = 200
"""Deadlines carried out per transaction of :meth:`Store.expire_deadlines`."""


def interruption(
    status: str, started: bool, leased: bool, control: str | None
) -> dict[str, Any] | None:
    """How an unfinished instance is stopped: ``{"end": True}`` (never started: end it errored
    now), ``{"status", "fence"}`` (mark it and make it runnable, fencing out a lease), or None
    (a termination or another interruption is pending already: it carries on with that)."""
    if control is not None:
        return None
    if not started and not leased:
        return {"end": True}
    return {
        "status": "running" if status in ("running", "waitingForPause") else "queued",
        "fence": leased,
    }
