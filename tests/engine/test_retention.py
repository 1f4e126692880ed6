"""Retention per workflow and outcome, and per instance: each instance is deleted at its own
deadline under the test's clock, none early (both stores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from stepline import (
    ConfigError,
    DefinitionError,
    InstanceNotFoundError,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline.cli._render import describe_workflow, fmt_time, instance_fields
from stepline.clock import ManualClock
from stepline.cloudflare import Env
from stepline.http import create_app
from stepline.project import load_project, load_workflow
from stepline.workflow import definition_of

from ..conftest import EngineFactory, drain

DAY = 86400.0


@workflow(name="kept", retention={"complete": "7 days", "errored": "30 days"})
async def kept(event: WorkflowEvent, step: WorkflowStep) -> Any:
    if event.payload == "fail":
        raise ValueError("failed on purpose")
    if event.payload == "wait":
        await step.wait_for_event("go", type="go", timeout="365 days")
    return await step.do("work", lambda: "done")


async def _exists(engine: Any, instance_id: str) -> bool:
    try:
        await engine.workflow("kept").get(instance_id)
    except InstanceNotFoundError:
        return False
    return True


async def test_each_instance_is_deleted_at_its_own_deadline_none_early(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([kept], clock=clock) as engine:
        binding = engine.workflow("kept")
        start = clock()
        await binding.create("ok")
        await binding.create("bad", "fail")
        await binding.create("short", retention={"complete": "1 day"})
        await binding.create("waiting", "wait")
        await drain(engine)
        record = await engine.store.get_instance("kept", "ok")
        assert record.delete_at == pytest.approx(start + 7 * DAY)
        assert (await engine.store.get_instance("kept", "short")).delete_at == pytest.approx(
            start + DAY
        )
        expected = {"short": 1, "ok": 7, "bad": 30}
        for instance_id, days in sorted(expected.items(), key=lambda item: item[1]):
            clock.set(start + days * DAY - 1)
            assert await engine.worker.purge_now() == 0
            assert await _exists(engine, instance_id)
            clock.set(start + days * DAY)
            assert await engine.worker.purge_now() == 1
            assert not await _exists(engine, instance_id)
        assert await _exists(engine, "waiting")  # unfinished: never deleted


async def test_the_global_setting_stays_the_default(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    @workflow(name="plain")
    async def plain(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return 1

    async with make_engine([plain], clock=clock, retention="2 days") as engine:
        await engine.workflow("plain").create("p")
        await drain(engine)
        clock.advance(2 * DAY - 1)
        assert await engine.worker.purge_now() == 0
        clock.advance(2)
        assert await engine.worker.purge_now() == 1


def test_a_retention_that_is_not_a_duration_is_refused_naming_it() -> None:
    with pytest.raises(DefinitionError, match=r"complete = 'soon' is not a duration"):

        @workflow(name="bad", retention={"complete": "soon"})
        async def bad(event: WorkflowEvent, step: WorkflowStep) -> Any:
            return None


async def test_a_bad_instance_retention_stores_nothing(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([kept], clock=clock) as engine:
        with pytest.raises(ValueError, match=r"errored = 'a while' is not a duration"):
            await engine.workflow("kept").create("x", retention={"errored": "a while"})
        with pytest.raises(ValueError, match=r"unknown outcome 'done'"):
            await engine.workflow("kept").create("x", retention={"done": "1 day"})
        assert not await _exists(engine, "x")


def _project(tmp_path: Path, retention: str) -> Path:
    (tmp_path / "flows.py").write_text(
        "from stepline import workflow\n\n"
        "@workflow(name='orders', retention={'complete': '1 day'})\n"
        "async def orders(event, step):\n    return 1\n",
        encoding="utf-8",
    )
    config = tmp_path / "stepline.toml"
    config.write_text(
        f'[[workflows]]\nname = "orders"\nclass_name = "flows:orders"\nretention = {retention}\n',
        encoding="utf-8",
    )
    return config


def test_stepline_toml_sets_a_workflows_retention_over_its_code(tmp_path: Path) -> None:
    config = load_project(config_path=_project(tmp_path, '{complete = "2 days", errored = 60}'))
    loaded = definition_of(load_workflow(config, config.workflows[0]))
    assert loaded.retention == {"complete": 2 * DAY, "errored": 60.0}


def test_stepline_toml_refuses_a_retention_that_is_not_a_duration(tmp_path: Path) -> None:
    path = _project(tmp_path, '{terminated = "someday"}')
    with pytest.raises(ConfigError, match=r"workflows\[0\]\.retention'.*terminated = 'someday'"):
        load_project(config_path=path)


async def test_a_terminate_sets_the_deadline_and_a_restart_clears_it(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([kept], clock=clock) as engine:
        handle = await engine.workflow("kept").create(
            "t", "wait", retention={"terminated": "3 days"}
        )
        await drain(engine)
        await handle.terminate()
        record = await engine.store.get_instance("kept", "t")
        assert record.delete_at == pytest.approx(clock() + 3 * DAY)
        assert record.to_json()["delete_at"] == record.delete_at
        await handle.restart()
        assert (await engine.store.get_instance("kept", "t")).delete_at is None


async def test_over_http_and_cloudflares_api_an_instance_brings_its_own_retention(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([kept], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            url = "/api/workflows/kept/instances"
            made = await http.post(url, json={"id": "a", "retention": {"complete": "2 hours"}})
            assert made.status_code == 201, made.text
            cf = "/client/v4/accounts/acct/workflows/kept/instances"
            body = {"instance_id": "c", "instance_retention": {"success_retention": 3_600_000}}
            assert (await http.post(cf, json=body)).status_code == 201
            bad = await http.post(url, json={"id": "b", "retention": {"complete": "later"}})
            assert bad.status_code == 400
            assert "complete = 'later' is not a duration" in bad.json()["error"]["message"]
            await drain(engine)
            shown = (await http.get(f"{url}/a")).json()["workflow"]
            assert shown["delete_at"] == pytest.approx(shown["ended_at"] + 2 * 3600)
            ended = await engine.store.get_instance("kept", "c")
            assert ended.delete_at == pytest.approx((ended.ended_at or 0) + 3600)
            assert (await http.get(f"{url}/b")).status_code == 404


async def test_cloudflares_batch_creates_bring_each_instances_retention(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([kept], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            cf = "/client/v4/accounts/acct/workflows/kept/instances/batch"
            body = [
                {"instance_id": "h1", "instance_retention": {"success_retention": 3_600_000}},
                {"instance_id": "h2"},
            ]
            made = await http.post(cf, json=body)
            assert made.status_code == 201, made.text
        env = Env({"KEPT": "kept"})
        env.attach(engine)
        await env.KEPT.create_batch(
            [{"id": "p1", "retention": {"successRetention": "2 hours"}}, {"id": "p2"}]
        )
        await drain(engine)
        ends = {i: await engine.store.get_instance("kept", i) for i in ("h1", "h2", "p1", "p2")}
        kept_for = {i: (r.delete_at or 0) - (r.ended_at or 0) for i, r in ends.items()}
        assert kept_for == pytest.approx({"h1": 3600, "h2": 7 * DAY, "p1": 7200, "p2": 7 * DAY})


async def test_describe_shows_when_retention_deletes_the_instance(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([kept], clock=clock) as engine:
        await engine.workflow("kept").create("d", retention={"complete": "1 day"})
        await engine.workflow("kept").create("w", "wait")
        await drain(engine)
        done = await engine.store.get_instance("kept", "d")
        fields = dict(instance_fields(done, [], now=clock(), value=str))
        assert str(fields["Deleted At"]) == str(fmt_time(clock() + DAY))
        waiting = await engine.store.get_instance("kept", "w")
        assert "Deleted At" not in dict(instance_fields(waiting, [], now=clock(), value=str))


async def test_a_workflows_retention_is_listed_with_it(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([kept], clock=clock) as engine:
        [info] = await engine.list_workflows()
        assert info.retention == {"complete": 7 * DAY, "errored": 30 * DAY}
        shown = str(describe_workflow(info, None))
        assert "Retention" in shown and "complete 1 week; errored 4.3 weeks" in shown
