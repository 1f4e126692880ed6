"""The wrangler project of ``project/`` (Cloudflare's documented Python Workflows patterns,
written against Cloudflare's SDK) loaded with ``stepline.cloudflare.load_wrangler`` and run
unchanged in ``stepline.testing``, on both stores: outputs, durations in Cloudflare's units,
retries, NonRetryableError, ctx, events and the env's bindings."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from stepline.cloudflare import WranglerProject, load_wrangler

from ..conftest import TestEnvFactory

PROJECT = Path(__file__).parent / "project" / "wrangler.jsonc"


@pytest.fixture
def project() -> WranglerProject:
    return load_wrangler(PROJECT, database="sqlite:///unused.db")


def workflows(project: WranglerProject) -> list[Any]:
    return list(project.workflows.values())


async def test_the_getting_started_workflow(
    project: WranglerProject, make_test_env: TestEnvFactory
) -> None:
    async with make_test_env(workflows(project)) as env:
        project.env.attach(env.engine)
        inst = await env.create("starter", id="o1", params={"order": "o1"})
        assert await inst.output() == {"result": "shipped o1 with 3 items", "greeting": "hello"}
        steps = await inst.steps()
    assert [(s.name, s.kind) for s in steps] == [
        ("load the order", "do"), ("cool down", "sleep"), ("ship the order", "do"),
    ]  # fmt: skip
    sleep = steps[1]
    assert sleep.wake_at is not None and sleep.started_at is not None
    assert sleep.wake_at - sleep.started_at == pytest.approx(10)


async def test_the_dag_with_dependencies_by_name_and_ctx(
    project: WranglerProject, make_test_env: TestEnvFactory
) -> None:
    async with make_test_env(workflows(project)) as env:
        inst = await env.create("diamond", id="d1", params={"source": "two words"})
        assert await inst.output() == {"words": 2, "letters": 8, "step": "summary"}
        names = [(s.name, s.count) for s in await inst.steps()]
    assert sorted(names) == [
        ("count_letters", 1), ("count_words", 1), ("fetch_source", 1), ("summary", 1),
    ]  # fmt: skip


async def test_a_bare_number_sleeps_milliseconds_and_events_arrive_as_dicts(
    project: WranglerProject, make_test_env: TestEnvFactory
) -> None:
    async with make_test_env(workflows(project)) as env:
        inst = await env.create("approval", id="a1")
        await env.run_until_idle()
        (pause,) = await inst.steps()
        assert pause.wake_at is not None and pause.started_at is not None
        assert pause.wake_at - pause.started_at == pytest.approx(1.5)  # 1500: milliseconds
        await env.advance("1.5 seconds")
        await inst.send_event("decision", {"approved": True})
        assert await inst.output() == {"approved": True, "type": "decision"}


async def test_a_retry_config_in_cloudflare_units(
    project: WranglerProject, make_test_env: TestEnvFactory
) -> None:
    async with make_test_env(workflows(project)) as env:
        inst = await env.create("flaky", id="f1")
        assert await inst.output() == {"attempt": 3, "limit": 3}
        (step,) = await inst.steps()
    starts = [a.started_at for a in step.attempts]
    # "5 seconds", linear: 5 s after the first failure, 10 s after the second.
    assert [round(b - a) for a, b in itertools.pairwise(starts)] == [5, 10]
    assert [a.error["name"] for a in step.attempts if a.error] == ["ConnectionError"] * 2


async def test_a_non_retryable_error_fails_the_step_at_once(
    project: WranglerProject, make_test_env: TestEnvFactory
) -> None:
    async with make_test_env(workflows(project)) as env:
        inst = await env.create("fatal", id="x1")
        assert await inst.output() == {
            "caught": "NonRetryableError",
            "message": "workers.workflows.NonRetryableError: invalid input on attempt 1",
        }
        (step,) = await inst.steps()
    assert step.status == "errored" and len(step.attempts) == 1


async def test_the_env_bindings_create_and_get_instances(
    project: WranglerProject, make_test_env: TestEnvFactory
) -> None:
    async with make_test_env(workflows(project)) as env:
        project.env.attach(env.engine)
        inst = await env.create("spawner", id="s1", params={"child": "kid"})
        assert await inst.output() == {"started": ["kid", 1], "child status": "queued"}
        child = await env.engine.workflow("starter").get("kid")
        assert (await child.record()).params == {"order": "c1"}
        listed = await env.engine.list_instances("diamond")
        assert [i.params for i in listed.instances] == [{"source": "a b"}]
