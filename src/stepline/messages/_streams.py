"""Reading a stream of an instance: every item after a cursor, each once, in order, following
the stream until the instance ends."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..handlers import check_handler_name
from ..payloads import PayloadCodec
from ..payloads.records import open_stream_items
from ..records import FINISHED_STATUSES
from ..store.base import Store, StreamItem
from ._waiting import changes

PAGE = 100
"""Items read at a time."""


def check_stream(name: object) -> str:
    """A stream name: the pattern of workflow names."""
    return check_handler_name(name, what="stream")


def check_cursor(after: object) -> int:
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"invalid stream cursor {after!r}: the seq of the last item read, or 0")
    return after


async def subscribe(
    store: Store,
    workflow: str,
    instance_id: str,
    stream: str,
    after: int = 0,
    *,
    follow: bool = True,
    payloads: PayloadCodec | None = None,
) -> AsyncIterator[StreamItem]:
    """The items of ``stream`` with ``seq > after``, in order; with ``follow`` it waits for new
    ones until the instance has ended and every item is read, else it stops at the last one
    stored. A reader that stops and comes back with its last ``seq`` misses nothing the stream
    still keeps."""
    check_stream(stream)
    cursor = check_cursor(after)
    async for _ in changes(store, workflow, instance_id, None):
        while True:
            read = await store.messages.read_stream(workflow, instance_id, stream, cursor, PAGE)
            items = read.items
            if payloads is not None:
                items = await open_stream_items(payloads, workflow, instance_id, items)
            for item in items:
                cursor = item.seq
                yield item
            if len(read.items) < PAGE:
                break
        if not follow or read.instance_status in FINISHED_STATUSES:
            return
