"""Pydantic models stored without the read-back check (stepline.values._models): which classes'
JSON is trusted, and, against the full check as an oracle over many valid and invalid instances,
that a trusted model is never stored when it would read back unequal, and is refused with the
same message as before."""

from __future__ import annotations

import datetime
import decimal
import enum
import functools
import random
import uuid
import warnings
import zoneinfo
from collections.abc import Iterator
from typing import Any, Generic, Literal, TypeVar

import pydantic
import pytest

from stepline import InvalidPayloadError
from stepline._json import encode, loads
from stepline.values import _codec, _models, decode_text

T = TypeVar("T")


class Size(enum.Enum):
    S = "s"
    M = "m"


class Rank(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Item(pydantic.BaseModel):
    sku: str
    qty: int
    price: float


class BigItem(Item):
    note: str = ""


class Lookalike(pydantic.BaseModel):
    sku: str
    qty: int
    price: float


class Order(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    id: int
    customer: str = pydantic.Field(alias="customerName")
    placed: datetime.datetime
    due: datetime.date | None = None
    at: datetime.time = datetime.time(9)
    wait: datetime.timedelta = datetime.timedelta(0)
    ref: uuid.UUID = uuid.UUID(int=0)
    raw: bytes = b""
    total: decimal.Decimal = decimal.Decimal("0")
    size: Size = Size.S
    rank: Rank = Rank.LOW
    paid: bool = False
    items: list[Item] = []
    main: Item | None = None
    by_sku: dict[str, Item] = {}
    tags: set[str] = set()
    marks: tuple[float, ...] = ()
    scores: dict[str, list[float]] = {}


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


def _unsafe_classes() -> dict[str, type[pydantic.BaseModel]]:
    """One class per reason a model keeps the full check."""

    class AnyField(pydantic.BaseModel):
        v: Any = None

    class ObjectField(pydantic.BaseModel):
        v: object = None

    class Choice(pydantic.BaseModel):
        v: Literal["a", "b"] = "a"

    class Overlap(pydantic.BaseModel):
        v: int | str = 0

    class Private(pydantic.BaseModel):
        v: int = 0
        _secret: int = pydantic.PrivateAttr(default=0)

    class Validated(pydantic.BaseModel):
        v: str = ""

        @pydantic.field_validator("v")
        @classmethod
        def strip(cls, v: str) -> str:
            return v.strip()

    class Serialised(pydantic.BaseModel):
        v: int = 0

        @pydantic.field_serializer("v")
        def double(self, v: int) -> int:
            return v * 2

    class Computed(pydantic.BaseModel):
        v: int = 0

        @pydantic.computed_field  # type: ignore[prop-decorator]
        @property
        def w(self) -> int:
            return self.v

    class Excluded(pydantic.BaseModel):
        v: int = pydantic.Field(default=0, exclude=True)

    class Extra(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        v: int = 0

    class Constrained(pydantic.BaseModel):
        v: int = pydantic.Field(default=1, gt=0)

    class Stripped(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(str_strip_whitespace=True)
        v: str = ""

    class Strict(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(strict=True)
        v: int = 0

    class EnumValues(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(use_enum_values=True)
        v: Size = Size.S

    class SplitAlias(pydantic.BaseModel):
        v: int = pydantic.Field(default=0, validation_alias="a", serialization_alias="b")

    class Equality(pydantic.BaseModel):
        v: int = 0

        def __eq__(self, other: object) -> bool:
            return self is other

    class PostInit(pydantic.BaseModel):
        v: int = 0

        def model_post_init(self, context: Any) -> None:
            self.__dict__["v"] += 1

    class Cached(pydantic.BaseModel):
        v: int = 0

        @functools.cached_property
        def w(self) -> int:
            return self.v

    class Box(pydantic.BaseModel, Generic[T]):
        v: T | None = None

    class Root(pydantic.RootModel[list[int]]):
        pass

    class Untyped(pydantic.BaseModel):
        v: list = []  # type: ignore[type-arg]

    class IntKeys(pydantic.BaseModel):
        v: dict[int, str] = {}

    class Pair(pydantic.BaseModel):
        v: tuple[int, str] = (0, "")

    class Flags(enum.Flag):
        A = 1
        B = 2

    class FlagField(pydantic.BaseModel):
        v: Flags = Flags.A

    class HoldsUnsafe(pydantic.BaseModel):
        v: list[AnyField] = []

    return {
        cls.__name__: cls
        for cls in (
            AnyField, ObjectField, Choice, Overlap, Private, Validated, Serialised, Computed,
            Excluded, Extra, Constrained, Stripped, Strict, EnumValues, SplitAlias, Equality,
            PostInit, Cached, Box, Box[int], Root, Untyped, IntKeys, Pair, FlagField, HoldsUnsafe,
        )
    }  # fmt: skip


UNSAFE = _unsafe_classes()
SAFE: list[type[pydantic.BaseModel]] = [Item, BigItem, Order, Node]


@pytest.mark.parametrize("cls", SAFE, ids=lambda c: c.__name__)
def test_classes_of_exact_types_are_trusted(cls: type[pydantic.BaseModel]) -> None:
    assert _models.trusted(cls) is not None


@pytest.mark.parametrize("name", list(UNSAFE))
def test_classes_whose_json_may_change_a_value_keep_the_full_check(name: str) -> None:
    assert _models.trusted(UNSAFE[name]) is None


PARIS = zoneinfo.ZoneInfo("Europe/Paris")
WILD: list[Any] = [
    0, 1, -1, True, 2**53, 2**53 + 1, 2**63, 2**64, -(2**63) - 1, 10**30, 1.5, 0.1 + 0.2, -0.0,
    1e300, 2.0, float("nan"), float("inf"), -float("inf"), "x", " x ", "", "s", "2026-01-01",
    b"ab", b"\xff", bytearray(b"a"), decimal.Decimal("1.10"), decimal.Decimal("NaN"),
    decimal.Decimal("-Infinity"), datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    datetime.datetime(2026, 7, 1, 9, tzinfo=PARIS), datetime.datetime(2026, 1, 1),
    datetime.date(2026, 1, 1), datetime.time(1, tzinfo=PARIS), datetime.time(23, 59, 59, 7),
    datetime.timedelta(days=-1, seconds=5, microseconds=3), uuid.UUID(int=7),
    str(uuid.UUID(int=7)), Size.M, Rank.HIGH, "m", [], [1, 2], [1.5, float("nan")], (1, 2),
    (1.5, 2), {1, 2}, {"a", "b"}, frozenset({"a"}), {"a": 1}, {1: "a"}, {"k": [1.0, 2]}, None,
    Item(sku="a", qty=1, price=1.0), BigItem(sku="a", qty=1, price=1.0, note="n"),
    Lookalike(sku="a", qty=1, price=1.0), Item.model_construct(sku="a"),
    Item.model_construct(sku="a", qty="1", price=1.0), {"sku": "a", "qty": 1, "price": 1.0},
    [Item(sku="a", qty=1, price=2.5)], [BigItem(sku="b", qty=2, price=1.0)],
    {"x": Item(sku="c", qty=3, price=0.5)}, {"x": Lookalike(sku="c", qty=3, price=0.5)},
    Node(name="leaf"), [Node(name="a", children=[Node(name="b")])],
    [Node.model_construct(children=[])],
]  # fmt: skip
"""Values of every kind, put into every field of a model by assignment or model_construct."""


def _item(rng: random.Random) -> Item:
    """Mostly plain values, now and then one whose JSON the fast path leaves to the full check
    (a "null" inside a string, a run of 20 digits)."""
    rare = rng.random() < 0.05
    price = rng.choice([0.0, -0.0, 1.5, 0.1 + 0.2, 1e300, 5e-324, -2.5e-8, 3, 2**53])
    qty = rng.choice([2**64 - 1, 10**19] if rare else [0, -1, 7, 2**63 - 1, -(2**63), 10**18])
    sku = rng.choice(["null", "0" * 25] if rare else ["a", "", 'é\u2028"q"', "s-1"])
    return Item(sku=sku, qty=qty, price=price)


def _order(rng: random.Random) -> Order:
    zone = rng.choice([None, datetime.UTC, PARIS, datetime.timezone(datetime.timedelta(hours=-3))])
    return Order(
        id=rng.choice([1, 42, 2**63 - 1, -(2**63), rng.randrange(10**12)]),
        customerName=rng.choice(["ACME", "", "x" * 50]),
        placed=datetime.datetime(2026, rng.randrange(1, 13), 1, 2, 3, 4, 5, tzinfo=zone),
        due=rng.choice([None, datetime.date(1, 1, 1), datetime.date(9999, 12, 31)]),
        at=datetime.time(rng.randrange(24), 0, 0, rng.randrange(10**6)),
        wait=datetime.timedelta(microseconds=rng.randrange(-(10**15), 10**15)),
        ref=uuid.UUID(int=rng.randrange(2**128)),
        raw=rng.choice([b"", b"ascii", "é".encode()]),
        total=rng.choice([decimal.Decimal(x) for x in ("0", "-0", "1.10", "1E+2", "-1E-30")]),
        size=rng.choice(list(Size)),
        rank=rng.choice(list(Rank)),
        paid=rng.random() < 0.5,
        items=[_item(rng) for _ in range(rng.randrange(4))],
        main=rng.choice([None, _item(rng)]),
        by_sku={str(i): _item(rng) for i in range(rng.randrange(3))},
        tags={rng.choice("abc") for _ in range(rng.randrange(3))},
        marks=tuple(rng.random() for _ in range(rng.randrange(3))),
        scores={"s": [rng.random() * 10 ** rng.randrange(-5, 30)]},
    )


def _instances(rng: random.Random) -> Iterator[pydantic.BaseModel]:
    """Valid instances, and instances with wild values assigned or constructed in."""
    for _ in range(150):
        yield _item(rng)
        yield _order(rng)
    order = Order(id=7, customerName="ACME", placed=datetime.datetime(2026, 1, 1, tzinfo=PARIS))
    yield order
    yield Order.model_validate(
        {
            "id": 1, "customerName": "x", "placed": "2026-01-02T03:04:05Z", "due": "2026-02-01",
            "wait": "P1DT2S", "ref": str(uuid.UUID(int=3)), "raw": "bytes", "total": "9.990",
            "size": "m", "rank": 2, "paid": True, "items": [{"sku": "a", "qty": 1, "price": 1}],
            "main": {"sku": "m", "qty": 2, "price": 0.1},
            "by_sku": {"a": {"sku": "a", "qty": 1, "price": 3}}, "tags": ["t", "u"],
            "marks": [1, 2.5], "scores": {"a": [0.30000000000000004]},
        }
    )  # fmt: skip
    yield Node(name="root", children=[Node(name="a", children=[Node(name="b")])])
    for cls in [*SAFE, *UNSAFE.values()]:
        fields = list(cls.__pydantic_fields__)
        for _ in range(60):
            values = {name: rng.choice(WILD) for name in fields if rng.random() < 0.7}
            try:
                yield cls.model_construct(**values)
            except TypeError:  # PostInit's hook on a value it cannot add to
                continue
        base = next(_instances_of(cls))
        if base is None:
            continue
        for name in fields:
            for wild in rng.sample(WILD, 12):
                value = base.model_copy()
                value.__dict__[name] = wild  # as an assignment without validation leaves it
                yield value


def _instances_of(cls: type[pydantic.BaseModel]) -> Iterator[pydantic.BaseModel | None]:
    try:
        if cls is Order:
            yield Order(id=1, customerName="a", placed=datetime.datetime(2026, 1, 1))
        elif cls in (Item, BigItem):
            yield cls(sku="a", qty=1, price=1.0)
        else:
            yield cls.model_validate({"name": "n"} if cls is Node else {})
    except pydantic.ValidationError:
        yield None


def _full_check(value: Any) -> tuple[bytes, Any] | str:
    """What storing ``value`` gave before classes were trusted: the stored text and value, or
    the refusal."""
    try:
        return _codec.read_back_model(value, "the result of step 'pay-1'")
    except InvalidPayloadError as exc:
        return str(exc)


def test_a_trusted_model_is_stored_only_when_it_reads_back_equal() -> None:
    rng = random.Random(53)
    fast = stored = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns of unexpected values while serialising
        for value in _instances(rng):
            expected = _full_check(value)
            try:
                data, back = _codec._encode_model(value, "the result of step 'pay-1'")
            except InvalidPayloadError as exc:
                assert str(exc) == expected, value  # refused as before, naming step and type
                continue
            assert not isinstance(expected, str), (expected, value)
            assert data == expected[0]
            read = decode_text(data)
            assert read == value and type(read) is type(value), (data, value)
            stored += 1
            if back is value:  # the fast path: the value itself, never compared
                fast += 1
                assert _models.trusted(type(value)) is not None
    # Both paths ran: the comparison above is not vacuous.
    assert fast > 100 and stored - fast > 100, (fast, stored)


def test_a_trusted_model_comes_back_as_itself_and_replays_equal() -> None:
    order = Order(
        id=1,
        customerName="ACME",
        placed=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        items=[Item(sku="a", qty=1, price=1.5)],
        total=decimal.Decimal("1.50"),
        scores={"a": [0.1, 2]},
    )
    text, back = encode(order, what="x")
    assert back is order
    assert loads(text) == order and type(loads(text)) is Order


@pytest.mark.parametrize(
    ("change", "found"),
    [
        ({"price": float("nan")}, "does not validate from its own JSON"),
        ({"price": float("inf")}, "does not validate from its own JSON"),
        ({"sku": None}, "does not validate from its own JSON"),
        ({"price": 2**53 + 1}, "would not read back equal"),
        ({"qty": 2**64}, "does not validate from its own JSON"),
    ],
)
def test_what_the_json_of_a_trusted_class_loses_is_refused(
    change: dict[str, Any], found: str
) -> None:
    item = Item(sku="a", qty=1, price=1.0)
    item.__dict__.update(change)  # assigned without validation
    with pytest.raises(InvalidPayloadError, match=found) as info:
        encode(item, what="the result of step 'pay-1'")
    assert str(info.value).startswith("the result of step 'pay-1' is not JSON-serialisable")
    assert "Item" in str(info.value)


def test_a_subclass_or_a_partial_model_in_a_field_is_refused() -> None:
    for inner in (BigItem(sku="a", qty=1, price=1.0, note="n"), Item.model_construct(sku="a")):
        order = Order(id=1, customerName="a", placed=datetime.datetime(2026, 1, 1))
        order.__dict__["items"] = [inner]
        with pytest.raises(InvalidPayloadError, match=r"test_models\.Order"):
            encode(order, what="the result of step 'pay-1'")


def test_a_wide_integer_in_a_model_is_refused_rather_than_read_back_as_a_float() -> None:
    """orjson, which reads stored text, reads an integer past 64 bits as a float."""

    class Counter(pydantic.BaseModel):
        n: int
        v: Any = None  # the full check

    for value in (Counter(n=10**30), Counter(n=-(2**63) - 1)):
        with pytest.raises(InvalidPayloadError, match="does not validate from its own JSON"):
            encode(value, what="x")
    text, back = encode(Counter(n=2**64 - 1, v="1234567890123456789012"), what="x")
    assert loads(text) == back


def test_before_pydantic_2_7_every_model_keeps_the_full_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``warnings="error"`` only warns there, so a wrong value would not be refused."""

    class Fresh(pydantic.BaseModel):
        v: int = 0

    monkeypatch.setattr(pydantic, "VERSION", "2.6.4")
    assert _models.trusted(Fresh) is None
