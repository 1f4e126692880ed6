"""Declared types: a step's ``type=`` or return annotation, ``WorkflowEvent[T]``; what is read
back is converted into them (a pydantic model validated, a dataclass built from its fields).

Only types that carry more than JSON are converted (models, dataclasses, enums, datetimes and
the other typed values, and generics holding them): an annotation such as ``-> dict`` or
``-> list[str]`` leaves the value as it is.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import typing
import uuid
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any

from ..errors import InvalidPayloadError
from ._classes import class_name
from ._tree import build_dataclass, pydantic_model

_SCALARS = frozenset(
    {
        datetime.datetime, datetime.date, datetime.time, datetime.timedelta, decimal.Decimal,
        uuid.UUID, bytes, bytearray, tuple, set, frozenset,
    }
)  # fmt: skip
_NO_TYPE: Any = object()
_RETURNS: dict[object, Any] = {}
_ADAPTERS: dict[object, Any] = {}
_CONVERTIBLE: dict[object, bool] = {}


def returns_of(fn: Callable[..., Any]) -> Any:
    """The return type ``fn`` declares, if values are converted into it; else None."""
    # Every step asks: a function's (or bound method's) answer is kept by its code, looked up
    # before anything else.
    try:
        code = fn.__code__
    except AttributeError:
        code = None
    else:
        found = _RETURNS.get(code, _NO_TYPE)
        if found is not _NO_TYPE:
            return found
    target = getattr(fn, "__func__", fn)
    annotations = getattr(target, "__annotations__", None)
    if not annotations or "return" not in annotations:
        found = None
        if code is not None:
            _RETURNS[code] = found
        return found
    key = code or target
    found = _RETURNS.get(key, _NO_TYPE)
    if found is _NO_TYPE:
        found = declared(target, "return")
        _RETURNS[key] = found
    return found


def declared(fn: Callable[..., Any], name: str) -> Any:
    """The annotation of ``name`` (a parameter, or ``"return"``) of ``fn``, resolved, if values
    are converted into it; None otherwise (and when it cannot be resolved)."""
    try:
        hint = typing.get_type_hints(fn).get(name)
    except Exception:
        hint = getattr(fn, "__annotations__", {}).get(name)
        if isinstance(hint, str):
            return None
    return hint if hint is not None and convertible(hint) else None


def convertible(tp: Any) -> bool:
    """Whether values read back are converted into ``tp``."""
    try:
        known = _CONVERTIBLE.get(tp)
    except TypeError:  # unhashable annotation
        return False
    if known is None:
        known = _convertible(tp)
        _CONVERTIBLE[tp] = known
    return known


def _convertible(tp: Any) -> bool:
    if tp is Any or tp is None or tp is NoneType:
        return False
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        model = pydantic_model()
        return (
            tp in _SCALARS
            or issubclass(tp, enum.Enum)
            or dataclasses.is_dataclass(tp)
            or (model is not None and issubclass(tp, model))
        )
    return any(convertible(arg) for arg in typing.get_args(tp) if arg is not Ellipsis)


def convert(value: Any, tp: Any, what: str) -> Any:
    """``value`` as a ``tp`` (``value`` itself when it is one); :class:`InvalidPayloadError`
    naming ``what`` and the type when it does not convert."""
    plain_class = isinstance(tp, type) and typing.get_origin(tp) is None
    if plain_class and isinstance(value, tp):
        return value
    try:
        if plain_class:
            model = pydantic_model()
            if model is not None and issubclass(tp, model):
                return tp.model_validate(value)
            if issubclass(tp, enum.Enum):
                return tp(value)
        adapter = _adapter(tp)
        if adapter is not None:
            return adapter.validate_python(value)
        if plain_class and dataclasses.is_dataclass(tp) and isinstance(value, dict):
            return build_dataclass(typing.cast(type, tp), value)
    except Exception as exc:
        raise InvalidPayloadError(
            f"{what} does not read back as {_name(tp)}: {_reason(exc)}"
        ) from None
    if plain_class:
        raise InvalidPayloadError(
            f"{what} does not read back as {_name(tp)}: it is {type(value).__qualname__} "
            "(install pydantic to convert it)"
        )
    return value


def _adapter(tp: Any) -> Any:
    """pydantic's ``TypeAdapter`` for ``tp``, or None without pydantic."""
    found = _ADAPTERS.get(tp)
    if found is None:
        try:
            import pydantic
        except ImportError:
            return None
        found = pydantic.TypeAdapter(tp)
        _ADAPTERS[tp] = found
    return found


def _name(tp: Any) -> str:
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return class_name(tp)
    return repr(tp) if not isinstance(tp, UnionType) else str(tp)


def _reason(exc: Exception) -> str:
    text = str(exc).strip().replace("\n", "; ")
    return text if len(text) <= 500 else f"{text[:497]}..."
