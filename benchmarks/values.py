"""Typed values: what encoding a value costs (with its read-back check), per value.

Each figure is the cost of ``stepline._json.encode`` (the text stored, and the value it reads
back as, checked equal) for one value, beside its floor where one exists:

- a pydantic model (an order of five nested items and a datetime), floor: its own
  ``model_dump_json``;
- a dataclass with a datetime, floor: ``orjson.dumps`` of its fields as JSON data;
- twenty UTC datetimes in a dict, floor: ``orjson.dumps`` of the dict (orjson writes datetimes
  natively, but they would read back as strings);
- plain JSON (a dict of five small dicts), floor: ``orjson.dumps`` of it.

No database: the cost a step's result adds before its write. Run: ``python -m benchmarks values``.
"""

from __future__ import annotations

import dataclasses
import datetime
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pydantic

from stepline import _json

from ._config import BenchConfig, parse
from ._report import Figure, Floor, Report, median
from ._run import execute

NAME = "values"
CALLS = 2000
"""Calls timed together; a repetition's figure is the best of five such batches."""


class Item(pydantic.BaseModel):
    sku: str
    qty: int
    price: float


class Order(pydantic.BaseModel):
    id: int
    customer: str
    placed: datetime.datetime
    items: list[Item]
    tags: list[str]


@dataclasses.dataclass
class Point:
    x: float
    y: float
    at: datetime.datetime
    label: str


UTC = datetime.UTC
ORDER = Order(
    id=1,
    customer="ACME",
    placed=datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    items=[Item(sku=f"s{i}", qty=i, price=i * 1.5) for i in range(5)],
    tags=["a", "b"],
)
POINT = Point(1.0, 2.0, datetime.datetime(2024, 1, 2, tzinfo=UTC), "p")
DATES = {"when": [datetime.datetime(2024, 1, i + 1, tzinfo=UTC) for i in range(20)]}
PLAIN = {"items": [{"sku": f"s{i}", "qty": i, "price": i * 1.5} for i in range(5)], "id": 1}

CASES: dict[str, tuple[Any, str, Callable[[], Any]]] = {
    "model": (ORDER, "model_dump_json", lambda: ORDER.model_dump_json(by_alias=True)),
    "dataclass": (POINT, "orjson.dumps of its fields", lambda: orjson.dumps(vars(POINT))),
    "datetimes": (DATES, "orjson.dumps", lambda: orjson.dumps(DATES)),
    "plain": (PLAIN, "orjson.dumps", lambda: orjson.dumps(PLAIN)),
}


def _per_call(fn: Callable[[], Any]) -> float:
    """Microseconds per call: the best of five batches (the least disturbed by other work)."""
    return min(timeit.repeat(fn, number=CALLS, repeat=5)) / CALLS * 1e6


def _encoding(value: Any) -> Callable[[], Any]:
    return lambda: _json.encode(value, what="v")


async def run(config: BenchConfig) -> list[Report]:
    runs = config.repetitions(heavy=False)
    encoded: dict[str, list[float]] = {name: [] for name in CASES}
    floors: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, (value, _floor, floor_fn) in CASES.items():  # each beside its floor
            encoded[name].append(_per_call(_encoding(value)))
            floors[name].append(_per_call(floor_fn))
    report = Report(NAME, f"Encoding a value with its read-back check (median of {runs} runs)")
    for name, (_value, floor_name, _fn) in CASES.items():
        floor = Floor(floor_name, median(floors[name]), "µs", tuple(floors[name]))
        figure = Figure(
            f"{name}: encode and check", median(encoded[name]), "µs", floor, tuple(encoded[name])
        )
        report.figures.append(figure)
    report.details = {"calls": CALLS, "runs": runs, "encoded": encoded, "floors": floors}
    report.notes = ["one thread, no database: the cost a result adds before its write"]
    return [report]


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
