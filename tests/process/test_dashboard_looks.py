# ruff: noqa: F811  (the imported fixtures are parameters of the tests)
"""How the dashboard looks at a phone's width (390 px) and a desktop's (1280 px), measured in
headless Chromium: no page wider than the screen (a long step name in the restart menu), no
text cut off (status tiles, the send-event field), the workers panel's "live" readable
(contrast at least 4.5:1), no Output card before an instance has an output, and a retrying
instance shown as retrying, with its failed attempt and error, in the instances list.

Reuses tests/test_dashboard.py's browser set-up, with a server of its own running the
workflows below.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.http import create_app

from .._http_server import ServerThread
from .test_dashboard import (  # noqa: F401  (fixtures)
    PHONE,
    Site,
    Watch,
    _watched_page,
    browser,
    instance_url,
    playwright,
    watch,
)

LONG_STEP = "reconcile the quarterly ledger entries against the bank statement export"
WIDTHS = (PHONE["width"], 1280)


def _declined(ctx: Any) -> None:
    raise ValueError(f"card declined by the issuing bank on attempt {ctx.attempt}")


@workflow(name="billing")
async def billing(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do(LONG_STEP, lambda: "reconciled")
    retries = {"limit": 5, "delay": "1 hour", "backoff": "constant"}
    return await step.do("charge", {"retries": retries}, _declined)


@workflow(name="approval")
async def approval(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do(LONG_STEP, lambda: "reconciled")
    return await step.wait_for_event("decision", type="approve-the-quarterly-report")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db = tmp_path_factory.mktemp("dashboard-looks") / "stepline.db"
    engine = Engine(f"sqlite:///{db}", [billing, approval], worker=True, poll_interval=0.05)
    with ServerThread(create_app(engine, manage_engine=True, stream_interval=0.2)) as server:
        site = Site(server.url)
        site.post("/api/workflows/billing/instances", {"id": "bill-1"})
        site.post("/api/workflows/approval/instances", {"id": "ask-1"})
        site.post("/api/workflows/approval/instances", {"id": "stop-1"})
        site.wait_status("billing", "bill-1", "waiting")
        site.wait_status("approval", "ask-1", "waiting")
        site.wait_status("approval", "stop-1", "waiting")
        stop = {"status": "terminate"}
        path = "/api/workflows/approval/instances/stop-1/status"
        resp = httpx.patch(site.url + path, json=stop, timeout=10)
        assert resp.status_code == 200, resp.text
        yield site


@pytest.fixture(params=WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def sized(request: pytest.FixtureRequest, browser: Browser, watch: Watch) -> Iterator[Page]:
    """A page 390 px wide (a phone, with touch) or 1280 px (a desktop)."""
    width = request.param
    phone = width < 640
    yield from _watched_page(
        browser,
        watch,
        viewport={"width": width, "height": PHONE["height"]},
        is_mobile=phone,
        has_touch=phone,
    )


def page_width(page: Page) -> tuple[int, int]:
    """How wide the page is, and the screen (on a phone the window grows to a page that is too
    wide, so it is the viewport's width that counts)."""
    size = page.viewport_size
    assert size is not None
    return page.evaluate("document.documentElement.scrollWidth"), size["width"]


def cut_text(page: Page, selector: str) -> list[str]:
    """The elements matching ``selector`` whose text does not fit their box."""
    return list(
        page.evaluate(
            """(selector) => [...document.querySelectorAll(selector)]
              .filter((el) => el.getClientRects().length && el.scrollWidth > el.clientWidth)
              .map((el) => `${el.textContent} (${el.scrollWidth} > ${el.clientWidth} px)`)""",
            selector,
        )
    )


def placeholder_fits(page: Page, selector: str) -> tuple[float, float]:
    """The width of an input's placeholder text in its font, and the room its box has for it."""
    return tuple(
        page.evaluate(
            """(selector) => {
              const el = document.querySelector(selector);
              const style = getComputedStyle(el);
              const ctx = document.createElement("canvas").getContext("2d");
              ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
              const room = el.clientWidth - parseFloat(style.paddingLeft)
                - parseFloat(style.paddingRight);
              return [ctx.measureText(el.placeholder).width, room];
            }""",
            selector,
        )
    )


CONTRAST = """(el) => {
  const rgb = (text) => text.match(/[\\d.]+/g).map(Number);
  const channel = (c) => {
    c /= 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  };
  const luminance = ([r, g, b]) =>
    0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  let box = el;
  let back = null;
  while (box) {
    const [r, g, b, a = 1] = rgb(getComputedStyle(box).backgroundColor);
    if (a > 0) { back = [r, g, b]; break; }
    box = box.parentElement;
  }
  back = back || [255, 255, 255];
  const [l1, l2] = [luminance(rgb(getComputedStyle(el).color)), luminance(back)];
  return (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
}"""


def test_a_long_step_name_does_not_widen_the_instance_page(sized: Page, site: Site) -> None:
    sized.goto(instance_url(site, "billing", "bill-1"))
    expect(sized.locator("[data-testid=restart-from] option")).to_have_count(3)
    width, screen = page_width(sized)
    assert width <= screen, f"the instance page is {width} px wide on a {screen} px screen"


def test_an_unfinished_instance_shows_no_output_card(sized: Page, site: Site) -> None:
    sized.goto(instance_url(site, "approval", "ask-1"))
    expect(sized.locator("[data-testid=status] .badge")).to_have_attribute("data-status", "waiting")
    expect(sized.locator("[data-testid=params]")).to_be_visible()
    expect(sized.locator("[data-testid=output]")).to_have_count(0)
    expect(sized.locator("section.card h3", has_text="Output")).to_have_count(0)


def test_the_send_event_field_shows_its_whole_hint(sized: Page, site: Site) -> None:
    sized.goto(instance_url(site, "approval", "ask-1"))
    hint = sized.locator("[data-testid=event-hint]")
    expect(hint).to_have_text('It waits for an event of type "approve-the-quarterly-report".')
    text, room = placeholder_fits(sized, "[data-testid=event-type]")
    assert text <= room, f"the placeholder needs {text:.0f} px, the field has {room:.0f}"
    assert cut_text(sized, "[data-testid=event-hint]") == []
    width, screen = page_width(sized)
    assert width <= screen


def test_status_tiles_show_whole_names(sized: Page, site: Site) -> None:
    sized.goto(f"{site.url}/#/workflows")
    expect(sized.locator("[data-testid=count-terminated]").first).to_have_text("1")
    assert cut_text(sized, ".counts .label") == []


def test_the_live_worker_badge_is_readable(sized: Page, site: Site) -> None:
    sized.goto(f"{site.url}/#/workflows")
    live = sized.locator("[data-testid=worker-row][data-live=true] [data-testid=worker-state]")
    expect(live).to_have_text("● live")
    contrast = live.evaluate(CONTRAST)
    assert contrast >= 4.5, f"'live' has a contrast of {contrast:.2f}:1"


def test_the_instances_list_shows_a_retrying_instance_as_retrying(sized: Page, site: Site) -> None:
    sized.goto(f"{site.url}/#/instances")
    row = sized.locator("[data-testid=instance-row][data-id=bill-1]")
    expect(row.locator(".badge")).to_have_text("retrying")
    expect(row.locator("[data-testid=retry]")).to_contain_text(
        "charge-1: attempt 1 failed, ValueError: card declined by the issuing bank on attempt 1"
    )
    expect(row.locator("[data-testid=retry]")).to_contain_text("next in")
    waiting = sized.locator("[data-testid=instance-row][data-id=ask-1]")
    expect(waiting.locator(".badge")).to_have_text("waiting")
    expect(waiting.locator("[data-testid=retry]")).to_have_count(0)
    width, screen = page_width(sized)
    assert width <= screen
