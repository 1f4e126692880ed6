"""What every benchmark shares: figures, the table printer, the JSON writer, medians.

A benchmark returns a :class:`Report`: a list of :class:`Figure` (a measured value, optionally
with the floor it is compared against and their ratio) plus free-form details (parameters, raw
per-run values). :func:`print_report` shows it as a table; :func:`write_report` stores it as JSON
under ``benchmarks/results/`` (git-ignored). Benchmarks print; they never assert.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Floor:
    """The cheapest possible way to do the same durable work, measured in the same run."""

    name: str
    value: float
    unit: str
    runs: tuple[float, ...] = ()
    """The floor measured in every repetition (``value`` is their median)."""


@dataclass(frozen=True)
class Figure:
    """One measured value; with a floor, the ratio ``value / floor`` is shown."""

    name: str
    value: float
    unit: str
    floor: Floor | None = None
    runs: tuple[float, ...] = ()
    """The value of every repetition (``value`` is their median)."""

    @property
    def ratio(self) -> float | None:
        """The median of the repetitions' own ratios when the floor was measured in each of
        them (a value and the floor of the same repetition saw the same machine), else the
        ratio of the medians."""
        if self.floor is None or self.floor.value <= 0:
            return None
        runs, floors = self.runs, self.floor.runs
        if runs and len(runs) == len(floors) and all(f > 0 for f in floors):
            return median([value / floor for value, floor in zip(runs, floors, strict=True)])
        return self.value / self.floor.value


@dataclass
class Report:
    """A benchmark's outcome: figures for the table, details for the JSON file."""

    benchmark: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    load: dict[str, tuple[float, float, float] | None] = field(default_factory=dict)
    """Load averages when the benchmark started and ended (other work on the machine)."""


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values: the benchmark ran no repetition")
    return float(statistics.median(values))


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values``, interpolated between closest ranks."""
    if not values:
        raise ValueError(f"percentile {p} of no values: nothing was measured")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def load_average() -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    return os.getloadavg() if hasattr(os, "getloadavg") else None


def environment() -> dict[str, Any]:
    """Where the figures were measured."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "load_average": load_average(),
    }


def _fmt(value: float, unit: str) -> str:
    if value >= 100:
        text = f"{value:,.0f}"
    elif value >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}"


def print_report(report: Report, console: Console | None = None) -> None:
    """Print the figures as a table (figure, value, floor, ratio), then the notes."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=110)
    table = Table(title=report.title, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("floor", justify="right")
    table.add_column("ratio", justify="right")
    floors: dict[str, Floor] = {}
    for figure in report.figures:
        floor_text = ""
        if figure.floor is not None:
            letter = _floor_letter(floors, figure.floor)
            floor_text = f"{_fmt(figure.floor.value, figure.floor.unit)} [{letter}]"
        ratio = figure.ratio
        table.add_row(
            figure.name,
            _fmt(figure.value, figure.unit),
            floor_text,
            f"{ratio:.2f}x" if ratio is not None else "",
        )
    console.print(table)
    if report.load:
        loads = "; ".join(
            f"{when} {', '.join(f'{x:.2f}' for x in value)}"
            for when, value in report.load.items()
            if value is not None
        )
        console.print(f"  load average (1, 5, 15 min): {loads}", markup=False, highlight=False)
    if "event_loop" in report.details:
        loop = report.details["event_loop"]
        console.print(f"  event loop: {loop} ($STEPLINE_EVENT_LOOP)", markup=False, highlight=False)
    for letter, floor in floors.items():
        console.print(f"  [{letter}] {floor.name}", markup=False, highlight=False)
    for note in report.notes:
        console.print(f"  {note}", markup=False, highlight=False)


def _floor_letter(floors: dict[str, Floor], floor: Floor) -> str:
    for letter, known in floors.items():
        if known == floor:
            return letter
    letter = chr(ord("a") + len(floors))
    floors[letter] = floor
    return letter


def write_report(report: Report, directory: Path = RESULTS_DIR) -> Path:
    """Write the report as JSON (``<benchmark>[-<store>]-<UTC time>.json``); return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    store = report.details.get("store")
    name = f"{report.benchmark}-{store}" if store else report.benchmark
    path = directory / f"{name}-{stamp}.json"
    data = {
        "benchmark": report.benchmark,
        "title": report.title,
        "measured_at": stamp,
        "environment": environment(),
        "figures": [{**asdict(f), "runs": list(f.runs), "ratio": f.ratio} for f in report.figures],
        "details": report.details,
        "notes": report.notes,
        "load_average": report.load,
    }
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return path


def report_all(reports: Sequence[Report], *, write_json: bool = True) -> None:
    """Print every report and, unless told not to, write each as JSON."""
    for report in reports:
        print_report(report)
        if write_json:
            print(f"  written to {write_report(report)}")
