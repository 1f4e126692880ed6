"""``python -m benchmarks [NAME ...] [--runs N] [--heavy-runs N] [--stores sqlite,postgres]
[--quick | --full]``.

Runs the named benchmarks (default: all), prints a table per benchmark and store, and writes JSON
to ``benchmarks/results/``. Benchmarks print; they never assert.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from . import (
    beside_dbos,
    bulk,
    bytecodes,
    create,
    filter,
    fleet,
    handoff,
    held,
    history,
    latency,
    loops,
    messages,
    payloads,
    recovery,
    replay_check,
    sequential,
    spread,
    telemetry,
    throughput,
    triggers,
    values,
    virtual_time,
)
from ._config import config_from, parser
from ._run import Benchmark, execute

BENCHMARKS: dict[str, Benchmark] = {
    sequential.NAME: sequential.run,
    throughput.NAME: throughput.run,
    telemetry.NAME: telemetry.run,
    spread.NAME: spread.run,
    held.NAME: held.run,
    create.NAME: create.run,
    fleet.NAME: fleet.run,
    history.NAME: history.run,
    recovery.NAME: recovery.run,
    latency.NAME: latency.run,
    messages.NAME: messages.run,
    payloads.NAME: payloads.run,
    values.NAME: values.run,
    loops.NAME: loops.run,
    triggers.NAME: triggers.run,
    virtual_time.NAME: virtual_time.run,
    beside_dbos.NAME: beside_dbos.run,
    handoff.NAME: handoff.run,
    replay_check.NAME: replay_check.run,
    filter.NAME: filter.run,
    bulk.NAME: bulk.run,
    bytecodes.NAME: bytecodes.run,
}
"""Every benchmark, in the order ``python -m benchmarks`` runs them."""


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__ or "stepline benchmarks")
    p.add_argument(
        "names", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(BENCHMARKS)}"
    )
    args = p.parse_args(argv)
    names = args.names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark {unknown[0]!r}: choose from {', '.join(BENCHMARKS)}")
    config = config_from(args)
    start = time.monotonic()
    for name in names:
        execute(BENCHMARKS[name], config)
    print(
        f"{len(names)} benchmark(s) on {', '.join(config.stores)} in "
        f"{time.monotonic() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
