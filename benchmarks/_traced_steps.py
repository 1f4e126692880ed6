"""Where a traced step's CPU goes, counted deterministically in one process:
``python -m benchmarks._traced_steps MODE N [--opcodes] [--profile FILE]``.

Runs ``N`` :class:`~benchmarks._workflows.Trivial` instances of 10 steps on a fresh SQLite file
with an in-process worker (after 50 to warm up), telemetry ``off``, ``traces`` (every span
sampled) or ``traces_10`` (10% of the traces), on :mod:`benchmarks._spans`'s SDK set-up, and
prints the CPU per step; or (``span_bare``, ``span_step``) makes ``N`` spans on that set-up
alone (:func:`benchmarks._spans.spans`, after 1,000), no engine. ``--opcodes``: Python
bytecodes per step (or span) by where they run (stepline's telemetry, the engine,
OpenTelemetry's modules), counted with ``sys.settrace``; ``--profile``: a cProfile of the run.
Under ``valgrind --tool=callgrind``, the instructions of ``N`` minus those of ``N / 2`` are
those of ``N / 2`` instances (or spans), start-up excluded."""

from __future__ import annotations

import argparse
import cProfile
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from stepline import Engine, _loop
from stepline.telemetry import Telemetry

from ._spans import sdk_provider, spans
from ._workflows import Trivial

STEPS = 10
Tracer = Callable[[FrameType, str, Any], Any]


def where(filename: str) -> str:
    """The part of the code a bytecode of ``filename`` belongs to."""
    if "/stepline/telemetry/" in filename:
        return "stepline telemetry"
    if "/stepline/" in filename:
        return "stepline engine"
    if "/opentelemetry/" in filename:
        return "opentelemetry " + filename.split("/opentelemetry/")[1]
    return "other (asyncio, abc, typing, ...)"


class Opcodes:
    """Bytecodes executed while on, by :func:`where` they run (this thread only)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.on = False
        self._where: dict[str, str] = {}

    def _local(self, frame: FrameType, event: str, arg: Any) -> Tracer:
        if event == "opcode":
            name = frame.f_code.co_filename
            found = self._where.get(name) or self._where.setdefault(name, where(name))
            self.counts[found] += 1
        return self._local

    def _global(self, frame: FrameType, event: str, arg: Any) -> Tracer | None:
        if not self.on:
            return None
        frame.f_trace_opcodes = True
        return self._local

    def install(self) -> None:
        sys.settrace(self._global)


async def _run(mode: str, instances: int, opcodes: Opcodes | None, profile: str | None) -> float:
    traces = mode != "off"
    provider = sdk_provider(0.1 if mode == "traces_10" else 1.0) if traces else None
    telemetry = Telemetry(traces=traces, tracer_provider=provider)
    url = f"sqlite:///{tempfile.mkdtemp()}/steps.db"
    params = [{"params": {"steps": STEPS}}]
    async with Engine(url, [Trivial], worker=False, telemetry=telemetry) as engine:
        workflow = engine.workflow(Trivial.name)
        for count, measured in ((50, False), (instances, True)):
            await workflow.create_batch(params * count)
            profiler = cProfile.Profile() if measured and profile is not None else None
            if opcodes is not None:
                opcodes.on = measured
            started = time.process_time()
            if profiler is not None:
                profiler.enable()
            while await engine.worker.run_once():
                pass
            if profiler is not None and profile is not None:
                profiler.disable()
                profiler.dump_stats(profile)
            cpu = time.process_time() - started
            if opcodes is not None:
                opcodes.on = False
    if provider is not None:
        provider.shutdown()
    return cpu / (instances * STEPS) * 1e6


def _spans(kind: str, n: int, opcodes: Opcodes | None) -> float:
    provider = sdk_provider()
    spans(provider, kind, 1_000)
    if opcodes is not None:
        opcodes.on = True
    cpu = spans(provider, kind, n)
    if opcodes is not None:
        opcodes.on = False
    provider.shutdown()
    return cpu / n * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="where a traced step's CPU goes, in one process")
    p.add_argument("mode", choices=("off", "traces", "traces_10", "span_bare", "span_step"))
    p.add_argument("n", type=int, help="instances (spans for span_*)")
    p.add_argument("--opcodes", action="store_true", help="count bytecodes by module")
    p.add_argument("--profile", default=None, help="write a cProfile of the run here")
    args = p.parse_args(argv)
    opcodes = Opcodes() if args.opcodes else None
    if opcodes is not None:
        opcodes.install()
    if args.mode.startswith("span_"):
        cpu, what, count = _spans(args.mode[5:], args.n, opcodes), "span", args.n
    else:
        cpu = _loop.run(_run(args.mode, args.n, opcodes, args.profile))
        what, count = "step", args.n * STEPS
    print(f"{args.mode}: {cpu:.1f} µs of CPU per {what} ({count:,} {what}s)")
    if opcodes is not None:
        print(f"  {sum(opcodes.counts.values()) / count:,.0f} bytecodes per {what}")
        for name, found in opcodes.counts.most_common():
            print(f"  {found / count:8.1f}  {name}")


if __name__ == "__main__":
    main()
