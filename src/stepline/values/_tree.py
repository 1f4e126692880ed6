"""Typed values as tagged JSON trees, and back.

Plain JSON (dicts with string keys, lists, str, int, float, bool, None) is its own tree. Any
other value becomes a small object ``{"$t": kind, ...}``; a dict that has a ``"$t"`` key of its
own is wrapped (``{"$t": "dict", "v": {...}}``) so that user data is never read as a tag. The
scheme is documented in docs/data.md.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import logging
import math
import sys
import threading
import uuid
import zoneinfo
from typing import Any

import orjson

from . import _classes
from ._classes import TAG

log = logging.getLogger("stepline.values")

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
MAX_DEPTH = 512

Path = list[str | int]


_walk = threading.local()
"""Per thread: whether the value being walked holds a part whose read-back must be checked (a
user's class or codec, a subclass of a plain type, a decimal). Steps encode in threads."""


def begin_walk() -> bool:
    """Start noting what :func:`to_tree` meets; returns the outer walk's note to restore."""
    outer = bool(getattr(_walk, "unsure", False))
    _walk.unsure = False
    return outer


def end_walk(outer: bool) -> bool:
    """Whether the walk met a part to check; the outer walk's note restored (and told)."""
    unsure = bool(getattr(_walk, "unsure", False))
    _walk.unsure = outer or unsure
    return unsure


def _unsure() -> None:
    _walk.unsure = True


class Unstorable(Exception):
    """A part of a value that cannot be stored: where (keys and indexes) and what it is."""

    def __init__(self, path: Path, found: str) -> None:
        super().__init__(found)
        self.path = path
        self.found = found


def type_name(value: object) -> str:
    return _classes.class_name(type(value))


def pydantic_model() -> type | None:
    """pydantic's ``BaseModel`` if pydantic is imported (a model can only exist then)."""
    module = sys.modules.get("pydantic")
    return None if module is None else getattr(module, "BaseModel", None)


def to_tree(value: Any, path: Path) -> Any:
    """``value`` as JSON-able data, typed parts tagged; :class:`Unstorable` where it cannot."""
    cls = type(value)
    if cls is str or cls is bool or value is None:
        return value
    if cls is int:
        if not INT_MIN <= value <= INT_MAX:
            raise Unstorable(path, wide_int(str(value)))
        return value
    if cls is float:
        if not math.isfinite(value):
            raise Unstorable(
                path, f"is {value!r}; JSON has no NaN or infinity: store None or a string instead"
            )
        return value
    if len(path) > MAX_DEPTH:
        raise Unstorable(path, f"is nested too deeply (over {MAX_DEPTH} levels)")
    if cls is dict:
        return _dict(value, path)
    if cls is list:
        return [
            item if type(item) in _AS_IS else to_tree(item, [*path, i])
            for i, item in enumerate(value)
        ]
    codec = _classes.codec_for(cls)
    if codec is not None:
        _unsure()
        try:
            data = codec.encode(value)
        except Exception as exc:  # the user's code: its failure is named, not raised through
            raise Unstorable(path, f"of type {type_name(value)} failed to encode: {exc!r}") from exc
        return {TAG: "type", "c": codec.name, "v": to_tree(data, path)}
    if cls is tuple:
        return {TAG: "tuple", "v": [to_tree(item, [*path, i]) for i, item in enumerate(value)]}
    if cls is set or cls is frozenset:
        items = [to_tree(item, path) for item in ordered(value)]
        return {TAG: cls.__name__, "v": items}
    if cls is bytes or cls is bytearray:
        return {TAG: cls.__name__, "v": base64.b64encode(value).decode("ascii")}
    if cls is datetime.datetime or cls is datetime.time:
        return _clock(value, path)
    if cls is datetime.date:
        return {TAG: "date", "v": value.isoformat()}
    if cls is datetime.timedelta:
        return {TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if cls is decimal.Decimal:
        _unsure()  # NaN reads back unequal
        return {TAG: "decimal", "v": str(value)}
    if cls is uuid.UUID:
        return {TAG: "uuid", "v": str(value)}
    _unsure()  # a class of the user's, or a subclass of a plain type
    if isinstance(value, enum.Enum):
        return {TAG: "enum", "c": _classes.seen(cls), "v": to_tree(value.value, path)}
    model = pydantic_model()
    if model is not None and isinstance(value, model):
        dumped = value.model_dump(mode="json", by_alias=True)  # type: ignore[attr-defined]
        return {TAG: "model", "c": _classes.seen(cls), "v": dumped}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: to_tree(getattr(value, f.name), [*path, f.name])
            for f in dataclasses.fields(value)
        }
        return {TAG: "dataclass", "c": _classes.seen(cls), "v": fields}
    return _subclassed(value, path)


def _subclassed(value: Any, path: Path) -> Any:
    """A subclass of a plain type (an OrderedDict, a str subclass, a namedtuple) as its base:
    it reads back equal (as stepline always stored it)."""
    if isinstance(value, dict):
        return _dict(value, path)
    if isinstance(value, list):
        return [to_tree(item, [*path, i]) for i, item in enumerate(value)]
    if isinstance(value, tuple):
        return {TAG: "tuple", "v": [to_tree(item, [*path, i]) for i, item in enumerate(value)]}
    for base in (str, int, float):
        if isinstance(value, base):
            return to_tree(base(value), path)
    raise Unstorable(path, describe(value))


def _dict(value: dict[Any, Any], path: Path) -> Any:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            pairs = [
                [to_tree(k, [*path, _shown_key(k)]), to_tree(v, [*path, _shown_key(k)])]
                for k, v in value.items()
            ]
            return {TAG: "map", "v": pairs}
        out[key] = item if type(item) in _AS_IS else to_tree(item, [*path, key])
    return {TAG: "dict", "v": out} if TAG in out else out


_AS_IS = frozenset({str, bool, type(None)})
"""Types whose values are their own tree (no range to check, unlike int and float)."""


def _shown_key(key: Any) -> str | int:
    return key if isinstance(key, str | int) else repr(key)


def ordered(items: set[Any] | frozenset[Any]) -> list[Any]:
    """A set's members in a stable order where they sort (the stored text then is stable)."""
    try:
        return sorted(items)
    except TypeError:
        return list(items)


def _clock(value: datetime.datetime | datetime.time, path: Path) -> dict[str, Any]:
    tz = value.tzinfo
    if value.fold or (tz is not None and tz is not datetime.UTC):
        _unsure()  # a fold, a fixed zone's name: not in the text, so read back to compare
    kind = "datetime" if type(value) is datetime.datetime else "time"
    tagged = {TAG: kind, "v": value.isoformat()}
    if tz is None or type(tz) is datetime.timezone:
        return tagged
    if type(tz) is zoneinfo.ZoneInfo and kind == "datetime":
        tagged["z"] = tz.key
        return tagged
    raise Unstorable(
        path,
        f"is a {kind} in the time zone {tz!r} of type {type_name(tz)}, which stepline cannot "
        "keep; use zoneinfo.ZoneInfo or datetime.timezone",
    )


def wide_int(digits: str) -> str:
    if len(digits) > 40:
        digits = f"{digits[:20]}...{digits[-8:]} ({len(digits)} digits)"
    return (
        f"is the integer {digits}, outside the 64-bit range stepline stores (-2**63 to 2**64-1); "
        "store it as a string"
    )


def describe(value: object) -> str:
    """What a refused part is, and what to do instead."""
    name = type_name(value)
    if isinstance(value, str):
        return "is a string with a lone surrogate, which is not valid UTF-8"
    return (
        f"is of type {name}, which stepline cannot store; store a supported type (docs/data.md) "
        f"or register one with stepline.register_type({type(value).__qualname__}, encode, decode)"
    )


# -- reading back ---------------------------------------------------------------------------------


def from_tree(node: Any) -> Any:
    """The value a tree encodes. Never raises: a tag it cannot read (an unknown kind, a bad
    value, a codec that fails) stays the data it is, and a class this process does not have
    reads as its stored data (docs/data.md)."""
    cls = type(node)
    if cls is dict:
        kind = node.get(TAG)
        if kind is not None:
            try:
                return _untag(kind, node)
            except Exception:
                pass
        return {key: from_tree(item) for key, item in node.items()}
    if cls is list:
        return [from_tree(item) for item in node]
    return node


_CLASS_KINDS = frozenset({"enum", "model", "dataclass", "type"})


def _untag(kind: Any, node: dict[str, Any]) -> Any:
    if kind in _CLASS_KINDS:
        return _instance(kind, node["c"], node["v"])
    data = node["v"]
    if kind == "dict":
        return {key: from_tree(item) for key, item in data.items()}
    if kind == "tuple":
        return tuple(from_tree(item) for item in data)
    if kind == "set":
        return {from_tree(item) for item in data}
    if kind == "frozenset":
        return frozenset(from_tree(item) for item in data)
    if kind == "map":
        return {from_tree(key): from_tree(item) for key, item in data}
    if kind == "bytes":
        return base64.b64decode(data, validate=True)
    if kind == "bytearray":
        return bytearray(base64.b64decode(data, validate=True))
    if kind == "datetime":
        when = datetime.datetime.fromisoformat(data)
        zone = node.get("z")
        if zone is not None:
            when = when.replace(tzinfo=zoneinfo.ZoneInfo(zone))
        return when
    if kind == "date":
        return datetime.date.fromisoformat(data)
    if kind == "time":
        return datetime.time.fromisoformat(data)
    if kind == "timedelta":
        days, seconds, micros = data
        return datetime.timedelta(days=days, seconds=seconds, microseconds=micros)
    if kind == "decimal":
        return decimal.Decimal(data)
    if kind == "uuid":
        return uuid.UUID(data)
    raise ValueError(f"no kind {kind!r}")


def _instance(kind: str, path: Any, data: Any) -> Any:
    """An enum member, model, dataclass or registered type; its stored data when the class is
    not in this process or the data no longer makes one."""
    if kind == "model":  # the model's own JSON data, not tagged inside
        found = _classes.resolve(path)
        model = pydantic_model()
        if found is not None and model is not None and issubclass(found, model):
            try:
                # JSON-mode validation: what model_dump(mode="json") wrote (strict models too)
                return found.model_validate_json(orjson.dumps(data))  # type: ignore[attr-defined]
            except Exception as exc:  # no longer valid: its data
                _unread(path, exc)
                return data
        return data
    value = from_tree(data)
    try:
        if kind == "type":
            codec = _classes.codec_named(path)
            return value if codec is None else codec.decode(value)
        found = _classes.resolve(path)
        if kind == "enum" and found is not None and issubclass(found, enum.Enum):
            return found(value)
        if kind == "dataclass" and found is not None and dataclasses.is_dataclass(found):
            return build_dataclass(found, value)
    except Exception as exc:  # the user's class or codec refused its data
        _unread(path, exc)
        return value
    return value


def _unread(path: Any, exc: Exception) -> None:
    """Say why a stored value reads as its data rather than as its class."""
    reason = str(exc).strip().replace("\n", "; ")[:300]
    log.warning("a stored value of %s reads as its stored data: %s", path, reason)


def build_dataclass(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of the dataclass ``cls`` from its fields' values (those not taken by its
    ``__init__`` set after it)."""
    init: dict[str, Any] = {}
    later: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in fields:
            (init if field.init else later)[field.name] = fields[field.name]
    made = cls(**init)
    for name, item in later.items():
        object.__setattr__(made, name, item)
    return made
