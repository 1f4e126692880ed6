"""JSON encoding of everything stepline stores (orjson; never pickle).

One rule for every value stepline stores (params, step results, event payloads, outputs), on
every entry point: it reads back equal to what was given, or it is refused with
:class:`InvalidPayloadError` naming where in the value the problem is. Plain JSON is stored as it
is (checked by decoding it again: orjson alone would turn NaN into ``null`` and a UUID into
text); any other value goes through :mod:`stepline.values`, which tags typed values (datetimes,
models, dataclasses, ...) so that they read back as themselves, and refuses the rest.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

import orjson

from .errors import InvalidPayloadError
from .values import INT_MAX, INT_MIN, TAG_BYTES, decode_text, encode_typed, subject, wide_int

DEFAULT_MAX_PAYLOAD = 1024 * 1024  # 1 MiB

_EXACT = frozenset({str, int, bool, type(None)})
"""Types orjson encodes exactly or refuses (never changes): no read-back check needed."""
PLAIN_ONLY = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
"""orjson refuses datetimes and dataclasses rather than encoding them its own way (a subclass
of dict, list, str or int is stored as its base: it reads back equal)."""
_LONG_DIGITS = re.compile(r"\d{19}")
"""An integer literal outside the 64-bit range has at least 19 digits."""


def dumps(value: Any, *, what: str, limit: int = DEFAULT_MAX_PAYLOAD) -> str:
    """Encode ``value`` as JSON text, or raise :class:`InvalidPayloadError` naming ``what``.

    Typed values (docs/data.md) are tagged; refused: values of other types, non-finite floats,
    integers beyond 64 bits, strings that are not valid UTF-8.
    """
    return encode(value, what=what, limit=limit)[0]


def encode(value: Any, *, what: str, limit: int = DEFAULT_MAX_PAYLOAD) -> tuple[str, Any]:
    """:func:`dumps`, also returning the value as it will read back (decoded from the text)."""
    data = None
    back = value
    if type(value) in _EXACT:
        try:
            data = orjson.dumps(value)
        except TypeError:
            data = None  # a wide integer or a lone surrogate: named below
    elif not isinstance(value, enum.Enum):  # an IntEnum or StrEnum equals its plain value
        try:
            data = orjson.dumps(value, option=PLAIN_ONLY)
        except TypeError:
            pass
        else:
            # Plain JSON reads back equal; a dict with a "$t" key of its own must be escaped.
            back = orjson.loads(data)
            if back != value or TAG_BYTES in data:
                data = None
    if data is None:
        data, back = encode_typed(value, what)
    if len(data) > limit:
        raise InvalidPayloadError(
            f"{what} is {len(data):,} bytes encoded, over the limit of {limit:,} bytes; "
            "store large data elsewhere and pass a reference"
        )
    return data.decode(), back


def loads(text: str | bytes | None) -> Any:
    """Decode stored JSON text (``None`` stays ``None``; tagged values as themselves)."""
    if text is None:
        return None
    return decode_text(text)


def loads_exact(text: str | bytes, *, what: str) -> Any:
    """Decode JSON sent by a user (HTTP body, CLI argument).

    Raises :class:`orjson.JSONDecodeError` for text that is not JSON, and
    :class:`InvalidPayloadError` for an integer outside the 64-bit range, which orjson would
    otherwise turn into a float (and so into another number).
    """
    value = orjson.loads(text)
    probe = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if _LONG_DIGITS.search(probe) is None:
        return value
    # Rare: re-parse with the standard library, which hands over each integer literal as text.
    marked = json.loads(probe, parse_int=_checked_int)
    found = _find_wide(marked, [])
    if found is not None:
        path, literal = found
        raise InvalidPayloadError(
            f"{what} holds a number stepline cannot store exactly: "
            + subject(path)
            + f" {wide_int(literal)}"
        )
    return value


def parse_json_argument(text: str, *, what: str) -> Any:
    """Parse JSON typed by a user (CLI, HTTP), with an error that quotes the problem."""
    try:
        return loads_exact(text, what=what)
    except orjson.JSONDecodeError as exc:
        raise InvalidPayloadError(f"{what} is not valid JSON: {exc}") from None


class _Wide(str):
    """An integer literal outside the 64-bit range, as found by the standard library parser."""


def _checked_int(literal: str) -> int | _Wide:
    number = int(literal)
    return number if INT_MIN <= number <= INT_MAX else _Wide(literal)


def _find_wide(value: Any, path: list[str | int]) -> tuple[list[str | int], str] | None:
    if isinstance(value, _Wide):
        return path, str(value)
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _find_wide(item, [*path, key])
        if found is not None:
            return found
    return None
