"""Shared fixtures. Every contract test runs against each store: SQLite and PostgreSQL.

``STEPLINE_TEST_STORES`` (default ``sqlite,postgres``) selects the stores. PostgreSQL tests use
the server named by ``STEPLINE_TEST_DATABASE_URL`` (default: 127.0.0.1:5432, database ``test``),
each test in a fresh schema.

Async tests run on asyncio's loop; modules marked ``both_loops`` run on uvloop's too, the loop
stepline's CLI runs on where uvloop is installed (:mod:`stepline._loop`).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from stepline import Engine, ManualClock
from stepline.testing import WorkflowTestEnv

from ._pg import drop_schema, pg_admin_url

try:
    import uvloop
except ImportError:  # not on this platform: the both_loops modules run on asyncio alone
    uvloop = None

STORES = [s.strip() for s in os.environ.get("STEPLINE_TEST_STORES", "sqlite,postgres").split(",")]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "fault injection (tests/chaos)")
    group.addoption(
        "--chaos-rounds",
        type=int,
        default=1,
        help="how many times each chaos scenario runs, each with its own seed (default 1)",
    )
    group.addoption(
        "--chaos-seed",
        type=int,
        default=None,
        help="the seed of the first round (default: random); a failing run prints the seed to "
        "replay it",
    )


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop
    }
    if uvloop is not None and item.get_closest_marker("both_loops") is not None:
        factories["uvloop"] = uvloop.new_event_loop
    return factories


@pytest.fixture(
    params=[
        pytest.param(s, marks=[pytest.mark.postgres] if s == "postgres" else [])
        for s in STORES
        if s
    ]
)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Any) -> Iterator[str]:
    """A fresh, empty database URL for the store under test."""
    if store_kind == "sqlite":
        yield f"sqlite:///{tmp_path}/stepline.db"
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    base = pg_admin_url()
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}schema={schema}"
    drop_schema(base, schema)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


EngineFactory = Callable[..., Any]


@pytest.fixture
def make_engine(store_url: str) -> EngineFactory:
    """``async with make_engine([Wf], worker=False, clock=clock) as engine:``."""

    @asynccontextmanager
    async def factory(workflows: Any = (), **options: Any) -> AsyncIterator[Engine]:
        options.setdefault("worker", False)
        engine = Engine(store_url, workflows, **options)
        async with engine:
            yield engine

    return factory


TestEnvFactory = Callable[..., WorkflowTestEnv]


@pytest.fixture
def make_test_env(store_url: str, clock: ManualClock) -> TestEnvFactory:
    """``async with make_test_env([Wf]) as env:``: the testing toolkit's environment
    (:mod:`stepline.testing`) on the store under test, on the test's clock."""

    def factory(workflows: Any = (), **options: Any) -> WorkflowTestEnv:
        return WorkflowTestEnv(workflows, store=store_url, clock=clock, **options)

    return factory


async def drain(engine: Engine, rounds: int = 50) -> int:
    """Run the engine's worker until nothing is runnable at the clock's current time."""
    total = 0
    for _ in range(rounds):
        ran = await engine.worker.run_once()
        total += ran
        if ran == 0:
            return total
    raise AssertionError("instances still runnable after many rounds: a livelock?")


REQUIRED = (
    ("STEPLINE_REQUIRE_POSTGRES", "postgres", "PostgreSQL"),
    ("STEPLINE_REQUIRE_BROKERS", "broker", "broker"),
)
"""What CI requires to have run: (environment variable set to 1, marker, what the tests need)."""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With STEPLINE_REQUIRE_POSTGRES=1 or STEPLINE_REQUIRE_BROKERS=1 (CI), fail the run if
    the PostgreSQL or broker tests were skipped, or none ran."""
    required = [entry for entry in REQUIRED if os.environ.get(entry[0]) == "1"]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not required or reporter is None:
        return
    for variable, marker, what in required:
        ran = skipped = 0
        for outcome in ("passed", "failed", "error", "skipped"):
            for report in reporter.stats.get(outcome, []):
                if marker in getattr(report, "keywords", {}):
                    if outcome == "skipped":
                        skipped += 1
                    else:
                        ran += 1
        if skipped or not ran:
            reporter.write_line(
                f"{variable}: {ran} {what} tests ran, {skipped} were skipped; every {what} test "
                "must run",
                red=True,
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
