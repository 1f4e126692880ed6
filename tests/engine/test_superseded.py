"""A worker that claims again an instance it still holds stops the old activation first; it
warns of an abandoned activation only when one was (its code still running), not when only the
reply to its final write was lost (``worker._worker._stop_superseded``)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from stepline.store.base import NewInstance
from stepline.worker._slots import Slot
from stepline.worker._worker import _stop_superseded

from ..conftest import EngineFactory


@pytest.mark.parametrize("ending", [False, True])
async def test_a_superseded_activation_is_reported_as_abandoned_only_if_it_was(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture, ending: bool
) -> None:
    async with make_engine([]) as engine:
        store = engine.store
        await store.create_instances(
            "wf", [NewInstance("a", None)], trigger="api", skip_existing=False
        )
        (claim,) = (await store.claim("me", ["wf"], 1, 30.0, store.now())).claims
        old = Slot(claim)
        old.ending = ending
        old.task = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        with caplog.at_level(logging.INFO, logger="stepline.worker"):
            await _stop_superseded(old)
        assert old.task.cancelled()
        levels = [(r.levelname, r.getMessage()) for r in caplog.records if "wf/a" in r.getMessage()]
        if ending:
            assert levels == [
                (
                    "INFO",
                    "instance wf/a claimed again: its last write landed though its reply was lost",
                )
            ]
        else:
            assert [level for level, _ in levels] == ["WARNING"]
            assert "abandoned" in levels[0][1]
