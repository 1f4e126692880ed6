# ruff: noqa: F811  (the imported fixtures are parameters of the tests)
"""The dashboard's activity panel in headless Chromium, at desktop and phone width: instances
completed and failed over the last hour (a bar a minute), the backlog and the held instances,
as GET /api/activity reports them.

Reuses tests/test_dashboard.py's browser and page set-up and its workflows, with a server and a
database of its own, so that the counts are this test's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from .test_dashboard import (  # noqa: F401  (fixtures)
    PHONE,
    Site,
    _serve,
    browser,
    cut_off,
    page,
    phone,
    playwright,
    watch,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with _serve(tmp_path_factory.mktemp("dashboard-activity") / "stepline.db", None) as server:
        served = Site(server.url)
        for n in range(5):
            served.post("/api/workflows/quick/instances", {"id": f"q{n}"})
        for n in range(2):
            served.post("/api/workflows/broken/instances", {"id": f"b{n}"})
        for n in range(5):
            served.wait_status("quick", f"q{n}", "complete")
        for n in range(2):
            served.wait_status("broken", f"b{n}", "errored")
        yield served


def _check_panel(page: Page, site: Site, width: int, out: Path) -> None:
    page.goto(f"{site.url}/#/workflows")
    panel = page.locator("[data-testid=activity]")
    expect(panel).to_be_visible()
    expect(panel.locator("[data-testid=activity-complete] .num")).to_have_text("5")
    expect(panel.locator("[data-testid=activity-failed] .num")).to_have_text("2")
    data = httpx.get(f"{site.url}/api/activity", timeout=10).json()
    assert sum(row["complete"] for row in data["ended"]) == 5
    assert len(data["ended"]) == 60 and data["bucket"] == 60
    expect(panel.locator("[data-testid=activity-backlog] .num")).to_have_text(str(data["backlog"]))
    expect(panel.locator("[data-testid=activity-held] .num")).to_have_text(str(data["held"]))
    expect(panel.locator("[data-testid=activity-workers] .num")).to_have_text("1")
    chart = panel.locator("[data-testid=activity-chart]")
    expect(chart.locator("rect[data-status=complete]").first).to_be_attached()
    expect(chart.locator("rect[data-status=errored]").first).to_be_attached()
    box = chart.bounding_box()
    assert box is not None and box["width"] > width / 2 and box["height"] >= 100
    page.screenshot(path=out / f"activity-{width}.png", full_page=True)
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, f"the workflows page is {wide} px wide at {width} px"
    assert cut_off(page) == []


def test_the_activity_panel_on_a_desktop(
    page: Page, site: Site, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _check_panel(page, site, 1280, tmp_path_factory.mktemp("activity"))


def test_the_activity_panel_on_a_phone(
    phone: Page, site: Site, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _check_panel(phone, site, PHONE["width"], tmp_path_factory.mktemp("activity-phone"))
