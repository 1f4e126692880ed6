"""Render benchmark results (the JSON in ``benchmarks/results/``) as Markdown tables.

``python -m benchmarks._markdown [FILE ...]``: the given result files, or by default the newest
file of each benchmark and store, as one table each (figure, value, floor, ratio) with the load
average, for ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from ._report import RESULTS_DIR


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def table(data: dict[str, Any]) -> str:
    """One result file as a Markdown table with its title and load averages."""
    lines = [
        f"**{data['title']}**",
        "",
        "| figure | value | floor | ratio |",
        "|---|---:|---:|---:|",
    ]
    floors: dict[str, str] = {}
    for fig in data["figures"]:
        floor = fig.get("floor")
        floor_text = ""
        if floor:
            letter = floors.setdefault(floor["name"], chr(ord("a") + len(floors)))
            floor_text = f"{_fmt(floor['value'], floor['unit'])} [{letter}]"
        ratio = fig.get("ratio")
        lines.append(
            f"| {fig['name']} | {_fmt(fig['value'], fig['unit'])} | {floor_text} | "
            f"{'' if ratio is None else f'{ratio:.2f}x'} |"
        )
    lines.append("")
    for name, letter in floors.items():
        lines.append(f"[{letter}] {name}. ")
    load = data.get("load_average") or {}
    parts = [
        f"{when} {', '.join(f'{x:.2f}' for x in value)}" for when, value in load.items() if value
    ]
    if parts:
        lines.append(f"Load average (1, 5, 15 min): {'; '.join(parts)}. ")
    loop = (data.get("details") or {}).get("event_loop")
    if loop:
        lines.append(f"Event loop: {loop}. ")
    return "\n".join(lines).rstrip() + "\n"


def newest(directory: Path = RESULTS_DIR) -> list[Path]:
    """The newest result file of each (benchmark, store), oldest benchmark first."""
    latest: dict[tuple[str, str], tuple[str, Path]] = {}
    for path in directory.glob("*.json"):
        data = orjson.loads(path.read_bytes())
        key = (str(data["benchmark"]), str(data.get("details", {}).get("store", "")))
        stamp = f"{data['measured_at']}-{path.name}"
        if key not in latest or stamp > latest[key][0]:
            latest[key] = (stamp, path)
    return [path for _, path in sorted(latest.values())]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("files", nargs="*", type=Path, help="result files (default: newest of each)")
    args = p.parse_args(argv)
    for path in args.files or newest():
        print(table(orjson.loads(path.read_bytes())))


if __name__ == "__main__":
    main()
