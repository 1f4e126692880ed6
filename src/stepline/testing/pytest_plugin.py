"""The pytest plugin (entry point ``pytest11``): fixtures ``stepline_env`` (async, needs
pytest-asyncio) and ``stepline_env_sync``, each a fresh :class:`WorkflowTestEnv` closed after
its test, configured by the marker ``@pytest.mark.stepline(store=..., workflows=[...],
start=..., ...)`` (its keyword arguments are the environment's)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from ._env import WorkflowTestEnv
from ._sync import WorkflowTestEnvSync

try:
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # the sync fixture still works; the async one says what is missing
    async_fixture = None  # type: ignore[assignment]

_PASSED = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "stepline(store='sqlite', workflows=(), start=None, ...): the WorkflowTestEnv of the "
        "stepline_env and stepline_env_sync fixtures (store: sqlite, memory, postgres or a URL)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    """An async test that takes ``stepline_env`` runs on pytest-asyncio without its marker or
    any configuration (pytest-asyncio reads the marker once the item is made)."""
    if (
        async_fixture is not None
        and inspect.iscoroutinefunction(obj)
        and "stepline_env" in inspect.signature(obj).parameters
        and not any(mark.name == "asyncio" for mark in getattr(obj, "pytestmark", []))
    ):
        pytest.mark.asyncio(obj)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_PASSED] = report.passed
    return report


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker("stepline")
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError("@pytest.mark.stepline takes keyword arguments only")
    return dict(marker.kwargs)


def _passed(request: pytest.FixtureRequest) -> bool:
    """Whether the test passed: only then are unused mocks and unawaited calls reported (a
    failure already says what went wrong)."""
    return bool(request.node.stash.get(_PASSED, False))


@pytest.fixture
def stepline_env_sync(request: pytest.FixtureRequest) -> Iterator[WorkflowTestEnvSync]:
    """A :class:`~stepline.testing.WorkflowTestEnvSync`, closed after the test."""
    env = WorkflowTestEnvSync(**_options(request))
    try:
        yield env
    finally:
        env.close(check=_passed(request))


async def _async_env(request: pytest.FixtureRequest) -> AsyncIterator[WorkflowTestEnv]:
    env = WorkflowTestEnv(**_options(request))
    try:
        yield env
    finally:
        await env.close(check=_passed(request))


def _missing(request: pytest.FixtureRequest) -> Iterator[WorkflowTestEnv]:
    raise pytest.UsageError(
        "the stepline_env fixture is async and needs pytest-asyncio: pip install pytest-asyncio "
        "(or use stepline_env_sync in a test that is not async)"
    )
    yield  # pragma: no cover - a generator fixture, for pytest


_fixture: Callable[..., Any]
if async_fixture is not None:
    _fixture = async_fixture(_async_env, name="stepline_env")
else:
    _fixture = pytest.fixture(_missing, name="stepline_env")
stepline_env = _fixture
"""A :class:`~stepline.testing.WorkflowTestEnv`, closed after the test."""
