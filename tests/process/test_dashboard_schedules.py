# ruff: noqa: F811  (the imported fixtures are parameters of the tests)
"""The dashboard's schedules panel in headless Chromium: a stored schedule with its next run,
pausing and resuming it, triggering a tick (which opens its instance),
and the panel on a 390 px phone without horizontal overflow.

Reuses tests/test_dashboard.py's browser and page set-up, with a server of its own whose
in-process worker serves workflows that declare schedules (stored when it starts).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from stepline import Engine, Schedule, Workflow, WorkflowEvent, WorkflowStep
from stepline.http import create_app

from .._http_server import ServerThread
from .test_dashboard import (  # noqa: F401  (fixtures)
    PHONE,
    Site,
    _watched_page,
    browser,
    cut_off,
    page,
    playwright,
    small_tap_targets,
    watch,
)


class Nightly(Workflow):
    name = "nightly"
    schedules = (
        Schedule("0 3 * * *", name="nightly-report", timezone="Europe/Paris"),
        Schedule("*/5 * * * *", name="every-5", catch_up="all", params={"note": "<b>x</b>"}),
    )

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("stamp", lambda: event.instance_id)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db = tmp_path_factory.mktemp("dashboard-schedules") / "stepline.db"
    engine = Engine(f"sqlite:///{db}", [Nightly], worker=True, poll_interval=0.05, grace_period=1)
    with ServerThread(create_app(engine, manage_engine=True)) as server:
        yield Site(server.url)


def schedule(site: Site, name: str) -> dict[str, Any]:
    resp = httpx.get(f"{site.url}/api/schedules/{name}", timeout=10)
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def test_the_panel_lists_pauses_and_resumes_a_schedule(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/#/workflows")
    panel = page.locator("[data-testid=schedules]")
    expect(panel.locator("[data-testid=schedule-row]")).to_have_count(2)
    row = panel.locator("[data-testid=schedule-row][data-name=nightly-report]")
    expect(row).to_contain_text("0 3 * * * · Europe/Paris")
    expect(row).to_contain_text("nightly")
    expect(row.locator("[data-testid=schedule-state]")).to_have_text("▶ active")
    expect(row.locator("[data-testid=schedule-next]")).not_to_have_text("—")

    row.locator("[data-testid=schedule-pause]").click()
    expect(row.locator("[data-testid=schedule-state]")).to_have_text("⏸ paused")
    expect(row).to_have_attribute("data-paused", "true")
    expect(row.locator("[data-testid=schedule-next]")).to_have_text("—")
    assert schedule(site, "nightly-report")["paused"] is True
    expect(panel.locator("[data-testid=schedules-summary]")).to_have_text("· 2 · 1 paused")

    row.locator("[data-testid=schedule-resume]").click()
    expect(row.locator("[data-testid=schedule-state]")).to_have_text("▶ active")
    assert schedule(site, "nightly-report")["paused"] is False


def test_trigger_now_opens_the_ticks_instance(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/#/workflows")
    row = page.locator("[data-testid=schedule-row][data-name=every-5]")
    row.locator("[data-testid=schedule-trigger]").click()
    page.wait_for_url("**/#/workflows/nightly/instances/every-5-*")
    instance_id = page.url.rsplit("/", 1)[1]
    status = page.locator("[data-testid=status] .badge")
    expect(status).to_have_attribute("data-status", "complete")
    resp = httpx.get(f"{site.url}/api/workflows/nightly/instances/{instance_id}", timeout=10)
    record = resp.json()["workflow"]
    assert record["trigger"] == "cron" and record["schedule"]["name"] == "every-5"


def test_the_panel_fits_a_phone(browser: Any, site: Site, watch: Any, tmp_path: Path) -> None:
    for phone in _watched_page(browser, watch, viewport=PHONE, is_mobile=True, has_touch=True):
        phone.goto(f"{site.url}/#/workflows")
        expect(phone.locator("[data-testid=schedule-row]").first).to_be_visible()
        phone.screenshot(path=tmp_path / "schedules-390.png", full_page=True)
        wide = phone.evaluate("document.documentElement.scrollWidth")
        assert wide <= PHONE["width"], f"the page is {wide} px wide on a {PHONE['width']} px phone"
        assert cut_off(phone) == []
        assert small_tap_targets(phone) == []
