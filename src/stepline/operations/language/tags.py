"""The rules for tags: keys, values, how many an instance carries."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from .errors import TagError

TagValue = str | int | float | bool
"""A tag's value: text, a number or a boolean."""

MAX_TAGS = 20
"""The most tags one instance carries."""
MAX_KEY = 64
"""The longest tag key, in characters."""
MAX_VALUE = 256
"""The longest text value of a tag, in characters."""
KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
"""A key: a letter or underscore, then letters, digits, underscores or dashes."""


def check_tags(tags: object, *, where: str = "tags") -> dict[str, TagValue]:
    """``tags`` as a plain dict if it follows the rules; ``TagError`` naming the first key or
    value that does not (``where`` says where it came from, for the message)."""
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise TagError(f"{where} must be a mapping of key to value, not {type(tags).__name__}")
    if len(tags) > MAX_TAGS:
        raise TagError(f"{where}: {len(tags)} tags, at most {MAX_TAGS} per instance")
    checked: dict[str, TagValue] = {}
    for key, value in tags.items():
        checked[check_key(key, where=where)] = check_value(key, value, where=where)
    return checked


def check_key(key: object, *, where: str = "tags") -> str:
    if not isinstance(key, str) or len(key) > MAX_KEY or not KEY_PATTERN.fullmatch(key):
        raise TagError(
            f"{where}: invalid tag key {str(key)[:80]!r}: a letter or '_' then letters, digits, "
            f"'_' or '-', at most {MAX_KEY} characters"
        )
    return key


def check_value(key: str, value: object, *, where: str = "tags") -> TagValue:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if not math.isfinite(value) or abs(value) >= 2**53:
            raise TagError(f"{where}: tag {key!r}: number {value!r} is out of range")
        return value
    if isinstance(value, str):
        if "\x00" in value or any("\ud800" <= c <= "\udfff" for c in value):
            raise TagError(f"{where}: tag {key!r}: a NUL or lone surrogate is not allowed")
        if len(value) > MAX_VALUE:
            raise TagError(
                f"{where}: tag {key!r}: value of {len(value)} characters, at most {MAX_VALUE}"
            )
        return value
    raise TagError(
        f"{where}: tag {key!r}: a value is text, a number or a boolean, not {type(value).__name__}"
    )


def parse_tag_option(option: str) -> tuple[str, TagValue]:
    """``key=value`` as given on a command line: ``true``/``false`` are booleans, a number is a
    number, anything else text (quote it in the filter, not here)."""
    key, sep, raw = option.partition("=")
    if not sep:
        raise TagError(f"--tag {option!r}: expected key=value")
    check_key(key.strip(), where="--tag")
    value: TagValue = raw
    if raw in ("true", "false"):
        value = raw == "true"
    else:
        try:
            number = float(raw)
        except ValueError:
            pass
        else:
            if math.isfinite(number):
                value = int(number) if number.is_integer() and "." not in raw else number
    return key.strip(), check_value(key.strip(), value, where="--tag")
