"""Messages to and from running instances, the client's side (docs/messaging.md): queries
answered from a replay (here with the workflow's code, else by a worker that has it), updates
sent and their replies awaited, streams read after a cursor. The handlers are declared with
:mod:`stepline.handlers`; the runtime's side is ``stepline._runtime`` (``updates``, ``query``,
``streams``); the store's is :class:`~stepline.store.messages.MessageStore`."""

from ._messaging import Messaging
from ._queries import DEFAULT_QUERY_TIMEOUT, answer_request
from ._streams import check_cursor, check_stream
from ._updates import check_update_id

__all__ = [
    "DEFAULT_QUERY_TIMEOUT",
    "Messaging",
    "answer_request",
    "check_cursor",
    "check_stream",
    "check_update_id",
]
