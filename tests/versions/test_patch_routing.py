"""Patch routing on the engine: a worker claims an instance that took a patch only if its code
has that patch, so an old worker beside a new one never replays a marker its code does not
call. The patches a workflow's code has are found at registration (literal ids in its source,
``patches = (...)``, a DAG's nodes) or when an instance takes one at run time. On both stores."""

from __future__ import annotations

from typing import Any

import pytest

from stepline import Dag, DefinitionError, ManualClock, Workflow, WorkflowEvent, WorkflowStep
from stepline import workflow as workflow_decorator
from stepline.workflow import definition_of

from ..conftest import EngineFactory, drain


class Old(Workflow):
    """Before the deploy: no sms."""

    name = "remind"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("email", lambda: "email")
        await step.sleep("first", 10)
        await step.sleep("second", 10)
        return "old path"


class New(Workflow):
    """The same version with an sms under a patch, between the two sleeps."""

    name = "remind"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("email", lambda: "email")
        await step.sleep("first", 10)
        if step.patched("sms"):
            await step.do("sms", lambda: "sms")
            await step.sleep("second", 10)
            return "patched path"
        await step.sleep("second", 10)
        return "old path"


async def test_an_old_worker_leaves_an_instance_that_took_a_patch_to_a_new_one(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with (
        make_engine([Old], clock=clock, worker_id="old") as old,
        make_engine([New], clock=clock, worker_id="new") as new,
    ):
        binding = old.workflow("remind")
        await binding.create("a")
        await drain(old)  # email, then the first sleep, on the old code
        clock.advance(11)
        assert await drain(new) == 1  # wakes on the new code: takes the patch, sleeps again
        await binding.create("b")  # never takes the patch: the old code may run it
        clock.advance(11)
        assert await drain(old) == 1  # "b" only: "a" is due but needs the patch
        a = await old.store.get_instance("remind", "a")
        assert (a.status, a.patches) == ("waiting", ("sms",))
        await old.worker.beat_now()  # only the old worker is live: "a" says what it waits for
        (warning,) = await old.unserved_warnings([a])
        assert warning == "no live worker has patch 'sms' of version '1' of 'remind'"
        assert (await (await binding.get("a")).status()).warning == warning
        await new.worker.beat_now()
        assert await old.unserved_warnings([a]) == [None]
        assert await drain(new) == 1
        assert (await (await binding.get("a")).status()).output == "patched path"
        for _ in range(2):  # the two sleeps of "b", on the old code
            clock.advance(11)
            await drain(old)
        assert (await (await binding.get("b")).status()).output == "old path"


IDS = {"chosen": "runtime-id"}


class Computed(Workflow):
    """A patch id computed at run time: not in the source as a literal."""

    name = "computed"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        taken = step.patched(IDS["chosen"])
        await step.sleep("nap", 10)
        return taken


async def test_a_patch_first_met_at_run_time_is_had_by_the_worker_that_met_it(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    assert definition_of(Computed).patches == frozenset()
    async with make_engine([Computed], clock=clock) as engine:
        inst = await engine.workflow("computed").create("c")
        await drain(engine)
        clock.advance(11)
        assert await drain(engine) == 1
        assert (await inst.status()).output is True


def test_the_patches_of_a_workflow_are_found_at_registration() -> None:
    class Declared(New):
        patches = ("computed-1",)

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            step.deprecate_patch("gone")
            return await super().run(event, step)

    @workflow_decorator(name="fn", patches=["extra"])
    async def fn(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return step.patched("in-fn")

    graph = Dag("graph")
    graph.add_step(lambda ctx: 1, name="a")
    graph.add_step(lambda ctx: 2, name="b", depends_on=["a"], patch="b-node")

    assert definition_of(New).patches == {"sms"}
    assert definition_of(Declared).patches == {"sms", "gone", "computed-1"}
    assert definition_of(fn).patches == {"in-fn", "extra"}
    assert definition_of(graph).patches == {"b-node"}
    assert definition_of(Old).patches == frozenset()


@pytest.mark.parametrize("bad", ["one-string", ("bad id",), 3])
def test_bad_declared_patches_are_refused_naming_them(bad: Any) -> None:
    class Bad(Old):
        patches = bad

    with pytest.raises(DefinitionError, match="patches"):
        definition_of(Bad)
