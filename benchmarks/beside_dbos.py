"""Stepline beside DBOS 3.4.0: sequential workflows of trivial sync steps on SQLite.

200 workflows of 10 trivial sync steps, each created and awaited before the next, on a fresh
SQLite file per side, both sides in one run taking turns (``--runs`` times):

- stepline (``benchmarks._stepline_side``, a subprocess on asyncio's loop): the workflows of
  ``benchmarks.sequential`` with sync callbacks in a step thread, sync callbacks inline
  (``{"inline": True}``) and async callbacks, taking turns;
- DBOS 3.4.0 (``benchmarks/_dbos_side.py``, a subprocess with the Python of a venv of its own): a
  sync workflow of sync steps (DBOS runs them inline in the workflow's thread), started with
  ``DBOS.start_workflow`` and awaited with ``get_result``.

DBOS is installed from the package registry into ``$STEPLINE_BENCH_DBOS_VENV`` (default
``/tmp/dbos-venv``) the first time; when it cannot be, the report says why and leaves its rows
out. Figures: wall time per step end to end and process CPU per step; DBOS / stepline is how many
times faster stepline is.

Run: ``python -m benchmarks beside-dbos`` (or ``python -m benchmarks.beside_dbos``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._config import BenchConfig, parse, work_directory
from ._floors import step_floor
from ._report import Figure, Floor, Report, median
from ._run import execute

NAME = "beside-dbos"
DBOS_VERSION = "3.4.0"
VENV = Path(os.environ.get("STEPLINE_BENCH_DBOS_VENV", "/tmp/dbos-venv"))
DBOS_SIDE = Path(__file__).resolve().parent / "_dbos_side.py"
ROOT = Path(__file__).resolve().parent.parent
KINDS = {
    "thread": "sync callbacks in a thread",
    "inline": "sync callbacks inline",
    "async": "async callbacks",
}


def _installed(python: Path) -> bool:
    """Whether ``python`` has DBOS at the version compared."""
    if not python.exists():
        return False
    check = "import importlib.metadata as m; print(m.version('dbos'))"
    found = subprocess.run([python, "-c", check], capture_output=True, text=True, check=False)
    return found.returncode == 0 and found.stdout.strip() == DBOS_VERSION


def dbos_python(venv: Path = VENV) -> tuple[Path | None, str]:
    """The Python of a venv with DBOS installed (installing it if need be), or None and why
    not."""
    python = venv / "bin" / "python"
    if _installed(python):
        return python, ""
    print(f"installing dbos=={DBOS_VERSION} into {venv} ...", file=sys.stderr, flush=True)
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", f"dbos=={DBOS_VERSION}"],
    ]
    for command in steps:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{' '.join(command[:4])} failed: {exc}"
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            return None, f"{' '.join(command[:4])} failed: {lines[-1] if lines else done}"
    if not _installed(python):
        return None, f"dbos=={DBOS_VERSION} is not importable in {venv} after pip install"
    return python, ""


def _side(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one side's subprocess; its JSON line."""
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def run(config: BenchConfig) -> list[Report]:
    """One report, on SQLite (whatever ``config.stores`` says)."""
    workflows = 40 if config.quick else 200
    steps = 10
    python, problem = await asyncio.to_thread(dbos_python)
    env = {**os.environ, "STEPLINE_EVENT_LOOP": "asyncio"}
    series: dict[str, list[float]] = defaultdict(list)
    per_step = 1e6 / (workflows * steps)
    with work_directory(config) as directory:
        for repetition in range(config.runs):
            floor = await asyncio.to_thread(step_floor, "sqlite", directory, config.pg_url)
            series["floor"].append(floor.value)
            url = f"sqlite:///{directory / f'stepline-{repetition}.db'}"
            command = [sys.executable, "-m", "benchmarks._stepline_side", url]
            ours = await asyncio.to_thread(_side, [*command, str(workflows), str(steps)], env)
            for kind in KINDS:
                series[f"{kind}_e2e"].append(ours[kind]["total"] * per_step)
                series[f"{kind}_cpu"].append(ours[kind]["cpu"] * per_step)
            if python is None:
                continue
            db = directory / f"dbos-{repetition}.db"
            command = [str(python), str(DBOS_SIDE), str(db), str(workflows), str(steps)]
            theirs = await asyncio.to_thread(_side, command, dict(os.environ))
            series["dbos_e2e"].append(theirs["total"] * per_step)
            series["dbos_cpu"].append(theirs["cpu"] * per_step)
            for kind in KINDS:
                series[f"{kind}_speedup"].append(theirs["total"] / ours[kind]["total"])
    return [_report(config, series, workflows, steps, problem)]


def _report(
    config: BenchConfig,
    series: dict[str, list[float]],
    workflows: int,
    steps: int,
    problem: str,
) -> Report:
    name = "one single-row INSERT + COMMIT, SQLite WAL, synchronous=NORMAL, same disk"
    floor = Floor(name, median(series["floor"]), "µs", tuple(series["floor"]))

    def fig(label: str, key: str, unit: str = "µs", against: Floor | None = None) -> Figure:
        return Figure(label, median(series[key]), unit, against, tuple(series[key]))

    shape = f"{workflows} x {steps}"
    report = Report(
        NAME, f"Sequential workflows beside DBOS {DBOS_VERSION} on sqlite ({shape}, asyncio loop)"
    )
    for kind, label in KINDS.items():
        text = f"stepline per step, {label} (end to end)"
        report.figures.append(fig(text, f"{kind}_e2e", against=floor))
    if series["dbos_e2e"]:
        label = f"DBOS {DBOS_VERSION} per step, sync steps in its workflow's thread (end to end)"
        report.figures.append(fig(label, "dbos_e2e", against=floor))
    for kind, label in KINDS.items():
        text = f"stepline CPU per step, {label}"
        report.figures.append(fig(text, f"{kind}_cpu"))
    if series["dbos_cpu"]:
        report.figures.append(fig(f"DBOS {DBOS_VERSION} CPU per step", "dbos_cpu"))
        for kind, label in KINDS.items():
            text = f"DBOS / stepline per step, {label}"
            report.figures.append(fig(text, f"{kind}_speedup", "x"))
    report.details = {
        "store": "sqlite",
        "workflows": workflows,
        "steps": steps,
        "runs": config.runs,
        "dbos": DBOS_VERSION if not problem else None,
        "event_loop": "asyncio",
    }
    report.notes = [
        "both sides in subprocesses, taking turns in each run; stepline on asyncio's loop, its "
        "three kinds of callback taking turns too",
        "DBOS / stepline: the run's wall time per step of DBOS over stepline's (how many times "
        "faster stepline is), the median over the runs",
    ]
    if problem:
        report.notes.append(f"DBOS {DBOS_VERSION} left out: {problem}")
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
