"""The event loop stepline's own entry points run on (:mod:`stepline._loop`)."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest

from stepline import ConfigError, _loop
from stepline.sync import _Portal

from ..conftest import uvloop

needs_uvloop = pytest.mark.skipif(uvloop is None, reason="uvloop is not installed here")


@needs_uvloop
def test_auto_picks_uvloop_when_it_is_installed() -> None:
    assert _loop.loop_name({}) == "uvloop"
    assert _loop.loop_name({"STEPLINE_EVENT_LOOP": "auto"}) == "uvloop"
    assert _loop.loop_name({"STEPLINE_EVENT_LOOP": " UVLoop "}) == "uvloop"
    assert _loop.loop_factory({}) is uvloop.new_event_loop


def test_asyncio_can_be_chosen() -> None:
    assert _loop.loop_name({"STEPLINE_EVENT_LOOP": "asyncio"}) == "asyncio"
    assert _loop.loop_factory({"STEPLINE_EVENT_LOOP": "asyncio"}) is asyncio.new_event_loop


def test_without_uvloop_auto_falls_back_and_uvloop_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert _loop.loop_name({}) == "asyncio"
    with pytest.raises(ConfigError, match=r"uvloop is not installed \(pip install uvloop\)"):
        _loop.loop_name({"STEPLINE_EVENT_LOOP": "uvloop"})


def test_an_unknown_loop_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="STEPLINE_EVENT_LOOP='trio' is not one of auto, uvloop"):
        _loop.loop_name({"STEPLINE_EVENT_LOOP": "trio"})


async def _running() -> str:
    await asyncio.sleep(0)
    return _loop.running_loop_name()


@pytest.mark.parametrize("choice", ["asyncio", pytest.param("uvloop", marks=needs_uvloop)])
def test_run_and_the_sync_portal_use_the_chosen_loop(
    monkeypatch: pytest.MonkeyPatch, choice: str
) -> None:
    monkeypatch.setenv("STEPLINE_EVENT_LOOP", choice)
    assert _loop.run(_running()) == choice
    portal = _Portal()
    try:
        assert portal.call(_running()) == choice
    finally:
        portal.close()


def test_run_with_a_bad_setting_closes_the_coroutine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPLINE_EVENT_LOOP", "nope")
    coro = _running()
    with pytest.raises(ConfigError):
        _loop.run(coro)
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
