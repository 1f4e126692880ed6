"""``step.patched``: decided once per instance and recorded; old instances follow their history,
new ones record a marker and take the new path; removing a patch call while instances recorded
it is a divergence; ``deprecate_patch`` keeps them replaying. On both stores."""

from __future__ import annotations

from typing import Any

import pytest

from stepline import Dag, WorkflowEvent, WorkflowStep, workflow
from stepline.testing import ReplayError

from ..conftest import TestEnvFactory

CALLS: list[str] = []
CODE = {"v": "old"}


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    CODE["v"] = "old"


def call(name: str) -> str:
    CALLS.append(name)
    return name


@workflow(name="reminder")
async def reminder(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """old: email, sleep, done. patched: an sms under a patch before the sleep (``where`` =
    before) or after it. deprecated: the sms always, the patch deprecated. removed: the sms
    always, the patch call gone."""
    where = event.payload.get("where", "before")
    code = CODE["v"]
    path = ["email"]
    await step.do("email", lambda: call("email"))

    async def sms() -> None:
        if code == "patched" and step.patched("sms-reminder"):
            path.append("sms")
            await step.do("sms", lambda: call("sms"))
        elif code == "deprecated":
            step.deprecate_patch("sms-reminder")
            path.append("sms")
            await step.do("sms", lambda: call("sms"))

    if where == "before":
        await sms()
    await step.sleep("wait", 10)
    if where == "after":
        await sms()
    await step.do("done", lambda: call("done"))
    return path


async def test_an_old_instance_past_the_patch_point_follows_its_history(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env([reminder]) as env:
        inst = await env.create("reminder", params={"where": "before"})
        await env.run_until_idle()
        CODE["v"] = "patched"
        await env.advance(11)
        status = await inst.status()
        assert status.status == "complete", status
        assert status.output == ["email"]
        assert "sms" not in CALLS
        assert [s.kind for s in await inst.steps()] == ["do", "sleep", "do"]


async def test_a_new_instance_records_the_marker_and_replays_it(
    make_test_env: TestEnvFactory,
) -> None:
    CODE["v"] = "patched"
    async with make_test_env([reminder]) as env:
        inst = await env.create("reminder", params={"where": "before"})
        await env.run_until_idle()
        steps = await inst.steps()
        assert [(s.name, s.kind) for s in steps] == [
            ("email", "do"), ("patch:sms-reminder", "patch"), ("sms", "do"), ("wait", "sleep")
        ]  # fmt: skip
        await env.advance(11)  # the replay answers from the marker: the sms is not re-decided
        status = await inst.status()
        assert status.status == "complete", status
        assert status.output == ["email", "sms"]
        assert CALLS.count("sms") == 1


async def test_an_old_instance_reaching_the_patch_on_new_ground_takes_it(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env([reminder]) as env:
        inst = await env.create("reminder", params={"where": "after"})
        await env.run_until_idle()
        CODE["v"] = "patched"
        await env.advance(11)
        status = await inst.status()
        assert status.status == "complete", status
        assert status.output == ["email", "sms"]
        assert "patch:sms-reminder" in [s.name for s in await inst.steps()]


async def test_removing_a_recorded_patch_call_is_a_divergence(
    make_test_env: TestEnvFactory,
) -> None:
    CODE["v"] = "patched"
    async with make_test_env([reminder]) as env:
        inst = await env.create("reminder", params={"where": "before"})
        await env.run_until_idle()
        CODE["v"] = "old"  # the patch call (and its branch) removed
        await env.advance(11)
        status = await inst.status()
        assert status.status == "errored", status
        assert status.error["name"] == "NonDeterminismError"
        assert "'patch:sms-reminder-1'" in status.error["message"]


async def test_deprecate_patch_replays_both_kinds_of_instance(
    make_test_env: TestEnvFactory,
) -> None:
    async with make_test_env([reminder]) as env:
        CODE["v"] = "patched"
        marked = await env.create("reminder", params={"where": "before"})
        await env.run_until_idle()
        CODE["v"] = "old"
        unmarked = await env.create("reminder", params={"where": "after"})
        await env.run_until_idle()
        CODE["v"] = "deprecated"
        await env.advance(11)
        for inst, output in ((marked, ["email", "sms"]), (unmarked, ["email", "sms"])):
            status = await inst.status()
            assert status.status == "complete", status
            assert status.output == output
        # nothing recorded by deprecate_patch
        assert "patch:sms-reminder" not in [s.name for s in await unmarked.steps()]


@pytest.mark.parametrize("bad", ["", "has space", "-dash", "x" * 101, "a/b"])
async def test_an_invalid_patch_id_errors_naming_it_and_records_nothing(
    make_test_env: TestEnvFactory, bad: str
) -> None:
    @workflow(name="bad-patch")
    async def bad_patch(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return step.patched(bad)

    async with make_test_env([bad_patch]) as env:
        inst = await env.create("bad-patch")
        status = await inst.status()
        assert status.status == "errored", status
        assert "invalid patch id" in status.error["message"]
        assert repr(bad)[:40] in status.error["message"]
        assert await inst.steps() == []


async def test_a_patch_in_a_child_workflow(make_test_env: TestEnvFactory) -> None:
    @workflow(name="child")
    async def child(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return step.patched("child-patch")

    @workflow(name="parent")
    async def parent(event: WorkflowEvent, step: WorkflowStep) -> Any:
        child_id = await step.start_workflow("child", {})
        return await step.wait_for_workflow("child", child_id)

    async with make_test_env([child, parent]) as env:
        inst = await env.create("parent")
        await env.run_until_idle()
        status = await inst.status()
        assert status.status == "complete", status
        assert status.output is True


async def test_a_dag_node_added_under_a_patch(make_test_env: TestEnvFactory) -> None:
    def dag(patched: bool) -> Dag:
        graph = Dag(name="graph")
        graph.add_step(lambda ctx: {"a": call("a")}, name="a")
        if patched:
            graph.add_step(lambda ctx: {"b": call("b")}, name="b", depends_on=["a"], patch="b-node")
        graph.add_step(lambda ctx: {"c": call("c")}, name="c", depends_on=["a"])
        return graph

    async with make_test_env([dag(True)]) as env:
        inst = await env.create("graph")
        status = await inst.status()
        assert status.status == "complete", status
        assert sorted(CALLS) == ["a", "b", "c"]
        assert "patch:b-node" in [s.name for s in await inst.steps()]


async def test_the_toolkits_replay_check_sees_a_removed_patch(
    make_test_env: TestEnvFactory,
) -> None:
    CODE["v"] = "patched"
    async with make_test_env([reminder]) as env:
        inst = await env.create("reminder", params={"where": "before"})
        await env.advance(11)
        assert (await inst.status()).status == "complete"
        await env.replay(inst)  # the code that recorded the marker replays it
        CODE["v"] = "old"
        with pytest.raises(ReplayError, match="patch:sms-reminder-1"):
            await env.replay(inst)
