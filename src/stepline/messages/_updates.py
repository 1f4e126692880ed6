"""Sending an update and waiting for its reply (the client's side of
:mod:`stepline._runtime.updates`)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .. import _json
from .._shown import shown
from ..durations import Duration, format_duration, parse_duration
from ..errors import UpdateFailedError, UpdateRejectedError
from ..handlers import check_handler_name
from ..payloads import PayloadCodec, Slot, update_column
from ..records import FINISHED_STATUSES
from ..store.base import Store, UpdateRecord
from ..store.types import ChangeWatch, UpdateAnswer
from ._waiting import changes, deadline_of

MAX_UPDATE_ID = 200
"""The longest update id (characters)."""
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def check_update_id(value: object) -> str:
    """An update id: text of 1 to 200 characters without control characters (a new UUID when
    None)."""
    if value is None:
        return str(uuid.uuid4())
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_UPDATE_ID
        or _CONTROL_CHARS.search(value)
        or not value.isprintable()
    ):
        raise ValueError(
            f"invalid update id {shown(value)}: a string of 1 to {MAX_UPDATE_ID} characters "
            "without control characters"
        )
    return value


def update_payload(update_id: str, name: str, args: Sequence[Any], max_payload: int) -> str:
    """The event payload that carries the update (``{"id", "name", "args"}``), checked."""
    check_handler_name(name, what="update")
    return _json.dumps(
        {"id": update_id, "name": name, "args": list(args)},
        what=f"arguments of update {name!r}",
        limit=max_payload,
    )


async def opened(
    codec: PayloadCodec, workflow: str, instance_id: str, record: UpdateRecord
) -> UpdateRecord:
    """``record`` with its reply opened (decrypted, fetched: sealed as the update's)."""
    if not codec.is_sealed(record.reply):
        return record
    slot = Slot(workflow, instance_id, update_column(record.update_id))
    return replace(record, reply=await codec.open(record.reply, slot))


def outcome(record: UpdateRecord, what: str) -> Any:
    """The reply of an answered update, or its error raised."""
    if record.status == "complete":
        return record.reply
    error = record.error or {"name": "Error", "message": ""}
    if record.status == "rejected":
        raise UpdateRejectedError(what, error["name"], error["message"])
    raise UpdateFailedError(what, error["name"], error["message"])


async def _answered(
    codec: PayloadCodec, sent: UpdateRecord, answer: UpdateAnswer, workflow: str, instance_id: str
) -> Any:
    """The reply (or error raised) of an answer signalled in this process."""
    reply = None if answer.reply is None else _json.loads(answer.reply)
    record = replace(sent, status=answer.status, reply=reply, error=answer.error)
    opened_record = await opened(codec, workflow, instance_id, record)
    return outcome(
        opened_record, f"update {sent.name!r} ({sent.update_id}) of {workflow}/{instance_id}"
    )


async def wait_for_reply(
    store: Store,
    workflow: str,
    instance_id: str,
    update_id: str,
    timeout: Duration | None,
    codec: PayloadCodec,
    *,
    sent: tuple[ChangeWatch, UpdateRecord] | None = None,
    answer: asyncio.Future[UpdateAnswer] | None = None,
) -> Any:
    """The reply of update ``update_id`` once it has one (or its error raised):
    :class:`UpdateFailedError` if the instance ends without answering it,
    :class:`TimeoutError` after ``timeout``, ``LookupError`` for an update id it never got.

    ``sent``: the watch of the instance begun before the update was sent, and the unanswered
    record the send returned: the first read waits for a change (the send's answer stands
    until then)."""
    deadline = deadline_of(timeout, "timeout")
    label = f"update {update_id!r} of {workflow}/{instance_id}"
    watch, record = sent if sent is not None else (None, None)
    async for _ in changes(store, workflow, instance_id, deadline, watch=watch):
        if answer is not None and answer.done() and record is not None:
            return await _answered(codec, record, answer.result(), workflow, instance_id)
        record = await store.messages.get_update(workflow, instance_id, update_id)
        if record is None:
            raise LookupError(
                f"instance {instance_id!r} of {workflow!r} has no update {update_id!r}: none was "
                "sent with that id (or it was turned down before it was recorded)"
            )
        what = f"update {record.name!r} ({update_id}) of {workflow}/{instance_id}"
        if record.answered:
            return outcome(await opened(codec, workflow, instance_id, record), what)
        if record.instance_status in FINISHED_STATUSES:
            ran = "while its handler ran" if record.status == "running" else "before it ran"
            raise UpdateFailedError(
                what,
                "InstanceEndedError",
                f"the instance ended {record.instance_status} {ran}; an update needs an "
                "unfinished instance",
            )
    waited = format_duration(parse_duration(timeout or 0, what="timeout", allow_zero=True))
    status = "sent" if record is None or record.status == "pending" else "running"
    raise TimeoutError(
        f"{label} got no reply within {waited} (it is {status}; the instance is "
        f"{record.instance_status if record else 'unknown'}): it runs when the instance is idle "
        "and a worker serves it; wait again with the same update id"
    )
