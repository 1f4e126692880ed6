"""JSON encoding of everything stepline stores (orjson; never pickle)."""

from __future__ import annotations

from typing import Any

import orjson

from .errors import InvalidPayloadError

DEFAULT_MAX_PAYLOAD = 1024 * 1024  # 1 MiB


def dumps(value: Any, *, what: str, limit: int = DEFAULT_MAX_PAYLOAD) -> str:
    """Encode ``value`` as JSON text, or raise :class:`InvalidPayloadError` naming ``what``."""
    try:
        data = orjson.dumps(value)
    except TypeError as exc:
        raise InvalidPayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    if len(data) > limit:
        raise InvalidPayloadError(
            f"{what} is {len(data):,} bytes encoded, over the limit of {limit:,} bytes; "
            "store large data elsewhere and pass a reference"
        )
    return data.decode()


def loads(text: str | bytes | None) -> Any:
    """Decode stored JSON text (``None`` stays ``None``)."""
    if text is None:
        return None
    return orjson.loads(text)


def parse_json_argument(text: str, *, what: str) -> Any:
    """Parse JSON typed by a user (CLI, HTTP), with an error that quotes the problem."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidPayloadError(f"{what} is not valid JSON: {exc}") from None
