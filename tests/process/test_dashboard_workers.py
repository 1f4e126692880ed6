# ruff: noqa: F811  (the imported fixtures are parameters of the tests)
"""The dashboard's worker liveness in headless Chromium: the workers panel (live and dead
workers) and the "no live worker serves" warning on the instance and instances pages; and the
flow control limit that holds a queued instance back.

Reuses tests/test_dashboard.py's browser and page set-up, with a server of its own: its
in-process worker runs the dashboard tests' workflows, and a client engine on the same database
registers "unserved", a workflow no worker runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.http import create_app
from stepline.records import WorkerInfo

from .._http_server import ServerThread
from .test_dashboard import (  # noqa: F401  (fixtures)
    Site,
    _serve,
    browser,
    instance_url,
    page,
    playwright,
    watch,
)


@workflow(name="unserved")
async def unserved(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("never", lambda: "ran")


@workflow(name="capped", concurrency=1)
async def capped(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("never", lambda: "ran")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dashboard-workers") / "stepline.db"


@pytest.fixture(scope="module")
def site(db: Path) -> Iterator[Site]:
    with _serve(db, None) as server:
        yield Site(server.url)


def client_call(db: Path, action: Any) -> Any:
    """``await action(engine)`` with a client engine on ``db``, in a thread of its own
    (Playwright's sync API keeps an event loop running in this one)."""

    async def main() -> Any:
        async with Engine(f"sqlite:///{db}", [unserved, capped], worker=False) as engine:
            return await action(engine)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result(timeout=60)


def test_workers_panel_shows_live_and_dead_workers(page: Page, site: Site, db: Path) -> None:
    async def add_dead_worker(engine: Engine) -> None:
        # A worker last seen a minute ago that beat every 10 s: dead, but not yet expired.
        now = time.time()
        info = WorkerInfo("dead-one", "elsewhere", 999, now - 3600, 0.0, 10.0, ("quick",), 4, 2)
        await engine.store.workers.heartbeat(info, now - 60)

    client_call(db, add_dead_worker)
    page.goto(f"{site.url}/#/workflows")
    panel = page.locator("[data-testid=workers]")
    rows = panel.locator("[data-testid=worker-row]")
    expect(rows).to_have_count(2)
    dead = panel.locator("[data-testid=worker-row][data-id=dead-one]")
    expect(dead.locator("[data-testid=worker-state]")).to_have_text("✖ dead")
    expect(dead).to_contain_text("elsewhere · pid 999")
    expect(dead).to_contain_text("2/4")
    live = panel.locator("[data-testid=worker-row][data-live=true]")
    expect(live.locator("[data-testid=worker-state]")).to_have_text("● live")
    expect(live).to_contain_text("quick")
    expect(panel.locator("[data-testid=workers-summary]")).to_have_text("· 1 live")


def test_an_instance_nobody_serves_is_flagged(page: Page, site: Site, db: Path) -> None:
    async def create(engine: Engine) -> None:
        await engine.workflow("unserved").create(id="stuck")

    client_call(db, create)
    site.post("/api/workflows/quick/instances", {"id": "served-one"})
    site.wait_status("quick", "served-one", "complete")

    page.goto(instance_url(site, "unserved", "stuck"))
    expect(page.locator("[data-testid=status] .badge")).to_have_attribute("data-status", "queued")
    banner = page.locator("[data-testid=unserved]")
    expect(banner).to_contain_text("no live worker serves 'unserved'")
    expect(banner).to_contain_text("stepline worker")

    page.goto(instance_url(site, "quick", "served-one"))
    expect(page.locator("[data-testid=status] .badge")).to_have_attribute("data-status", "complete")
    expect(page.locator("[data-testid=unserved]")).to_have_count(0)

    page.goto(f"{site.url}/#/instances")
    expect(
        page.locator("[data-testid=instance-row][data-id=stuck] [data-testid=unserved]")
    ).to_have_text("⚠ no live worker serves 'unserved'")
    expect(
        page.locator("[data-testid=instance-row][data-id=served-one] [data-testid=unserved]")
    ).to_have_count(0)


def test_an_instance_held_back_by_a_limit_says_which(page: Page, site: Site, db: Path) -> None:
    async def fill_the_limit(engine: Engine) -> None:
        await engine.workflow("capped").create("running")
        claims = (
            await engine.store.claim("elsewhere", ["capped"], 1, 300, engine.store.now())
        ).claims
        assert [c.instance.id for c in claims] == ["running"]
        await engine.workflow("capped").create("held", key="customer-42", priority=2)

    client_call(db, fill_the_limit)
    page.goto(instance_url(site, "capped", "held"))
    expect(page.locator("[data-testid=held]")).to_have_text(
        "⏸ Held back by flow control: concurrency 1/1"
    )
    expect(page.locator("[data-testid=facts]")).to_contain_text("customer-42")
    page.goto(instance_url(site, "capped", "running"))
    expect(page.locator("[data-testid=status] .badge")).to_have_attribute("data-status", "running")
    expect(page.locator("[data-testid=held]")).to_have_count(0)


def test_no_workers_says_how_to_start_one(page: Page, tmp_path: Path) -> None:
    # A server without a worker of its own, on a database no worker uses.
    engine = Engine(f"sqlite:///{tmp_path}/empty.db", [unserved], worker=False)
    with ServerThread(create_app(engine, manage_engine=True)) as server:
        page.goto(f"{server.url}/#/workflows")
        note = page.locator("[data-testid=workers] [data-testid=no-workers]")
        expect(note).to_contain_text("No worker is running")
        expect(note).to_contain_text("stepline worker")
        expect(page.locator("[data-testid=workers-summary]")).to_have_text("· 0 live")


def test_the_versions_box_shows_a_deploy(page: Page, site: Site, db: Path) -> None:
    async def create(engine: Engine) -> None:
        await engine.workflow("unserved").create(id="versioned-one")

    client_call(db, create)
    page.goto(f"{site.url}/#/workflows")
    box = page.locator("[data-testid=versions-unserved]")
    box.locator("summary").click()
    row = box.locator("[data-testid=version-row][data-version='1']")
    expect(row).to_contain_text("queued")
    expect(row).to_contain_text("no live worker")
    served = page.locator("[data-testid=versions-quick]")
    served.locator("summary").click()
    row = served.locator("[data-testid=version-row][data-version='1']")
    expect(row).to_contain_text("drained")  # served by the server's live worker, nothing left
    expect(row).not_to_contain_text("no live worker")
