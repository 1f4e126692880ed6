"""``python -m benchmarks [NAME ...] [--runs N] [--stores sqlite,postgres] [--quick]``.

Runs the named benchmarks (default: all), prints a table per benchmark and store, and writes JSON
to ``benchmarks/results/``. Benchmarks print; they never assert.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from . import BENCHMARKS
from ._config import config_from, parser
from ._report import report_all


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__ or "stepline benchmarks")
    p.add_argument(
        "names", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(BENCHMARKS)}"
    )
    args = p.parse_args(argv)
    config = config_from(args)
    names = args.names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark {unknown[0]!r}: choose from {', '.join(BENCHMARKS)}")
    for name in names:
        report_all(asyncio.run(BENCHMARKS[name](config)), write_json=config.write_json)


if __name__ == "__main__":
    main()
