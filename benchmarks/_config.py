"""Command-line options shared by every benchmark (``python -m benchmarks --help``)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
STORES = ("sqlite", "postgres")


@dataclass(frozen=True)
class BenchConfig:
    """What to run and where."""

    runs: int = 3
    """Repetitions of the light benchmarks; figures are medians."""
    heavy_runs: int = 1
    """Repetitions of the heavy benchmarks (throughput, sleeping fleet, recovery, ...)."""
    stores: tuple[str, ...] = STORES
    pg_url: str = DEFAULT_PG_URL
    directory: Path | None = None
    """Where SQLite files go (default: a temporary directory); floors are measured there too."""
    quick: bool = False
    """Smaller sizes, for a smoke run."""
    full: bool = False
    """The issue's full sizes where the default run uses smaller ones (100,000 sleepers)."""
    write_json: bool = True
    pg_vacuum: float = 0.0
    """Fleet on PostgreSQL: VACUUM the instances table this often (seconds) during the run, a
    stand-in for autovacuum on a server that has it off (0: never)."""

    def repetitions(self, heavy: bool) -> int:
        return self.heavy_runs if heavy else self.runs


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--runs", type=int, default=3, help="repetitions of light benchmarks (default 3)"
    )
    p.add_argument(
        "--heavy-runs",
        type=int,
        default=1,
        help="repetitions of heavy benchmarks: throughput, fleet, history, recovery, latency "
        "(default 1)",
    )
    p.add_argument(
        "--stores",
        default=None,
        help="comma-separated: sqlite, postgres (default: both; postgres is left out with a "
        "warning when its server cannot be reached)",
    )
    p.add_argument(
        "--pg-url",
        default=os.environ.get("STEPLINE_BENCH_DATABASE_URL", DEFAULT_PG_URL),
        help="PostgreSQL server for postgres runs (default: $STEPLINE_BENCH_DATABASE_URL or "
        f"{DEFAULT_PG_URL}); each run uses a fresh schema, dropped afterwards",
    )
    p.add_argument("--dir", type=Path, default=None, help="directory for SQLite files")
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument(
        "--full",
        action="store_true",
        help="the issue's full sizes where the default is smaller (fleet: 100,000 sleepers)",
    )
    p.add_argument("--no-json", action="store_true", help="do not write benchmarks/results/")
    p.add_argument(
        "--pg-vacuum",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="fleet on PostgreSQL: VACUUM the instances table every SECONDS during the run, a "
        "stand-in for autovacuum on a server that has it off (default: never)",
    )
    return p


def _postgres_reachable(url: str) -> str | None:
    """None if a connection to ``url`` works, else why not."""
    try:
        with psycopg.connect(url.split("?")[0], connect_timeout=5):
            return None
    except psycopg.Error as exc:
        return str(exc).strip() or type(exc).__name__


def config_from(args: argparse.Namespace) -> BenchConfig:
    if args.stores is None:
        stores: tuple[str, ...] = STORES
        problem = _postgres_reachable(args.pg_url)
        if problem is not None:
            print(
                f"warning: PostgreSQL at {args.pg_url} cannot be reached ({problem}); running "
                "SQLite only (pass --pg-url, or --stores sqlite to silence this)",
                file=sys.stderr,
            )
            stores = ("sqlite",)
    else:
        stores = tuple(s.strip() for s in args.stores.split(",") if s.strip())
    unknown = [s for s in stores if s not in STORES]
    if unknown:
        raise SystemExit(f"unknown store {unknown[0]!r}: use one of {', '.join(STORES)}")
    if args.runs < 1 or args.heavy_runs < 1:
        raise SystemExit(
            f"--runs and --heavy-runs must be at least 1, got {args.runs}, {args.heavy_runs}"
        )
    if args.pg_vacuum < 0:
        raise SystemExit(
            f"--pg-vacuum must be 0 (never) or a number of seconds, got {args.pg_vacuum}"
        )
    if args.quick and args.full:
        raise SystemExit("--quick and --full contradict each other: pass one")
    return BenchConfig(
        runs=args.runs,
        heavy_runs=args.heavy_runs,
        stores=stores,
        pg_url=args.pg_url,
        directory=args.dir,
        quick=args.quick,
        full=args.full,
        write_json=not args.no_json,
        pg_vacuum=args.pg_vacuum,
    )


@contextmanager
def work_directory(config: BenchConfig) -> Iterator[Path]:
    """A fresh directory for the run's SQLite files, removed afterwards."""
    if config.directory is not None:
        config.directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stepline-bench-", dir=config.directory) as path:
        yield Path(path)


@contextmanager
def database(config: BenchConfig, store: str, directory: Path) -> Iterator[str]:
    """A fresh, empty database URL for ``store``: a new SQLite file or PostgreSQL schema."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    if store == "sqlite":
        path = directory / f"{name}.db"
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    sep = "&" if "?" in config.pg_url else "?"
    try:
        yield f"{config.pg_url}{sep}schema={name}"
    finally:
        with psycopg.connect(config.pg_url.split("?")[0], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def parse(description: str, argv: Sequence[str] | None = None) -> BenchConfig:
    return config_from(parser(description).parse_args(argv))
