"""Typed values: Python objects as tagged JSON and back (docs/data.md).

Plain JSON is stored as it is. Pydantic models, dataclasses, datetimes, decimals, UUIDs, enums,
bytes, sets and tuples are stored as small tagged objects that read back as what went in, or
are refused, naming where; user types register a codec (:func:`register_type`). Never pickle.
This package turns values into JSON text and back; what stepline does with the text (offload,
encryption, redaction) is another layer's.
"""

from __future__ import annotations

from ._classes import TAG, register_type, unregister_type
from ._codec import TAG_BYTES, decode_text, encode_typed, refusal, subject
from ._readable import bytes_shown, readable
from ._tree import INT_MAX, INT_MIN, describe, from_tree, to_tree, wide_int
from ._typed import convert, convertible, declared, returns_of

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "TAG",
    "TAG_BYTES",
    "bytes_shown",
    "convert",
    "convertible",
    "declared",
    "decode_text",
    "describe",
    "encode_typed",
    "from_tree",
    "readable",
    "refusal",
    "register_type",
    "returns_of",
    "subject",
    "to_tree",
    "unregister_type",
    "wide_int",
]
