"""When the environment's engine opens: on entering ``async with`` / ``with`` (so ``env.engine``
is usable there at once), else at the first call that needs it (the pytest fixtures)."""

from __future__ import annotations

import pytest

from stepline import WorkflowEvent, WorkflowStep, workflow
from stepline.testing import MockError, WorkflowTestEnv, WorkflowTestEnvSync

from ._flows import approve, naps, parent

pytestmark = pytest.mark.both_loops


@workflow(name="naps-too")
async def naps_too(event: WorkflowEvent, step: WorkflowStep) -> str:
    await step.sleep("nap", "1 hour")
    return "rested too"


async def test_the_engine_is_open_inside_async_with(store_url: str) -> None:
    async with WorkflowTestEnv([naps], store=store_url) as env:
        await env.engine.workflow("naps").create("direct")
        inst = await env.get(naps, "direct")
        assert await inst.output() == "rested"
        listed = await env.engine.list_instances("naps")
        assert [r.id for r in listed.instances] == ["direct"]


async def test_workflows_are_added_before_entering() -> None:
    env = WorkflowTestEnv([parent])
    env.register(naps)
    env.stub_workflow("helper", "stubbed")  # not registered: the stub is
    async with env:
        assert await (await env.create(parent)).output() == "stubbed"
        assert await (await env.create(naps)).output() == "rested"
        with pytest.raises(MockError, match=r"register workflows before entering"):
            env.register(approve)
        # Creating an instance of a workflow not registered yet registers it, even now.
        late = await env.create(naps_too)
        assert await late.output() == "rested too"


async def test_without_async_with_the_first_call_opens_it() -> None:
    env = WorkflowTestEnv()
    try:
        inst = await env.create(naps)  # registers naps: nothing is open yet
        assert await inst.output() == "rested"
        assert env.engine.store.schema_versions is not None
    finally:
        await env.close()


def test_the_sync_twin_opens_on_entry(store_url: str) -> None:
    with WorkflowTestEnvSync([naps], store=store_url) as env:
        assert env.env.engine.store.schema_versions is not None  # opened
        with pytest.raises(MockError, match=r"register workflows before entering"):
            env.register(approve)
        assert env.create(naps).output() == "rested"
