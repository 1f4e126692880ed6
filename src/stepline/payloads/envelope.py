"""The stored shapes of sealed values, told apart from plain JSON without ambiguity.

A value stepline stores is JSON text. A sealed one is a JSON object with exactly one key, which
is one of the reserved keys:

- ``{"$enc": {"k": key_id, "n": nonce_b64, "c": ciphertext_b64}}``: encrypted (AEAD);
- ``{"$blob": {"store": url, "key": key, "size": n, "sha256": hex, "enc": bool}}``: offloaded;
- ``{"$esc": value}``: a user value that is itself an object with one reserved key, escaped so
  that it cannot be taken for an envelope.

Plain values (every value written before payload codecs existed, and every value whose text
does not begin with ``{"$``) are stored and read exactly as before.
"""

from __future__ import annotations

from typing import Any

import orjson

ENC = "$enc"
BLOB = "$blob"
ESC = "$esc"
RESERVED = frozenset({ENC, BLOB, ESC})
_PREFIXES = tuple(f'{{"{key}":' for key in sorted(RESERVED))


def envelope_kind(value: Any) -> str | None:
    """The reserved key of a decoded stored value that is an envelope, else None."""
    if type(value) is dict and len(value) == 1:
        (key,) = value
        if key in RESERVED:
            return str(key)
    return None


def escaped(text: str) -> str:
    """``text`` (a value's JSON), escaped if it would read as an envelope."""
    if not text.startswith(_PREFIXES):  # the cheap test: orjson writes no spaces
        return text
    if envelope_kind(orjson.loads(text)) is None:
        return text
    return f'{{"{ESC}":{text}}}'


def unescaped(value: Any) -> Any:
    """The user value of a decoded plain or escaped stored value."""
    if envelope_kind(value) == ESC:
        return value[ESC]
    return value
