"""``create(key=..., on_conflict="debounce" | "replace_queued")``: one instance per burst, or the
newest queued one kept; on both stores, with concurrent creates, on a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stepline import ManualClock, WorkflowEvent, WorkflowStep, workflow

from ..conftest import EngineFactory, drain

RAN: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    RAN.clear()


@workflow(name="sync-user")
async def sync_user(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("sync", lambda: RAN.append(event.payload))
    return event.payload


async def test_a_burst_of_debounced_creates_runs_once_with_the_last_params(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([sync_user], clock=clock) as engine:
        binding = engine.workflow("sync-user")
        first = await binding.create(params=1, key="u1", on_conflict="debounce", debounce=5)
        for n in (2, 3):
            clock.advance(3)
            again = await binding.create(params=n, key="u1", on_conflict="debounce", debounce=5)
            assert again.id == first.id
            await drain(engine)
            assert RAN == []  # still in its quiet period
        other = await binding.create(params="x", key="u2", on_conflict="debounce", debounce=5)
        assert other.id != first.id
        clock.advance(5)
        await drain(engine)
        assert sorted(map(str, RAN)) == ["3", "x"]
        assert (await first.status()).output == 3
        # After it started, a new burst makes a new instance.
        later = await binding.create(params=4, key="u1", on_conflict="debounce", debounce=5)
        assert later.id != first.id


async def test_concurrent_debounced_creates_make_one_instance(
    make_engine: EngineFactory,
) -> None:
    async with make_engine([sync_user]) as engine:
        binding = engine.workflow("sync-user")
        handles = await asyncio.gather(
            *(
                binding.create(params=n, key="k", on_conflict="debounce", debounce="1 hour")
                for n in range(20)
            )
        )
        assert len({h.id for h in handles}) == 1
        page = await binding.list()
        assert len(page.instances) == 1


async def test_replace_queued_keeps_only_the_newest_queued(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([sync_user], clock=clock) as engine:
        binding = engine.workflow("sync-user")
        started = await binding.create(params=0, key="k", on_conflict="replace_queued")
        await engine.store.control("sync-user", started.id, "pause")
        await engine.store.control("sync-user", started.id, "resume")
        running = await engine.store.claim("w", ["sync-user"], 1, 30, clock())
        assert [c.instance.id for c in running.claims] == [started.id]
        handles = [
            await binding.create(params=n, key="k", on_conflict="replace_queued") for n in (1, 2, 3)
        ]
        statuses = [(await h.status()).status for h in handles]
        assert statuses == ["terminated", "terminated", "queued"]
        assert (await started.status()).status == "running"  # started: untouched
        other = await binding.create(params=9, key="other", on_conflict="replace_queued")
        assert (await other.status()).status == "queued"


async def test_concurrent_replace_queued_leaves_one_queued(make_engine: EngineFactory) -> None:
    async with make_engine([sync_user]) as engine:
        binding = engine.workflow("sync-user")
        await asyncio.gather(
            *(binding.create(params=n, key="k", on_conflict="replace_queued") for n in range(20))
        )
        page = await binding.list(status="queued")
        assert len(page.instances) == 1
        assert len((await binding.list(status="terminated")).instances) == 19


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"on_conflict": "debounce", "debounce": 5}, "needs a key"),
        ({"key": "k", "on_conflict": "debounce"}, "quiet period"),
        ({"key": "k", "on_conflict": "debounce", "debounce": "soon"}, "'soon'"),
        ({"key": "k", "on_conflict": "latest"}, "'latest'"),
        ({"key": "k", "debounce": 5}, "debounce=5"),
        ({"key": "k", "on_conflict": "replace_queued", "debounce": 5}, "debounce=5"),
    ],
)
async def test_bad_keyed_options_are_refused_and_nothing_is_stored(
    make_engine: EngineFactory, options: dict[str, Any], named: str
) -> None:
    async with make_engine([sync_user]) as engine:
        binding = engine.workflow("sync-user")
        with pytest.raises(ValueError, match=named):
            await binding.create("x", **options)
        assert (await binding.list()).instances == []


async def test_an_existing_id_is_refused_by_a_keyed_create(make_engine: EngineFactory) -> None:
    from stepline import InstanceAlreadyExistsError

    async with make_engine([sync_user]) as engine:
        binding = engine.workflow("sync-user")
        await binding.create("a")
        with pytest.raises(InstanceAlreadyExistsError):
            await binding.create("a", key="k", on_conflict="replace_queued")
        assert len((await binding.list()).instances) == 1


async def test_the_http_api_takes_the_keyed_options_and_the_timeout(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    import httpx

    from stepline.http import create_app

    async with make_engine([sync_user], clock=clock) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as client:
            url = "/api/workflows/sync-user/instances"
            body = {"key": "u", "on_conflict": "debounce", "debounce": "5 seconds"}
            first = await client.post(url, json={**body, "params": 1, "timeout": 60})
            second = await client.post(url, json={**body, "params": 2})
            assert first.status_code == second.status_code == 201, first.text
            assert first.json()["id"] == second.json()["id"]
            detail = (await client.get(f"{url}/{first.json()['id']}")).json()["workflow"]
            assert detail["params"] == 2 and detail["deadline_at"] == clock() + 60
            bad = await client.post(url, json={"timeout": [1]})
            assert bad.status_code == 400 and "timeout" in bad.json()["error"]["message"]


def test_the_sync_facade_takes_the_deadline_and_keyed_options(tmp_path: Any) -> None:
    from stepline import SyncEngine

    with SyncEngine(f"sqlite:///{tmp_path}/x.db", [sync_user]) as engine:
        binding = engine.workflow("sync-user")
        first = binding.create(key="k", on_conflict="debounce", debounce=60, timeout=120)
        again = binding.create(params=2, key="k", on_conflict="debounce", debounce=60)
        assert again.id == first.id
        record = engine._portal.call(engine.engine.store.get_instance("sync-user", first.id))
        assert record.params == 2 and record.deadline_at is not None
        assert record.deadline_at == pytest.approx(record.created_at + 120)
        with pytest.raises(ValueError, match="needs a key"):
            binding.create(on_conflict="replace_queued")
