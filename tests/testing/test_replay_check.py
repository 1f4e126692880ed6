"""``stepline.testing.replay_check``: a database's recorded histories replayed through today's
code (both stores), naming each instance and step that diverges, and writing nothing."""

from __future__ import annotations

from typing import Any

import pytest

from stepline import WorkflowEvent, WorkflowStep, workflow
from stepline.errors import StoreError
from stepline.store.postgres import split_url
from stepline.testing import WorkflowTestEnv, replay_check

from ..contract._support import raw
from ._flows import naps


def renamed() -> Any:
    """``naps`` deployed with its first step renamed and no patch: it no longer replays."""

    @workflow(name="naps")
    async def run(event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("begin", lambda: "started")
        await step.sleep("first", "1 day")
        await step.sleep("second", "1 day")
        return await step.do("end", lambda: "rested")

    return run


def dump(store_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted: what the check must leave as it was."""
    if store_url.startswith("sqlite:"):
        query = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
    else:
        schema = split_url(store_url)[1]
        query = (
            "SELECT table_name FROM information_schema.tables "
            f"WHERE table_schema = '{schema}' ORDER BY table_name"
        )
    tables = [row[0] for row in raw(store_url, query)]
    return {t: sorted(raw(store_url, f"SELECT * FROM {t}"), key=repr) for t in tables}


async def _recorded(store_url: str) -> None:
    """Two finished instances and one asleep between its sleeps."""
    async with WorkflowTestEnv([naps], store=store_url) as env:
        for name in ("done-1", "done-2"):
            await (await env.create(naps, id=name)).wait()
        await env.create(naps, id="asleep")
        await env.run_until_idle()


async def test_a_rename_without_a_patch_names_each_instance_and_step_and_writes_nothing(
    store_url: str,
) -> None:
    await _recorded(store_url)
    before = dump(store_url)

    same = await replay_check(store_url, [naps])
    assert same.ok
    assert sorted(r.id for r in same.results) == ["asleep", "done-1", "done-2"]

    report = await replay_check(store_url, [renamed()])
    assert not report.ok
    assert {(r.id, r.step) for r in report.diverged} == {
        ("done-1", "start-1"),
        ("done-2", "start-1"),
        ("asleep", "start-1"),
    }
    assert all("begin-1" in str(r.message) for r in report.diverged)
    assert dump(store_url) == before


async def test_status_limit_and_since_choose_the_instances(store_url: str) -> None:
    await _recorded(store_url)
    finished = await replay_check(store_url, [renamed()], statuses=["complete"])
    assert sorted(r.id for r in finished.diverged) == ["done-1", "done-2"]
    assert len((await replay_check(store_url, [naps], limit=1)).results) == 1
    assert (await replay_check(store_url, [naps], since=4e9)).results == []


async def test_a_database_behind_the_code_is_an_error_and_is_not_migrated(
    store_url: str,
) -> None:
    await _recorded(store_url)
    newest = max(row[0] for row in raw(store_url, "SELECT version FROM schema_migrations"))
    raw(store_url, f"DELETE FROM schema_migrations WHERE version = {newest}")
    before = dump(store_url)
    with pytest.raises(StoreError, match=f"schema version {newest - 1}, this stepline needs"):
        await replay_check(store_url, [naps])
    assert dump(store_url) == before
