"""Pydantic model classes whose JSON provably reads back equal, and the check of one instance.

A model's ``model_dump_json`` reads back equal through ``model_validate_json`` when its class
is built only of types whose JSON is exact (str, int, bool, finite floats, decimals, datetimes,
dates, times, timedeltas, UUIDs, bytes, plain enums, nested such models, and lists, sets,
tuples, string-keyed dicts and ``Optional`` of them) and nothing changes values on the way
(no validators, serializers, constraints, private attributes, excluded or computed fields, extra
fields, or config that transforms). Such a class is decided once, from its schema.

What the schema cannot vouch for is an instance built or changed without validation
(``model_construct``, assignment). Pydantic's serializer, with ``warnings="error"``, refuses a
value of the wrong type; :func:`trusted` returns the walk that covers what it lets through: a
subclass or another model in a model's field, a model missing a field, and a number in a float
or decimal field that JSON does not bring back (NaN, infinity, an int past 2**53).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import functools
import math
import sys
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import NoneType, UnionType
from typing import Any

from ._tree import pydantic_model

Check = Callable[[Any], int]
"""How many ``None`` values an instance holds where its class allows them (each is a ``null`` in
its JSON), or -1 when the instance is not one its schema vouches for."""

_UNSAFE: Any = object()
"""A type whose JSON may not read back equal: the class keeps the full read-back check."""

_EXACT: frozenset[Any] = frozenset(
    {
        str, int, bool, bytes, datetime.datetime, datetime.date, datetime.time,
        datetime.timedelta, uuid.UUID,
    }
)  # fmt: skip
"""Types whose JSON reads back equal, and whose wrong values pydantic's serializer refuses."""

_CONFIG: dict[str, tuple[object, ...]] = {
    "extra": (None, "ignore", "forbid"),
    "strict": (None, False),
    "use_enum_values": (None, False),
    "coerce_numbers_to_str": (None, False),
    "str_strip_whitespace": (None, False),
    "str_to_lower": (None, False),
    "str_to_upper": (None, False),
    "str_min_length": (None, 0),
    "str_max_length": (None,),
    "json_encoders": (None,),
    "validate_by_alias": (None, True),
    "polymorphic_serialization": (None, False),
    "ser_json_timedelta": (None, "iso"),
    "ser_json_temporal": (None, "iso"),
    "ser_json_bytes": (None, "utf8"),
    "val_json_bytes": (None, "utf8"),
}
"""Config keys that change what is written or read, with the values that keep JSON exact."""

_INERT = frozenset(
    {
        "title", "model_title_generator", "field_title_generator", "frozen", "validate_assignment",
        "from_attributes", "loc_by_alias", "revalidate_instances", "protected_namespaces",
        "hide_input_in_errors", "defer_build", "plugin_settings", "json_schema_extra",
        "json_schema_mode_override", "json_schema_serialization_defaults_required",
        "use_attribute_docstrings", "cache_strings", "validation_error_cause", "validate_default",
        "validate_return", "populate_by_name", "validate_by_name", "serialize_by_alias",
        "alias_generator", "allow_inf_nan", "ser_json_inf_nan", "arbitrary_types_allowed",
        "regex_engine", "ignored_types", "val_temporal_unit", "url_preserve_empty_path",
        "schema_generator",
    }
)  # fmt: skip
"""Config keys that do not change the JSON of the types above (aliases are checked per field;
non-finite floats are refused by the walk whatever the config)."""

_OVERRIDDEN = (
    "__eq__", "model_post_init", "model_dump_json", "model_validate_json",
    "__get_pydantic_core_schema__",
)  # fmt: skip
"""Methods a class may not define for its JSON to be trusted (the base model's are)."""


def trusted(cls: type) -> Check | None:
    """For a model class whose JSON reads back equal, the check that an instance is one its
    schema vouches for; None when the class keeps the full read-back check. Built each call:
    the caller keeps it per class."""
    found = _model_check(cls, {}) if _serializer_refuses() else _UNSAFE
    return None if found is _UNSAFE else found


@dataclass(slots=True)
class _Building:
    """A model class whose check is being built; a model that holds itself checks through it."""

    check: Check | None = None

    def later(self, value: Any) -> int:
        return -1 if self.check is None else self.check(value)


def _model_check(cls: type, building: dict[type, _Building]) -> Any:
    """The check of an instance of ``cls`` (``_UNSAFE`` when its JSON is not trusted)."""
    pending = building.get(cls)
    if pending is not None:
        return pending.later
    if not _class_is_plain(cls):
        return _UNSAFE
    pending = building[cls] = _Building()
    field_map: dict[str, Any] = cls.__pydantic_fields__  # type: ignore[attr-defined]
    floats: list[str] = []
    checks: list[tuple[str, Check]] = []
    for name, info in field_map.items():
        if not _field_is_plain(name, info):
            return _UNSAFE
        check = _value_check(info.annotation, building)
        if check is _UNSAFE:
            return _UNSAFE
        if check is _float_exact:
            floats.append(name)
        elif check is not None:
            checks.append((name, check))
    pending.check = _instance_check(cls, len(field_map), tuple(floats), tuple(checks))
    return pending.check


def _instance_check(
    cls: type, size: int, floats: tuple[str, ...], checks: tuple[tuple[str, Check], ...]
) -> Check:
    """Exactly ``cls`` (not a subclass or another model), every field set (``model_construct``
    may leave one out; nothing else writes an instance's ``__dict__`` once cached properties are
    ruled out), and each field that needs it checked (float fields inline: the common case)."""
    if not checks and len(floats) <= 1:  # the common shapes, without a loop
        return _flat_check(cls, size, floats[0] if floats else None)

    def holds(value: Any) -> int:
        if type(value) is not cls:
            return -1
        attrs = value.__dict__
        if len(attrs) != size:
            return -1
        for name in floats:
            number = attrs[name]
            if (type(number) is not float or not -_INF < number < _INF) and _float_exact(
                number
            ) < 0:
                return -1
        nulls = 0
        for name, check in checks:
            found = check(attrs[name])
            if found < 0:
                return -1
            nulls += found
        return nulls

    return holds


def _flat_check(cls: type, size: int, number_field: str | None) -> Check:
    """:func:`_instance_check` of a class with at most one float field and no other check."""
    if number_field is None:
        return lambda value: 0 if type(value) is cls and len(value.__dict__) == size else -1

    def holds_flat(value: Any) -> int:
        if type(value) is not cls:
            return -1
        attrs = value.__dict__
        if len(attrs) != size:
            return -1
        number = attrs[number_field]
        return 0 if type(number) is float and -_INF < number < _INF else _float_exact(number)

    return holds_flat


def _class_is_plain(cls: type) -> bool:
    """No validator, serializer, private attribute, override or config that changes values."""
    base = _base_model(cls)
    if base is None or not getattr(cls, "__pydantic_complete__", False):
        return False
    if cls.__pydantic_root_model__ or cls.__private_attributes__:  # type: ignore[attr-defined]
        return False
    generic = cls.__pydantic_generic_metadata__  # type: ignore[attr-defined]
    if generic["origin"] is not None or generic["parameters"]:
        return False
    decorators = cls.__pydantic_decorators__  # type: ignore[attr-defined]
    if any(getattr(decorators, item.name) for item in fields(decorators)):
        return False
    mro = cls.__mro__
    for klass in mro[: mro.index(base)]:
        if any(name in klass.__dict__ for name in _OVERRIDDEN):
            return False
        if any(isinstance(item, functools.cached_property) for item in vars(klass).values()):
            return False
    config: dict[str, Any] = cls.model_config  # type: ignore[attr-defined]
    for key, setting in config.items():
        if key in _INERT:
            continue
        allowed = _CONFIG.get(key)
        if allowed is None or setting not in allowed:
            return False
    return True


def _field_is_plain(name: str, info: Any) -> bool:
    """No constraint or per-field serializer; written and read under the same key."""
    if info.metadata or info.exclude or getattr(info, "exclude_if", None) is not None:
        return False
    if info.discriminator is not None:
        return False
    written = info.serialization_alias or info.alias or name
    read = info.validation_alias or info.alias or name
    return isinstance(written, str) and written == read


def _value_check(tp: Any, building: dict[type, _Building]) -> Any:
    """None when pydantic's serializer alone keeps values of ``tp`` exact, a check of a value
    when it does not, or ``_UNSAFE``."""
    try:
        if tp in _EXACT:
            return None
    except TypeError:  # an unhashable annotation (metadata of its own)
        return _UNSAFE
    if tp is float:
        return _float_exact
    if tp is decimal.Decimal:
        return _decimal_exact
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        if issubclass(tp, enum.Enum):
            return None if _enum_is_plain(tp) else _UNSAFE
        if _base_model(tp) is not None:
            return _model_check(tp, building)
        return _UNSAFE
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, set, frozenset) and len(args) == 1:
        inner = _value_check(args[0], building)
        kinds: tuple[type, ...] = (list,) if origin is list else (set, frozenset)
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner = _value_check(args[0], building)
        kinds = (tuple,)
    elif origin is dict and len(args) == 2 and args[0] is str:
        inner = _value_check(args[1], building)
        if inner is None or inner is _UNSAFE:
            return inner
        return _each(inner, (dict,), values=True)
    elif origin in (typing.Union, UnionType) and len(args) == 2 and NoneType in args:
        inner = _value_check(args[0] if args[1] is NoneType else args[1], building)
        if inner is _UNSAFE:
            return inner
        if inner is None:
            return _none
        return lambda value: 1 if value is None else inner(value)
    else:
        return _UNSAFE
    if inner is None or inner is _UNSAFE:
        return inner
    return _each(inner, kinds)


def _each(check: Check, kinds: tuple[type, ...], *, values: bool = False) -> Check:
    """The check of a container of one of ``kinds``: ``check`` of each item (each value)."""

    def each(container: Any) -> int:
        if type(container) not in kinds:
            return -1
        found = [*map(check, container.values() if values else container)]
        return -1 if -1 in found else sum(found)

    return each


def _none(value: Any) -> int:
    return 1 if value is None else 0


_INF = math.inf
_EXACT_INT = 2**53
"""Integers up to this size are exact as floats (a float field written without validation)."""


def _float_exact(value: Any) -> int:
    cls = type(value)
    if cls is float:
        return 0 if -_INF < value < _INF else -1
    return 0 if cls is int and -_EXACT_INT <= value <= _EXACT_INT else -1


def _decimal_exact(value: Any) -> int:
    return 0 if type(value) is decimal.Decimal and value.is_finite() else -1


def _enum_is_plain(cls: type[enum.Enum]) -> bool:
    """Members with plain str or int values (a flag's combinations are not members)."""
    if issubclass(cls, enum.Flag):
        return False
    return all(type(member.value) in (str, int) for member in cls)


def _serializer_refuses() -> bool:
    """Whether ``model_dump_json(warnings="error")`` raises on a value of the wrong type (pydantic
    2.7 and later; before, any true value only warns)."""
    version = str(getattr(sys.modules.get("pydantic"), "VERSION", "0.0"))
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 7)


def _base_model(cls: type) -> type | None:
    """pydantic's ``BaseModel`` when ``cls`` is a model class."""
    model = pydantic_model()
    return model if model is not None and issubclass(cls, model) else None
