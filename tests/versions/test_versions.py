"""Versions on the engine: two classes under one name, creates of the newest or the one asked
for, each instance run by its own version's code, workers serving some versions only, bad input
refused naming the value. On both stores."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import stepline
from stepline import (
    ConfigError,
    DefinitionError,
    Engine,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline.project import load_project, load_workflows
from stepline.testing import replay_check
from stepline.workflow import definition_of

from ..conftest import EngineFactory, drain


class OrderV1(Workflow):
    name = "order"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("ship", lambda: "v1")


class OrderV2(Workflow):
    name = "order"
    version = "2"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("ship", lambda: "v2")


async def test_a_create_uses_the_newest_version_unless_told(make_engine: EngineFactory) -> None:
    async with make_engine([OrderV1, OrderV2]) as engine:
        binding = engine.workflow("order")
        new = await binding.create("new")
        old = await binding.create("old", version="1")
        batch = await binding.create_batch([{"id": "b"}], version="1")
        await drain(engine)
        assert (await new.status()).output == "v2"
        assert (await old.status()).output == "v1"
        assert (await batch[0].status()).output == "v1"
        assert (await engine.store.get_instance("order", "new")).version == "2"


async def test_an_unknown_version_at_create_is_refused_and_nothing_stored(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([OrderV1, OrderV2]) as engine:
        binding = engine.workflow("order")
        for bad in ("3", "", "no spaces"):
            with pytest.raises(ValueError, match="version") as caught:
                await binding.create("x", version=bad)
            assert repr(bad) in str(caught.value)
        assert (await engine.list_instances("order")).instances == []


def test_two_classes_with_one_name_and_version_are_refused() -> None:
    class Other(Workflow):
        name = "order"
        version = "2"

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            return None

    with pytest.raises(DefinitionError, match="'order' at version '2'"):
        Engine("sqlite:///:memory:", [OrderV2, Other], worker=False)


def test_an_invalid_version_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match="invalid version"):

        @workflow(name="bad", version="has space")
        async def bad(event: WorkflowEvent, step: WorkflowStep) -> Any:
            return None


async def test_a_worker_claims_only_the_versions_it_serves(store_url: str) -> None:
    async with (
        Engine(store_url, [OrderV1, OrderV2], worker=False) as both,
        Engine(store_url, [OrderV1], worker=False) as old,
    ):
        await both.workflow("order").create("n")  # v2
        await both.workflow("order").create("o", version="1")
        assert await old.worker.run_once() == 1
        assert (await both.store.get_instance("order", "o")).status == "complete"
        n = await both.store.get_instance("order", "n")
        assert n.status == "queued"
        await old.worker.beat_now()
        (warning,) = await both.unserved_warnings([n])
        assert warning == "no live worker serves version '2' of 'order'"
        status = await (await both.workflow("order").get("n")).status()
        assert status.warning == warning
        assert await both.worker.run_once() == 1
        assert (await both.workflow("order").get("n")) is not None
        assert (await both.store.get_instance("order", "n")).output == "v2"


async def test_a_client_without_the_code_uses_the_newest_version_live_workers_serve(
    store_url: str,
) -> None:
    async with (
        Engine(store_url, [OrderV1, OrderV2], worker=False) as served,
        Engine(store_url, worker=False) as client,
    ):
        await served.worker.beat_now()
        made = await client.workflow("order").create("c")
        assert (await client.store.get_instance("order", made.id)).version == "2"
        with pytest.raises(ValueError, match="'7'"):
            await client.workflow("order").create("d", version="7")


async def test_a_restart_keeps_the_version(make_engine: EngineFactory) -> None:
    async with make_engine([OrderV1, OrderV2]) as engine:
        inst = await engine.workflow("order").create("a", version="1")
        await drain(engine)
        await inst.restart()
        await drain(engine)
        assert (await inst.status()).output == "v1"


async def test_a_restart_may_move_an_instance_to_another_version(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([OrderV1, OrderV2]) as engine:
        inst = await engine.workflow("order").create("a", version="1")
        await drain(engine)
        with pytest.raises(ValueError, match="'9'"):
            await inst.restart(version="9")
        assert (await engine.store.get_instance("order", "a")).status == "complete"
        await inst.restart(version="2")
        await drain(engine)
        assert (await inst.status()).output == "v2"


def test_stepline_toml_sets_a_version(tmp_path: Path) -> None:
    (tmp_path / "shop_v.py").write_text(
        "from stepline import Workflow\n"
        "class Order(Workflow):\n"
        "    name = 'order'\n"
        "    async def run(self, event, step):\n"
        "        return 1\n",
        encoding="utf-8",
    )
    table = '[[workflows]]\nname = "order"\nclass_name = "shop_v:Order"\n'
    (tmp_path / "stepline.toml").write_text(table + table + 'version = "2"\n', encoding="utf-8")
    before_modules, before_path = set(sys.modules), list(sys.path)
    try:
        found = [definition_of(w) for w in load_workflows(load_project(tmp_path, environ={}))]
        assert [(d.name, d.version) for d in found] == [("order", "1"), ("order", "2")]
        (tmp_path / "stepline.toml").write_text(table + 'version = "no way"\n', encoding="utf-8")
        with pytest.raises(ConfigError, match=r"workflows\[0\]\.version.*'no way'"):
            load_project(tmp_path, environ={})
    finally:
        for name in set(sys.modules) - before_modules:
            del sys.modules[name]
        sys.path[:] = before_path


async def test_a_query_replays_the_code_of_the_instances_version(
    make_engine: EngineFactory,
) -> None:
    class Asked(Workflow):
        name = "asked"

        @stepline.query
        def code(self) -> str:
            return "v1"

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            await step.sleep("nap", 60)

    class AskedV2(Workflow):
        name = "asked"
        version = "2"

        @stepline.query
        def code(self) -> str:
            return "v2"

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            await step.sleep("nap", 60)

    async with make_engine([Asked, AskedV2]) as engine:
        old = await engine.workflow("asked").create("old", version="1")
        new = await engine.workflow("asked").create("new")
        await drain(engine)
        assert await old.query("code") == "v1"
        assert await new.query("code") == "v2"


async def test_replay_check_replays_each_instance_with_its_versions_code(store_url: str) -> None:
    class NappingV1(Workflow):
        name = "napping"

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            await step.do("a", lambda: 1)
            await step.sleep("nap", 60)

    class NappingV2(Workflow):
        name = "napping"
        version = "2"

        async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
            await step.do("other", lambda: 2)
            await step.sleep("nap", 60)

    async with Engine(store_url, [NappingV1, NappingV2], worker=False) as engine:
        await engine.workflow("napping").create("one", version="1")
        await engine.workflow("napping").create("two")
        await drain(engine)
    report = await replay_check(store_url, [NappingV1, NappingV2])
    assert report.ok, report.diverged
    assert sorted(r.id for r in report.results) == ["one", "two"]
    only_new = await replay_check(store_url, [NappingV2])
    assert [r.id for r in only_new.results] == ["two"]  # no code of today's runs "one"


class Account(Workflow):
    name = "account"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.wait_for_event("close", type="close", timeout="1 hour")

    @stepline.update
    async def deposit(self, step: WorkflowStep, amount: int) -> int:
        return amount

    @deposit.validator
    def _small(self, amount: int) -> None:
        if amount > 100:
            raise ValueError(f"version 1 takes at most 100, got {amount}")


class AccountV2(Workflow):
    name = "account"
    version = "2"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.wait_for_event("close", type="close", timeout="1 hour")

    @stepline.update
    async def deposit(self, step: WorkflowStep, amount: int) -> int:
        return amount

    @deposit.validator
    def _positive(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError(f"version 2 takes only positive amounts, got {amount}")


async def test_an_update_is_checked_by_the_code_of_the_instance_s_version(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([Account, AccountV2]) as engine:
        binding = engine.workflow("account")
        old = await binding.create("old", version="1")
        new = await binding.create("new")
        await drain(engine)
        with pytest.raises(stepline.UpdateRejectedError, match="version 1 takes at most 100"):
            await old.update("deposit", 500, update_id="big", timeout="2 seconds")
        with pytest.raises(stepline.UpdateRejectedError, match="version 2 takes only positive"):
            await new.update("deposit", -1, update_id="negative", timeout="2 seconds")
        for instance, update_id in ((old, "big"), (new, "negative")):
            with pytest.raises(LookupError):  # turned down before it was recorded
                await instance.update_result(update_id)
