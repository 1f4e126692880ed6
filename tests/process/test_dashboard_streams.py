# ruff: noqa: F811  (the imported fixtures are parameters of the tests)
"""The instance page shows the latest value of each stream the instance publishes to, and
follows it live (docs/messaging.md), in headless Chromium at desktop and phone width.

Reuses tests/test_dashboard.py's browser and page set-up, with a server of its own running a
workflow that publishes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.http import create_app

from .._http_server import ServerThread
from .test_dashboard import (  # noqa: F401  (fixtures)
    PHONE,
    Site,
    browser,
    cut_off,
    page,
    phone,
    playwright,
    watch,
)


@workflow(name="importer")
async def importer(event: WorkflowEvent, step: WorkflowStep) -> Any:
    for done in (1, 2, 3):
        await step.publish("progress", {"done": done, "of": 4})
    await step.publish("log", "waiting for the last file")
    await step.wait_for_event("last", type="last", timeout="1 hour")
    await step.publish("progress", {"done": 4, "of": 4})
    return "imported"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db = tmp_path_factory.mktemp("dashboard-streams") / "stepline.db"
    engine = Engine(f"sqlite:///{db}", [importer], worker=True, poll_interval=0.05)
    with ServerThread(create_app(engine, manage_engine=True, stream_interval=0.2)) as server:
        served = Site(server.url)
        for n in (1, 2):
            served.post("/api/workflows/importer/instances", {"id": f"i{n}"})
            served.wait_status("importer", f"i{n}", "waiting")
        yield served


def _check(page: Page, site: Site, instance_id: str, width: int) -> None:
    page.goto(f"{site.url}/#/workflows/importer/instances/{instance_id}")
    rows = page.locator("[data-testid=streams] [data-testid=stream-row]")
    expect(rows).to_have_count(2)
    progress = page.locator("[data-testid=stream-row][data-stream=progress]")
    expect(progress.locator("[data-testid=stream-value]")).to_have_text('{ "done": 3, "of": 4 }')
    expect(page.locator("[data-testid=stream-row][data-stream=log]")).to_contain_text(
        "waiting for the last file"
    )
    site.post(f"/api/workflows/importer/instances/{instance_id}/events/last")
    # followed live: the latest value changes without a reload
    expect(progress.locator("[data-testid=stream-value]")).to_have_text('{ "done": 4, "of": 4 }')
    expect(progress).to_contain_text("4")
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, f"the instance page is {wide} px wide at {width} px"
    assert cut_off(page) == []


def test_the_streams_latest_values_on_a_desktop(page: Page, site: Site) -> None:
    _check(page, site, "i1", 1280)


def test_the_streams_latest_values_on_a_phone(phone: Page, site: Site) -> None:
    _check(phone, site, "i2", PHONE["width"])
