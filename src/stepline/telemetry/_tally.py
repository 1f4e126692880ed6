"""The counters and histograms that the observer updates at every step, kept as plain numbers.

prometheus-client's own metric objects take a lock per update (several for a histogram), which
cost a trivial step a quarter of its throughput in the telemetry benchmark; the observer runs on
the event loop, so it adds to dictionaries instead, and a collector (:mod:`._metrics`) turns
copies of them into prometheus-client's metric families when scraped. A scrape from another
thread copies each dictionary and list in one step, which the interpreter does atomically.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


class Counts:
    """A counter per combination of label values."""

    __slots__ = ("description", "labels", "name", "values")

    def __init__(self, name: str, description: str, labels: Sequence[str]) -> None:
        self.name = name
        self.description = description
        self.labels = tuple(labels)
        self.values: dict[tuple[str, ...], float] = {}

    def add(self, key: tuple[str, ...], amount: float = 1.0) -> None:
        values = self.values
        values[key] = values.get(key, 0.0) + amount

    def snapshot(self) -> list[tuple[tuple[str, ...], float]]:
        return list(self.values.items())


class Durations:
    """A histogram per combination of label values: a count per bucket (``bounds``, then the
    one past the last bound), and the sum last."""

    __slots__ = ("bounds", "description", "labels", "name", "values")

    def __init__(
        self, name: str, description: str, labels: Sequence[str], bounds: Sequence[float]
    ) -> None:
        self.name = name
        self.description = description
        self.labels = tuple(labels)
        self.bounds = tuple(bounds)
        self.values: dict[tuple[str, ...], list[float]] = {}

    def observe(self, key: tuple[str, ...], seconds: float) -> None:
        found = self.values.get(key)
        if found is None:
            found = self.values[key] = [0.0] * (len(self.bounds) + 2)
        found[bisect_left(self.bounds, seconds)] += 1
        found[-1] += seconds

    def snapshot(self) -> list[tuple[tuple[str, ...], list[float]]]:
        return [(key, list(found)) for key, found in list(self.values.items())]
