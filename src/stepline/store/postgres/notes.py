"""The PostgreSQL store's notifications: the payloads it sends on its schema's LISTEN/NOTIFY
channel, and what a payload it receives asks it to wake.

A payload is a JSON object: ``s``, the sending store's id (a store skips its own: it signalled
itself when it committed); ``w`` and ``i``, the instance that changed, if one; ``ended``, the
``[workflow, id]`` pairs a finish batch ended; ``e``, true when those ended and nothing became
runnable (then no worker needs to look for work); ``u``, the answers of the instance's updates
that a handler's end wrote, ``[update_id, status, reply, error]`` each (left out when the payload
would be too long: the waiter reads the update).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from ..._json import dumps, loads
from ..signals import Signals
from ..types import UpdateAnswer


@dataclass(frozen=True)
class Wake:
    """What a received notification asks for."""

    ready: bool
    """Something may have become runnable: wake the worker."""
    changed: list[tuple[str, str]]
    """The instances (workflow, id) that changed: wake their waiters."""
    answers: list[UpdateAnswer]
    """Answers of updates of the instance ``changed`` names first."""


class Notes:
    """One store's notifications: its channel and its id."""

    def __init__(self, schema: str) -> None:
        self.channel = f"stepline_{schema}"[:63]
        """The LISTEN/NOTIFY channel of the schema."""
        self.source = secrets.token_hex(6)
        """Tags this store's notifications, so that it can skip its own."""

    def note(
        self, workflow: str | None = None, instance_id: str | None = None, *, idle: bool = False
    ) -> str:
        """A payload: this store's id, and the instance that changed, if one; ``idle``: nothing
        became runnable (``e``)."""
        note: dict[str, object] = {"s": self.source}
        if workflow is not None and instance_id is not None:
            note |= {"w": workflow, "i": instance_id}
        if idle:
            note["e"] = True
        return dumps(note, what="notification")

    def read(self, payload: str) -> Wake | None:
        """What ``payload`` asks to wake; None for this store's own notifications."""
        try:
            data = loads(payload) if payload else {}
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        if data.get("s") == self.source:
            return None
        changed: list[tuple[str, str]] = []
        workflow, instance_id = data.get("w"), data.get("i")
        if workflow is not None and instance_id is not None:
            changed.append((str(workflow), str(instance_id)))
        ended = data.get("ended")
        if isinstance(ended, list):
            changed.extend(
                (str(item[0]), str(item[1]))
                for item in ended
                if isinstance(item, list) and len(item) == 2
            )
        answers = _answers(data.get("u")) if changed else []
        return Wake(data.get("e") is not True, changed, answers)


def _answers(items: Any) -> list[UpdateAnswer]:
    """The ``u`` of a payload: ``[update_id, status, reply, error]`` each."""
    found: list[UpdateAnswer] = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, list) or len(item) != 4:
            continue
        update_id, status, reply, error = item
        if not isinstance(update_id, str) or status not in ("complete", "errored"):
            continue
        try:
            failure = loads(error) if isinstance(error, str) else None
        except ValueError:
            continue
        text = reply if isinstance(reply, str) else None
        found.append(UpdateAnswer(update_id, status, text, failure))
    return found


class Wakeups:
    """What the notifications a store receives wake in this process (its ``signals``)."""

    def __init__(self, notes: Notes, signals: Signals) -> None:
        self._notes = notes
        self._signals = signals

    def dispatch(self, payload: str) -> None:
        """A notification arrived: wake the worker, and waiters on the instances it names."""
        wake = self._notes.read(payload)
        if wake is None:  # this store's own: it signalled itself when it committed
            return
        if wake.ready:
            self._signals.ready()
        if wake.answers:
            self._signals.tell_answers(*wake.changed[0], wake.answers)
        for workflow, instance_id in wake.changed:
            self._signals.changed(workflow, instance_id)

    def everything(self) -> None:
        """After the listener reconnects: anything may have changed meanwhile."""
        self._signals.ready()
        for workflow, instance_id in self._signals.watched():
            self._signals.changed(workflow, instance_id)
