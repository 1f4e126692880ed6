"""Typed values as stored text and back (stepline.values, through stepline._json): each kept type
reads back as itself, plain JSON is stored byte for byte as before, user data is never read as a
tag, and stored data never chooses what code is imported."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import logging
import sys
import uuid
import zoneinfo
from typing import Any

import orjson
import pydantic
import pytest

from stepline import InvalidPayloadError, register_type
from stepline._json import dumps, encode, loads
from stepline.values import readable, unregister_type


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    when: datetime.date
    tags: frozenset[str] = frozenset()


class Order(pydantic.BaseModel):
    id: int
    at: datetime.datetime
    lines: list[Point] = []
    total: decimal.Decimal = decimal.Decimal("0")


class Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True)
    at: datetime.datetime
    raw: bytes


PARIS = zoneinfo.ZoneInfo("Europe/Paris")
TYPED: dict[str, Any] = {
    "datetime": datetime.datetime(2026, 12, 7, 10, 0, tzinfo=datetime.UTC),
    "naive datetime": datetime.datetime(2026, 12, 7, 10, 0, 1, 5),
    "offset datetime": datetime.datetime(
        2026, 12, 7, 10, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    ),
    "zoned datetime": datetime.datetime(2026, 7, 1, 9, tzinfo=PARIS),
    "date": datetime.date(2026, 12, 7),
    "time": datetime.time(10, 30, 0, 7),
    "timedelta": datetime.timedelta(days=-1, seconds=5, microseconds=3),
    "decimal": decimal.Decimal("1.10"),
    "uuid": uuid.UUID(int=7),
    "enum": Colour.RED,
    "bytes": b"\x89PNG\x00",
    "bytearray": bytearray(b"ab"),
    "set": {3, 1, 2},
    "frozenset": frozenset({"a"}),
    "tuple": (1, (2.5, "x"), []),
    "int keys": {1: "one", 2: [Colour.RED]},
    "uuid keys": {uuid.UUID(int=1): True},
    "dataclass": Point(1, datetime.date(2026, 1, 1), frozenset({"x"})),
    "model": Order(id=1, at=datetime.datetime(2026, 1, 1, tzinfo=PARIS), total="9.99"),
    "nested model": Order(
        id=2, at=datetime.datetime(2026, 1, 1), lines=[Point(1, datetime.date(2026, 1, 1))]
    ),
    "strict model": Strict(at=datetime.datetime(2026, 1, 1), raw=b"\x00\x01"),
}


def test_int_and_str_enums_nested_in_plain_data_are_stored_as_their_value() -> None:
    """The documented limit: a member that equals its value, inside plain dicts and lists, is
    stored as the value (finding it would cost every plain value a walk); at the top, or in a
    model or dataclass, it is kept, and a declared type converts it back."""
    text, back = encode({"v": [Level.HIGH]}, what="x")
    assert text == '{"v":[3]}' and back == {"v": [3]}
    text, back = encode(Level.HIGH, what="x")
    assert back is Level.HIGH and loads(text) is Level.HIGH


@pytest.mark.parametrize("case", list(TYPED))
def test_typed_values_read_back_as_themselves(case: str) -> None:
    value = TYPED[case]
    for given in (value, {"v": [value]}):
        text, back = encode(given, what="x")
        for read in (back, loads(text), loads(text.encode())):
            assert read == given, (case, text)
            inner = read if given is value else read["v"][0]
            assert type(inner) is type(value), (case, text)
            if isinstance(value, datetime.datetime):
                assert inner.tzinfo == value.tzinfo, (case, text)
    assert orjson.loads(dumps(value, what="x"))["$t"], "tagged, readable by any JSON tool"


def test_tags_are_documented_json() -> None:
    text = dumps(
        {
            "at": datetime.datetime(2026, 12, 7, 10, tzinfo=PARIS),
            "id": uuid.UUID(int=7),
            "raw": b"hi",
        },
        what="x",
    )
    assert orjson.loads(text) == {
        "at": {"$t": "datetime", "v": "2026-12-07T10:00:00+01:00", "z": "Europe/Paris"},
        "id": {"$t": "uuid", "v": "00000000-0000-0000-0000-000000000007"},
        "raw": {"$t": "bytes", "v": "aGk="},
    }
    model = dumps(Order(id=1, at=datetime.datetime(2026, 1, 1)), what="x")
    assert model == (
        '{"$t":"model","c":"tests.values.test_codec:Order","v":'
        + Order(id=1, at=datetime.datetime(2026, 1, 1)).model_dump_json()
        + "}"
    )


PLAIN: list[Any] = [
    {"a": 1, "b": [1.5, None, True, "é"], "c": {}},
    [1, 2, 3],
    "text",
    "$t",
    ["$t", {"x": "$t"}],
    0,
    None,
    2**64 - 1,
    {"nested": [[{"deep": -0.0}]]},
]


@pytest.mark.parametrize("value", PLAIN)
def test_plain_json_is_stored_as_before(value: Any) -> None:
    """Old rows and plain values: the same text as orjson alone, read back unchanged."""
    text, back = encode(value, what="x")
    assert text == orjson.dumps(value).decode()
    assert back == value and loads(text) == value


def test_user_dicts_with_a_tag_key_are_escaped() -> None:
    for value in (
        {"$t": "datetime", "v": "2026-01-01T00:00:00"},
        {"$t": "uuid"},
        [{"$t": 1, "x": {"$t": "bytes", "v": "aGk="}}],
    ):
        text, back = encode(value, what="x")
        assert back == value and loads(text) == value, text
        assert type(loads(text)) is type(value)


def test_old_rows_with_a_tag_key_read_back_unchanged() -> None:
    """Data written before tags existed: a "$t" that is no tag stepline writes stays data."""
    for text in (
        '{"note":{"$t":"user data"}}',
        '{"$t":"not-a-kind","v":1}',
        '{"$t":"datetime","v":"not a date"}',
    ):
        assert loads(text) == orjson.loads(text), text


def test_stored_data_never_imports_a_module(caplog: pytest.LogCaptureFixture) -> None:
    missing = "stepline_no_such_module_for_tests"
    text = '{"$t":"model","c":"' + missing + ':Thing","v":{"a":1}}'
    assert loads(text) == {"a": 1}
    assert missing not in sys.modules
    # A path to something that is not a model, a dataclass or an enum is not called.
    for kind in ("model", "dataclass", "enum"):
        assert loads('{"$t":"' + kind + '","c":"os:system","v":{"a":"echo hi"}}') == {
            "a": "echo hi"
        }
    # A known class that no longer validates: its data, as stored, and a warning saying why.
    with caplog.at_level(logging.WARNING, logger="stepline.values"):
        stale = '{"$t":"model","c":"tests.values.test_codec:Order","v":{"id":"x"}}'
        assert loads(stale) == {"id": "x"}
    assert "tests.values.test_codec:Order reads as its stored data" in caplog.text
    assert "validation error" in caplog.text


def test_a_class_defined_in_a_function_reads_back_in_the_process() -> None:
    @dataclasses.dataclass
    class Local:
        a: int

    text, back = encode([Local(1)], what="x")
    assert back == [Local(1)] and loads(text) == [Local(1)]


REFUSED: list[tuple[Any, str]] = [
    ({"a": [object()]}, "the value at ['a'][0] is of type object"),
    (Point(1, object()), "the value at ['when'] is of type object"),  # type: ignore[arg-type]
    ({"f": float("nan")}, "the value at ['f'] is nan"),
    ({1: float("inf")}, "the value at [1] is inf"),
    (
        datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        .astimezone(datetime.timezone(datetime.timedelta(0), "X"))
        .replace(tzinfo=type("Zone", (datetime.tzinfo,), {"utcoffset": lambda s, d: None})()),
        "in the time zone",
    ),
    ({"x": {2**64}}, "the integer 18446744073709551616"),
    ({"d": [decimal.Decimal("NaN")]}, "would not read back equal"),
]


@pytest.mark.parametrize(("value", "found"), REFUSED)
def test_what_cannot_read_back_equal_is_refused(value: Any, found: str) -> None:
    with pytest.raises(InvalidPayloadError) as info:
        encode(value, what="the result of step 'pay'")
    message = str(info.value)
    assert message.startswith("the result of step 'pay' is not JSON-serialisable: "), message
    assert found in message, message


def test_a_dataclass_without_equality_is_refused_naming_it() -> None:
    @dataclasses.dataclass(eq=False)
    class Opaque:
        a: int

    with pytest.raises(InvalidPayloadError, match="Opaque would not read back equal"):
        encode({"o": Opaque(1)}, what="x")


class Money:
    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (
            other.cents,
            other.currency,
        )

    __hash__ = None  # type: ignore[assignment]


def test_registered_types_read_back_as_themselves() -> None:
    register_type(Money, lambda m: [m.cents, m.currency], lambda d: Money(*d), name="money")
    try:
        value = {"price": Money(1250, "EUR"), "when": datetime.date(2026, 1, 1)}
        text, back = encode(value, what="x")
        assert orjson.loads(text)["price"] == {"$t": "type", "c": "money", "v": [1250, "EUR"]}
        assert back == value and loads(text) == value
        assert readable(value) == {"price": [1250, "EUR"], "when": "2026-01-01"}
        with pytest.raises(ValueError, match="already registered"):
            register_type(Point, repr, repr, name="money")
    finally:
        unregister_type(Money)
    # Without its codec (another process): the stored data.
    assert loads(text) == {"price": [1250, "EUR"], "when": datetime.date(2026, 1, 1)}
    with pytest.raises(InvalidPayloadError, match="register_type"):
        encode(Money(1, "EUR"), what="x")


def test_register_type_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="takes a class"):
        register_type("Money", repr, repr)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        register_type(Money, repr, "decode")  # type: ignore[arg-type]


def test_readable_shows_typed_values_as_people_read_them() -> None:
    png = b"\x89PNG" + bytes(12 * 1024)
    shown = readable(
        {
            "at": datetime.datetime(2026, 12, 7, 10, tzinfo=datetime.UTC),
            "png": png,
            "small": b"hi",
            "ids": {uuid.UUID(int=1)},
            "pair": (1, Colour.RED),
            "cost": decimal.Decimal("9.99"),
            "order": Order(id=1, at=datetime.datetime(2026, 1, 1)),
            "point": Point(1, datetime.date(2026, 1, 1)),
            "keys": {1: "one"},
        }
    )
    assert shown == {
        "at": "2026-12-07T10:00:00+00:00",
        "png": "<bytes 12 KiB: 89504e47…>",
        "small": "<bytes 2 B: 6869>",
        "ids": ["00000000-0000-0000-0000-000000000001"],
        "pair": [1, "red"],
        "cost": "9.99",
        "order": {"id": 1, "at": "2026-01-01T00:00:00", "lines": [], "total": "0"},
        "point": {"x": 1, "when": "2026-01-01", "tags": []},
        "keys": {"1": "one"},
    }
    plain = {"a": [1, {"b": None}]}
    assert readable(plain) is plain
    orjson.dumps(shown)  # plain JSON


class Attrs(dict[str, Any]):
    """A dict subclass, as Cloudflare's layer and many libraries have."""


class Name(str):
    pass


def test_subclasses_of_plain_types_are_stored_as_their_base() -> None:
    value = {"a": Attrs(x=1), "n": Name("ada")}
    text, back = encode(value, what="x")
    assert text == '{"a":{"x":1},"n":"ada"}' and back == value
    typed = [Attrs(at=datetime.date(2026, 1, 1)), Name("x")]
    text, back = encode(typed, what="x")
    assert back == typed and loads(text) == typed


EXACT_KINDS: list[Any] = [
    {"when": [datetime.datetime(2026, 1, i + 1, tzinfo=datetime.UTC) for i in range(3)]},
    (b"\x00raw", bytearray(b"x"), {1, 2}, frozenset({"a"}), datetime.date(2026, 1, 2)),
    {(1, "k"): datetime.timedelta(days=1, microseconds=3), "u": uuid.UUID(int=5)},
    [datetime.time(10, 30, tzinfo=datetime.UTC), datetime.datetime(2026, 1, 1)],
]


@pytest.mark.parametrize("value", EXACT_KINDS)
def test_stepline_kinds_read_back_equal_as_the_value_itself(value: Any) -> None:
    # Only stepline's own kinds: each reads back exactly, so the value is its own read-back.
    text, back = encode(value, what="x")
    assert back is value and loads(text) == value and type(loads(text)) is type(value)


def test_what_the_text_does_not_keep_reads_back_as_stored() -> None:
    named = datetime.timezone(datetime.timedelta(hours=1), "CET")
    folded = datetime.datetime(2026, 10, 25, 2, 30, fold=1)
    for value in (datetime.datetime(2026, 1, 1, tzinfo=named), folded):
        text, back = encode({"v": value}, what="x")
        assert back == loads(text) and back["v"] is not value  # as a replay will see it
