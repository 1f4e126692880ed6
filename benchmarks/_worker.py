"""A benchmark worker process: ``python -m benchmarks._worker --url URL [options]``.

Opens an engine with every benchmark workflow (:mod:`benchmarks._workflows`, or those named by
``--workflows``), prints
``ready <pid>`` on stdout once the store is open and, with ``--gate``, waits for a line on stdin
before it starts claiming (so that several workers start at the same moment). Runs until SIGTERM
(graceful) or SIGKILL. Started by :class:`benchmarks._procs.WorkerProcess`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from stepline import Engine, _loop
from stepline.telemetry import Telemetry

from ._spans import sdk_provider
from ._workflows import WORKFLOWS

TELEMETRY = ("off", "metrics", "traces", "traces_10", "both")


async def _serve(args: argparse.Namespace) -> None:
    chosen = set(args.workflows.split(",")) if args.workflows else None
    workflows = [w for w in WORKFLOWS if chosen is None or w.name in chosen]
    engine = Engine(
        args.url,
        workflows,
        worker=False,
        concurrency=args.concurrency,
        lease=args.lease,
        poll_interval=args.poll,
        worker_id=args.worker_id,
        telemetry=telemetry(args.telemetry),
    )
    try:
        await engine.open()
        print(f"ready {os.getpid()}", flush=True)
        if args.gate:
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await engine.run_worker()
    finally:
        await engine.close()


def telemetry(mode: str) -> Telemetry:
    """Off; Prometheus metrics (recorded, not scraped); traces sampled at 100% (or 10% of the
    traces: ``traces_10``) on the SDK with a batch processor whose exporter drops the spans
    (:mod:`benchmarks._spans`); or metrics and traces at 100%."""
    traces = mode in ("traces", "traces_10", "both")
    return Telemetry(
        traces=traces,
        metrics=mode in ("metrics", "both"),
        tracer_provider=sdk_provider(0.1 if mode == "traces_10" else 1.0) if traces else None,
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="a stepline worker for the benchmarks")
    p.add_argument("--url", required=True, help="database URL")
    p.add_argument("--concurrency", type=int, default=100, help="activations at once")
    p.add_argument("--lease", type=float, default=30.0, help="lease, seconds")
    p.add_argument("--poll", type=float, default=0.5, help="longest idle poll interval, seconds")
    p.add_argument("--worker-id", default=None, help="worker id (default: host:pid:random)")
    p.add_argument("--gate", action="store_true", help="wait for a line on stdin before claiming")
    p.add_argument("--telemetry", choices=TELEMETRY, default="off", help="what it reports")
    p.add_argument("--workflows", default="", help="the workflows it runs (names, comma between)")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
    )
    _loop.run(_serve(args))  # the loop `stepline worker` runs on


if __name__ == "__main__":
    main()
