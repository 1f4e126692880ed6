"""The pytest plugin in this suite (its entry point is installed with stepline): the fixtures,
the marker's options, the sync twin."""

from __future__ import annotations

import pytest

from stepline.testing import WorkflowTestEnv, WorkflowTestEnvSync

from ._flows import approve, naps

pytestmark = pytest.mark.both_loops


async def test_the_async_fixture_starts_fresh_at_the_default_time(
    stepline_env: WorkflowTestEnv,
) -> None:
    assert stepline_env.now() == 1_767_225_600.0
    inst = await stepline_env.create(naps)
    assert await inst.output() == "rested"
    assert stepline_env.url.startswith("sqlite:///")


@pytest.mark.stepline(store="postgres", workflows=[approve], start=1000)
@pytest.mark.postgres
async def test_the_marker_picks_postgres(stepline_env: WorkflowTestEnv) -> None:
    assert "schema=stepline_test_" in stepline_env.url
    inst = await stepline_env.create("approve")
    await inst.send_event("answer", "yes")
    assert await inst.output() == "yes"
    assert stepline_env.now() == 1000


@pytest.mark.stepline(store="memory")
def test_the_sync_fixture(stepline_env_sync: WorkflowTestEnvSync) -> None:
    inst = stepline_env_sync.create(naps)
    assert inst.step_result("start") == "started"
    assert stepline_env_sync.advance("2 days") == 2  # the end of each sleep
    assert inst.status().output == "rested"
    assert inst.steps_run() == ["start", "first", "second", "end"]
    stepline_env_sync.replay(inst)


def test_the_sync_twin_on_both_stores(store_url: str) -> None:
    with WorkflowTestEnvSync([approve], store=store_url) as env:
        inst = env.create(approve, params="1 day")
        assert inst.wait_for_status("waiting").status == "waiting"
        env.send_event(inst, "answer", 42)
        assert inst.output() == 42
