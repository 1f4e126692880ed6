"""Stored text of typed values: encoding checked by reading it back, and decoding."""

from __future__ import annotations

import dataclasses
import re
import weakref
from typing import Any

import orjson

from .._shown import shown
from ..errors import InvalidPayloadError
from . import _classes, _models
from ._tree import (
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    Path,
    Unstorable,
    begin_walk,
    describe,
    end_walk,
    from_tree,
    pydantic_model,
    to_tree,
)

TAG_BYTES = b'"$t"'
TAG_TEXT = '"$t"'


def encode_typed(value: Any, what: str) -> tuple[bytes, Any]:
    """The stored text of a value that is not plain JSON, and the value it reads back as (equal
    to ``value``), or :class:`InvalidPayloadError` naming ``what``, where and the type."""
    model = pydantic_model()
    if model is not None and isinstance(value, model) and _classes.codec_for(type(value)) is None:
        return _encode_model(value, what)
    outer = begin_walk()
    try:
        tree = to_tree(value, [])
    except Unstorable as exc:
        raise InvalidPayloadError(refusal(what, exc.path, exc.found)) from None
    finally:
        unsure = end_walk(outer)
    try:
        data = orjson.dumps(tree)
    except TypeError as exc:  # a string that is not valid UTF-8 (a lone surrogate)
        path = _bad_string(value, [])
        raise InvalidPayloadError(
            f"{what} is not JSON-serialisable: {exc}"
            if path is None
            else refusal(what, path, describe(""))
        ) from None
    if not unsure:
        # Only stepline's own kinds (datetimes, bytes, tuples, sets...), each read back exactly.
        return data, value
    back = from_tree(orjson.loads(data))
    if back != value:
        path, found = _difference(value, back, [])
        raise InvalidPayloadError(refusal(what, path, found))
    return data, back


@dataclasses.dataclass(frozen=True, slots=True)
class _ModelClass:
    """What encoding a model class needs, found once: its path, the start of its tag (the path
    written once), and the check of an instance when its JSON is trusted (:mod:`._models`)."""

    path: str
    head: bytes
    check: _models.Check | None


_MODEL_CLASSES: weakref.WeakKeyDictionary[type, _ModelClass] = weakref.WeakKeyDictionary()


def _model_class(cls: type) -> _ModelClass:
    found = _MODEL_CLASSES.get(cls)
    if found is None:
        path = _classes.class_path(cls)
        head = b'{"$t":"model","c":' + orjson.dumps(path) + b',"v":'
        found = _MODEL_CLASSES[cls] = _ModelClass(path, head, _models.trusted(cls))
    return found


def _encode_model(value: Any, what: str) -> tuple[bytes, Any]:
    """A pydantic model at the top: its own JSON (``model_dump_json``) inside the tag; read back
    and compared unless its class's JSON is trusted and the instance checks."""
    cls = type(value)
    known = _model_class(cls)
    _classes.seen(cls, known.path)  # every time: a class redefined under one path is the newest
    check = known.check
    if check is not None and (nulls := check(value)) >= 0:
        try:
            # model_dump_json's own serializer, without its wrapper (and str to bytes again).
            text = cls.__pydantic_serializer__.to_json(value, by_alias=True, warnings="error")
        except Exception:  # a value of the wrong type: the full check below names it
            pass
        else:
            # The serializer writes a None in any field as null without a warning: each null
            # must be one the check counted where the class allows None.
            if text.count(b"null") == nulls and not _maybe_wide(text):
                return known.head + text + b"}", value
    return read_back_model(value, what)


def read_back_model(value: Any, what: str) -> tuple[bytes, Any]:
    """A model's JSON, read back and compared with it: the model as a replay will see it, or
    :class:`InvalidPayloadError` naming ``what`` and the type."""
    cls = type(value)
    name = _classes.class_name(cls)
    try:
        raw = value.model_dump_json(by_alias=True).encode()
    except Exception as exc:
        raise InvalidPayloadError(
            f"{what} is not JSON-serialisable: the value of type {name} failed to serialise: {exc}"
        ) from None
    try:
        # What a read sees: orjson's parse, which turns an integer past 64 bits into a float.
        read = orjson.dumps(orjson.loads(raw)) if _maybe_wide(raw) else raw
        back = cls.model_validate_json(read)
    except Exception as exc:
        raise InvalidPayloadError(
            f"{what} is not JSON-serialisable: the value of type {name} does not validate "
            f"from its own JSON: {exc}"
        ) from None
    if back != value:
        raise InvalidPayloadError(refusal(what, [], _unequal(value, back)))
    return _model_class(cls).head + raw + b"}", back


def _maybe_wide(text: bytes) -> bool:
    """Whether ``text`` may hold an integer outside orjson's range (-2**63 to 2**64-1), which it
    reads as a float. First any 19 digits in a row (every digit made a zero, then a substring
    search: far faster than a regular expression), then only then the integers themselves."""
    if _RUN_19 not in text.translate(_DIGITS):
        return False
    return any(not INT_MIN <= int(found) <= INT_MAX for found in _INTEGER.findall(text))


_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_RUN_19 = b"0" * 19
_INTEGER = re.compile(rb"(?<![\d.])-?\d{19,}")
"""An integer literal of 19 digits or more (not a fraction's digits; maybe inside a string)."""


def decode_text(text: str | bytes) -> Any:
    """The value stored as ``text`` (plain JSON as it is, tagged values decoded)."""
    value = orjson.loads(text)
    if (TAG_TEXT in text) if isinstance(text, str) else (TAG_BYTES in text):
        return from_tree(value)
    return value


def refusal(what: str, path: Path, found: str) -> str:
    return f"{what} is not JSON-serialisable: {subject(path)} {found}"


def subject(path: Path) -> str:
    where = "".join(f"[{step!r}]" for step in path)
    return f"the value at {where}" if where else "the value"


def _unequal(value: Any, back: Any) -> str:
    cls = type(value)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    return f"of type {name} would not read back equal: it reads back as {shown(back)}"


def _difference(value: Any, back: Any, path: Path) -> tuple[Path, str]:
    """Where ``back`` first differs from ``value``, and how."""
    if len(path) <= MAX_DEPTH and type(value) is type(back):
        if isinstance(value, dict) and len(value) == len(back):
            for key, item in value.items():
                if key in back and back[key] != item:
                    return _difference(item, back[key], [*path, _step(key)])
        elif isinstance(value, list | tuple) and len(value) == len(back):
            for index, (item, item_back) in enumerate(zip(value, back, strict=True)):
                if item != item_back:
                    return _difference(item, item_back, [*path, index])
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                item, item_back = getattr(value, field.name), getattr(back, field.name)
                if item != item_back:
                    return _difference(item, item_back, [*path, field.name])
    return path, _unequal(value, back)


def _step(key: Any) -> str | int:
    return key if isinstance(key, str | int) else repr(key)


def _bad_string(value: Any, path: Path) -> Path | None:
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return path
        return None
    if len(path) > MAX_DEPTH:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _bad_string(key, [*path, _step(key)]) or _bad_string(item, [*path, _step(key)])
            if found is not None:
                return found
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            found = _bad_string(item, [*path, index])
            if found is not None:
                return found
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            found = _bad_string(getattr(value, field.name), [*path, field.name])
            if found is not None:
                return found
    return None
