"""docs/testing.md, "The pytest plugin": the fixtures, the marker, the sync twin."""

from __future__ import annotations

import pytest
from shopflows import checkout

from stepline.testing import WorkflowTestEnv, WorkflowTestEnvSync


async def test_with_the_fixture(stepline_env: WorkflowTestEnv) -> None:
    inst = await stepline_env.create(checkout, params={"id": "o1", "amount": 42})
    inst.mock_event_timeout("approval")
    assert (await inst.output())["status"] == "expired"


@pytest.mark.stepline(workflows=[checkout], store="memory", start=0)
@pytest.mark.asyncio
async def test_with_the_marker(stepline_env: WorkflowTestEnv) -> None:
    inst = await stepline_env.create("checkout", params={"id": "o1", "amount": 42})
    await inst.wait()
    assert stepline_env.now() == 7 * 24 * 3600  # the approval's timeout, from the epoch


def test_without_async(stepline_env_sync: WorkflowTestEnvSync) -> None:
    inst = stepline_env_sync.create(checkout, params={"id": "o1", "amount": 42})
    inst.send_event("approval", {"by": "ada"})
    stepline_env_sync.advance("3 days")
    assert inst.output()["approved_by"] == "ada"
