"""Typed values shown to people and JSON tools (HTTP API, CLI, dashboard, Cloudflare API): a
datetime as ISO text, bytes as their size and first bytes, a model as its JSON data."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from typing import Any

from . import _classes
from ._tree import ordered, pydantic_model

BYTES_SHOWN = 4
"""How many leading bytes a readable ``bytes`` shows (in hex)."""


def readable(value: Any) -> Any:
    """``value`` as plain JSON data for display; plain JSON data is returned as it is."""
    cls = type(value)
    if cls is str or cls is int or cls is float or cls is bool or value is None:
        return value
    if cls is dict:
        for key, item in value.items():
            if type(key) is not str or readable(item) is not item:
                return {_key(key): readable(item) for key, item in value.items()}
        return value
    if cls is list:
        items = [readable(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if cls is tuple:
        return [readable(item) for item in value]
    if cls is set or cls is frozenset:
        return [readable(item) for item in ordered(value)]
    if cls is bytes or cls is bytearray:
        return bytes_shown(bytes(value))
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if cls is datetime.timedelta:
        return str(value)
    if cls is decimal.Decimal or cls is uuid.UUID:
        return str(value)
    codec = _classes.codec_for(cls)
    if codec is not None:
        try:
            return readable(codec.encode(value))
        except Exception:
            return repr(value)
    if isinstance(value, enum.Enum):
        return readable(value.value)
    model = pydantic_model()
    if model is not None and isinstance(value, model):
        return value.model_dump(mode="json", by_alias=True)  # type: ignore[attr-defined]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: readable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return repr(value)


def bytes_shown(data: bytes) -> str:
    """``<bytes 12 KiB: 89504e47…>``: the size, and the first bytes in hex."""
    size = len(data)
    if size < 1024:
        amount = f"{size} B"
    elif size < 1024 * 1024:
        amount = f"{size / 1024:.3g} KiB"
    else:
        amount = f"{size / (1024 * 1024):.3g} MiB"
    head = data[:BYTES_SHOWN].hex()
    more = "…" if size > BYTES_SHOWN else ""
    return f"<bytes {amount}: {head}{more}>" if size else "<bytes 0 B>"


def _key(key: Any) -> str:
    if type(key) is str:
        return key
    shown = readable(key)
    return shown if isinstance(shown, str) else str(shown)
