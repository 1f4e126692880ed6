"""JSON encoding of everything stepline stores (orjson; never pickle).

One rule for every value stepline stores (params, step results, event payloads, outputs), on
every entry point: it reads back equal to what was given, or it is refused with
:class:`InvalidPayloadError` naming where in the value the problem is. orjson alone would change
some values silently (NaN and infinities become ``null``; datetimes, UUIDs, enums and dataclasses
become strings or objects; integer literals beyond 64 bits parse as floats), so every encoding is
checked by decoding it again. The one accepted change: a tuple is stored as a JSON array and reads
back as a list.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import re
import uuid
from typing import Any

import orjson

from .errors import InvalidPayloadError

DEFAULT_MAX_PAYLOAD = 1024 * 1024  # 1 MiB

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
"""The integers JSON values may hold: orjson encodes nothing wider."""

_EXACT = frozenset({str, int, bool, type(None)})
"""Types orjson encodes exactly or refuses (never changes): no read-back check needed."""
_MAX_DEPTH = 512
_LONG_DIGITS = re.compile(r"\d{19}")
"""An integer literal outside the 64-bit range has at least 19 digits."""


def dumps(value: Any, *, what: str, limit: int = DEFAULT_MAX_PAYLOAD) -> str:
    """Encode ``value`` as JSON text, or raise :class:`InvalidPayloadError` naming ``what``.

    Refused: values orjson cannot encode (sets, bytes, non-string keys, integers beyond 64 bits,
    arbitrary objects) and values it would change (NaN, infinities, datetimes, UUIDs, enums,
    dataclasses). A tuple is encoded as an array (it reads back as a list).
    """
    return encode(value, what=what, limit=limit)[0]


def encode(value: Any, *, what: str, limit: int = DEFAULT_MAX_PAYLOAD) -> tuple[str, Any]:
    """:func:`dumps`, also returning the value as it will read back (decoded from the text)."""
    try:
        data = orjson.dumps(value)
    except TypeError as exc:
        raise InvalidPayloadError(_refusal(what, _unencodable(value, []), str(exc))) from None
    back = value
    if type(value) not in _EXACT:
        back = orjson.loads(data)
        if back != value:
            problem = _changed(value, back, [])
            if problem is not None:
                raise InvalidPayloadError(_refusal(what, problem, "")) from None
    if len(data) > limit:
        raise InvalidPayloadError(
            f"{what} is {len(data):,} bytes encoded, over the limit of {limit:,} bytes; "
            "store large data elsewhere and pass a reference"
        )
    return data.decode(), back


def loads(text: str | bytes | None) -> Any:
    """Decode stored JSON text (``None`` stays ``None``)."""
    if text is None:
        return None
    return orjson.loads(text)


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
            + _subject(path)
            + f" is {_wide_int(literal)}"
        )
    return value


def parse_json_argument(text: str, *, what: str) -> Any:
    """Parse JSON typed by a user (CLI, HTTP), with an error that quotes the problem."""
    try:
        return loads_exact(text, what=what)
    except orjson.JSONDecodeError as exc:
        raise InvalidPayloadError(f"{what} is not valid JSON: {exc}") from None


# -- finding what was wrong (only once a value was refused) ---------------------------------------

Problem = tuple[list[str | int], str]
"""Where in the value (keys and indexes), and what is wrong there (``"is ..."``)."""


def _refusal(what: str, problem: Problem | None, fallback: str) -> str:
    if problem is None:
        return f"{what} is not JSON-serialisable: {fallback}"
    path, found = problem
    return f"{what} is not JSON-serialisable: {_subject(path)} {found}"


def _subject(path: list[str | int]) -> str:
    where = "".join(f"[{step!r}]" for step in path)
    return f"the value at {where}" if where else "the value"


def _type_name(value: object) -> str:
    cls = type(value)
    name = cls.__qualname__
    return name if cls.__module__ == "builtins" else f"{cls.__module__}.{name}"


def _describe(value: object) -> str:
    """What a refused leaf is, and what to store instead."""
    name = _type_name(value)
    if isinstance(value, int):  # past the 64-bit range (bool and small ints are encodable)
        return f"is {_wide_int(str(value))}"
    if isinstance(value, float):
        return f"is {value!r}; JSON has no NaN or infinity: store null or a string instead"
    if isinstance(value, set | frozenset):
        return f"is of type {name}; store a list instead"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"is of type {name}; store text (e.g. base64) instead"
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta):
        return f"is of type {name}, which would read back as text; store value.isoformat()"
    if isinstance(value, uuid.UUID):
        return f"is of type {name}, which would read back as text; store str(value) instead"
    if isinstance(value, enum.Enum):
        return f"is of type {name}, which would read back as its value; store value.value"
    if dataclasses.is_dataclass(value):
        return f"is of type {name} (a dataclass); store dataclasses.asdict(value) instead"
    if isinstance(value, str):
        return "is a string with a lone surrogate, which is not valid UTF-8"
    return f"is of type {name}; store only dict, list, str, int, float, bool and None"


def _wide_int(digits: str) -> str:
    if len(digits) > 40:
        digits = f"{digits[:20]}...{digits[-8:]} ({len(digits)} digits)"
    return (
        f"the integer {digits}, outside the 64-bit range stepline stores (-2**63 to 2**64-1); "
        "store it as a string"
    )


def _unencodable(value: Any, path: list[str | int]) -> Problem | None:
    """The first part of ``value`` orjson refuses to encode, or None if none is found."""
    if len(path) > _MAX_DEPTH:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                found = f"has the key {key!r} of type {_type_name(key)}; keys must be strings"
                return path, found
            problem = _unencodable(item, [*path, key])
            if problem is not None:
                return problem
        return None
    if type(value) is list or type(value) is tuple or isinstance(value, list):
        for index, item in enumerate(value):
            problem = _unencodable(item, [*path, index])
            if problem is not None:
                return problem
        return None
    try:
        orjson.dumps(value)
    except TypeError:
        return path, _describe(value)
    return None


def _changed(value: Any, back: Any, path: list[str | int]) -> Problem | None:
    """The first part of ``value`` that its decoded encoding ``back`` does not equal; None if
    the only differences are tuples read back as lists."""
    if len(path) > _MAX_DEPTH:
        return path, "nested too deeply to check (over 512 levels)"
    if isinstance(value, dict) and isinstance(back, dict):
        for key, item in value.items():
            problem = _changed(item, back[key], [*path, key])
            if problem is not None:
                return problem
        return None
    if isinstance(value, list | tuple) and isinstance(back, list) and len(value) == len(back):
        for index, (item, item_back) in enumerate(zip(value, back, strict=True)):
            problem = _changed(item, item_back, [*path, index])
            if problem is not None:
                return problem
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return path, _describe(value)
    if type(value) is not type(back) and not isinstance(value, str | int | float):
        return path, _describe(value)
    if value != back:
        return path, _describe(value)
    return None


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
