"""The W3C ``traceparent`` values stepline accepts from outside (an HTTP header, a queue
message's header, an argument): what is stored with an instance is always valid.

A value that is not a valid ``traceparent`` is ignored, as the W3C Trace Context recommendation
asks of a receiver: the instance then starts a trace of its own.
"""

from __future__ import annotations

import re

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def valid_traceparent(value: object) -> str | None:
    """``value`` if it is a valid W3C ``traceparent`` (version 00 exactly, or a later version's
    first four fields), else None."""
    if not isinstance(value, str) or len(value) > 256:
        return None
    value = value.strip()
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version, trace_id, span_id, _flags = match.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    if version == "00":
        return value if len(value) == 55 else None
    # A later version may append fields; its first four are read as version 00's.
    return value[:55] if len(value) == 55 or value[55] == "-" else None
