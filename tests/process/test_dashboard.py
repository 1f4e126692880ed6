"""The web dashboard in headless Chromium, against a real server with an in-process worker.

Chromium is Debian's (``apt-get install chromium``), driven by the ``playwright`` package with
``executable_path``; nothing is downloaded. Screenshots of the three pages are saved under the
pytest temporary directory (``screenshots*``) as test artifacts.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Dialog,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from stepline import Dag, Engine, NonRetryableError, WorkflowEvent, WorkflowStep, workflow
from stepline.http import create_app

from .._http_server import ServerThread

CHROMIUM = os.environ.get("STEPLINE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STATIC = Path(__file__).parents[2] / "src" / "stepline" / "http" / "static"
TIMEOUT = 20_000  # ms, for things that wait on the worker
expect.set_options(timeout=TIMEOUT)


@workflow(name="quick")
async def quick(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Fetches, naps briefly, sums."""
    rows = await step.do("fetch", lambda: {"rows": 3})
    await step.sleep("pause", 0.3)
    total = await step.do("sum", lambda: rows["rows"] * 2)
    return {"total": total, "echo": event.params}


@workflow(name="napper")
async def napper(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("before", lambda: "a")
    await step.sleep("nap", 0.6)
    await step.do("after", lambda: "b")
    return "rested"


@workflow(name="approval")
async def approval(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Waits for a person to approve."""
    await step.do("prepare", lambda: "ready")
    decision = await step.wait_for_event("decision", type="approve", timeout="1 hour")
    return {"approved": decision.payload}


def _fail_with_markup() -> None:
    raise NonRetryableError("<b>bold</b><script>alert(3)</script>")


@workflow(name="broken")
async def broken(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("explode", _fail_with_markup)


ATTEMPTS: dict[str, int] = {}


def _flaky(ctx: Mapping[str, Any]) -> dict[str, Any]:
    ATTEMPTS["enrich"] = ATTEMPTS.get("enrich", 0) + 1
    if ATTEMPTS["enrich"] % 3:
        raise RuntimeError("enrichment service returned 503")
    return {"enriched": True}


etl = Dag("etl", doc="Extract, clean and enrich in parallel, then load.")
etl.add_step(lambda ctx: {"rows": 10}, name="extract")
etl.add_step(lambda ctx: {"clean": ctx["rows"] - 1}, name="clean", depends_on=["extract"])
etl.add_step(
    _flaky,
    name="enrich",
    depends_on=["extract"],
    retries={"limit": 5, "delay": 0.2, "backoff": "constant"},
)
etl.add_step(lambda ctx: {"loaded": ctx["clean"]}, name="load", depends_on=["clean", "enrich"])


@workflow(name="decorated")
async def decorated(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Steps declared as functions, their dependencies by parameter name."""

    @step.do()
    async def fetch() -> int:
        return 2

    @step.do("double")
    async def doubled(fetch: int) -> int:
        return fetch * 2

    @step.do(concurrent=True)
    async def report(fetch: int, double: int) -> str:
        return f"{fetch} -> {double}"

    return await report()


WORKFLOWS = [quick, napper, approval, broken, etl, decorated]


@dataclass
class Site:
    url: str
    token: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def post(self, path: str, body: Any = None) -> Any:
        resp = httpx.post(self.url + path, json=body, headers=self.headers, timeout=10)
        assert resp.status_code < 300, resp.text
        return resp.json()

    def status(self, workflow: str, instance_id: str) -> str:
        resp = httpx.get(
            f"{self.url}/api/workflows/{workflow}/instances/{instance_id}",
            headers=self.headers,
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        return str(resp.json()["workflow"]["status"])

    def wait_status(self, workflow: str, instance_id: str, *statuses: str) -> str:
        deadline = time.monotonic() + TIMEOUT / 1000
        while True:
            status = self.status(workflow, instance_id)
            if status in statuses:
                return status
            assert time.monotonic() < deadline, f"{instance_id} is still {status}"
            time.sleep(0.05)


def _serve(db: Path, token: str | None) -> ServerThread:
    engine = Engine(f"sqlite:///{db}", WORKFLOWS, worker=True, poll_interval=0.05, grace_period=1)
    return ServerThread(create_app(engine, token=token, manage_engine=True, stream_interval=0.2))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with _serve(tmp_path_factory.mktemp("dashboard") / "stepline.db", None) as server:
        yield Site(server.url)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}: the dashboard tests need Debian's "
            "chromium package ('apt-get install -y chromium'), or STEPLINE_CHROMIUM pointing "
            "at a Chromium binary",
            pytrace=False,
        )
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@dataclass
class Watch:
    """What a page did that it should not: script errors, dialogs, requests to other hosts."""

    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def page(browser: Browser, site: Site, watch: Watch) -> Iterator[Page]:
    yield from _watched_page(browser, watch, viewport={"width": 1280, "height": 900})


PHONE = {"width": 390, "height": 844}  # an iPhone 12-15 viewport, in CSS pixels


@pytest.fixture
def phone(browser: Browser, site: Site, watch: Watch) -> Iterator[Page]:
    """A page the size of a phone, with touch (its meta viewport applies, as on a phone)."""
    yield from _watched_page(browser, watch, viewport=PHONE, is_mobile=True, has_touch=True)


def _watched_page(browser: Browser, watch: Watch, **options: Any) -> Iterator[Page]:
    context = browser.new_context(**options)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT)

    def on_console(message: ConsoleMessage) -> None:
        # Chromium logs every 4xx answer; the dashboard shows those to the user on purpose.
        expected = re.match(r"Failed to load resource: .* status of 4\d\d", message.text)
        if message.type == "error" and not expected:
            watch.errors.append(message.text)

    def on_dialog(dialog: Dialog) -> None:
        watch.dialogs.append(f"{dialog.type}: {dialog.message}")
        if dialog.type == "confirm":
            dialog.accept()
        else:
            dialog.dismiss()

    def on_request(request: Any) -> None:
        if not request.url.startswith(("http://127.0.0.1", "data:", "about:")):
            watch.foreign.append(request.url)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: watch.errors.append(str(exc)))
    page.on("dialog", on_dialog)
    page.on("request", on_request)
    yield page
    context.close()
    assert watch.errors == [], "the page logged errors"
    assert watch.foreign == [], "the dashboard must not load anything from other hosts"


def instance_url(site: Site, workflow: str, instance_id: str) -> str:
    return f"{site.url}/#/workflows/{workflow}/instances/{instance_id}"


def status_badge(page: Page) -> Any:
    return page.locator("[data-testid=status] .badge")


# -- the brief's scenarios ---------------------------------------------------------------------


def test_trigger_from_the_form_and_watch_it_complete(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/#/workflows")
    card = page.locator("[data-testid=workflow-quick]")
    card.locator("summary", has_text="Trigger an instance").click()
    card.locator("[data-testid=trigger-params]").fill('{"customer": "Ada"}')
    card.locator("[data-testid=trigger-id]").fill("from-form")
    page.evaluate("window.__noReload = true")
    card.locator("[data-testid=trigger]").click()
    expect(page).to_have_url(re.compile(r"#/workflows/quick/instances/from-form$"))
    expect(status_badge(page)).to_have_attribute("data-status", "complete")
    assert page.evaluate("window.__noReload") is True  # updated live, never reloaded
    expect(page.locator("[data-testid=output]")).to_contain_text('"total": 6')
    expect(page.locator("[data-testid=params]")).to_contain_text('"customer": "Ada"')
    rows = page.locator("[data-testid=step-row]")
    expect(rows).to_have_count(3)
    expect(page.locator("[data-testid=timeline-row]")).to_have_count(3)
    assert site.status("quick", "from-form") == "complete"


def test_a_finished_instance_shows_when_retention_deletes_it(page: Page, site: Site) -> None:
    body = {"id": "kept-a-day", "params": {"customer": "Ada"}, "retention": {"complete": "1 day"}}
    site.post("/api/workflows/quick/instances", body)
    site.wait_status("quick", "kept-a-day", "complete")
    page.goto(f"{site.url}/#/workflows/quick/instances/kept-a-day")
    expect(page.locator(".fact", has_text="Deleted")).to_have_count(1)


def test_trigger_form_reports_bad_json_and_duplicate_ids(page: Page, site: Site) -> None:
    site.post("/api/workflows/quick/instances", {"id": "taken"})
    page.goto(f"{site.url}/#/workflows")
    card = page.locator("[data-testid=workflow-quick]")
    card.locator("summary", has_text="Trigger an instance").click()
    card.locator("[data-testid=trigger-params]").fill("{not json")
    card.locator("[data-testid=trigger]").click()
    expect(card.locator(".form-error")).to_contain_text("not valid JSON")
    card.locator("[data-testid=trigger-params]").fill("{}")
    card.locator("[data-testid=trigger-id]").fill("taken")
    card.locator("[data-testid=trigger]").click()
    expect(card.locator(".form-error")).to_contain_text("already has an instance 'taken'")
    expect(page).to_have_url(re.compile(r"#/workflows$"))


def test_trigger_form_sends_params_as_typed(page: Page, site: Site) -> None:
    """An integer past 2**53 would be rounded by a JS number: the form sends the text."""
    page.goto(f"{site.url}/#/workflows")
    card = page.locator("[data-testid=workflow-quick]")
    card.locator("summary", has_text="Trigger an instance").click()
    card.locator("[data-testid=trigger-params]").fill('{"n": 9007199254740993, "s": "a\\"b"}')
    card.locator("[data-testid=trigger-id]").fill("exact")
    card.locator("[data-testid=trigger]").click()
    expect(page).to_have_url(re.compile(r"#/workflows/quick/instances/exact$"))
    resp = httpx.get(f"{site.url}/api/workflows/quick/instances/exact", headers=site.headers)
    assert resp.json()["workflow"]["params"] == {"n": 2**53 + 1, "s": 'a"b'}


def test_pause_and_resume(page: Page, site: Site) -> None:
    site.post("/api/workflows/approval/instances", {"id": "pause-me"})
    page.goto(instance_url(site, "approval", "pause-me"))
    expect(status_badge(page)).to_have_attribute("data-status", "waiting")
    page.locator("[data-testid=pause]").click()
    expect(status_badge(page)).to_have_attribute("data-status", "paused")
    expect(page.locator("[data-testid=resume]")).to_be_enabled()
    expect(page.locator("[data-testid=pause]")).to_be_disabled()
    # An event sent while paused is kept, but a paused instance does not run.
    site.post("/api/workflows/approval/instances/pause-me/events/approve", "while paused")
    time.sleep(0.5)
    assert site.status("approval", "pause-me") == "paused"
    expect(status_badge(page)).to_have_attribute("data-status", "paused")
    page.locator("[data-testid=resume]").click()
    expect(status_badge(page)).to_have_attribute("data-status", "complete")
    expect(page.locator("[data-testid=output]")).to_contain_text("while paused")


def test_send_an_event_that_a_waiting_instance_receives(page: Page, site: Site) -> None:
    site.post("/api/workflows/approval/instances", {"id": "order-7"})
    page.goto(instance_url(site, "approval", "order-7"))
    expect(status_badge(page)).to_have_attribute("data-status", "waiting")
    expect(page.locator("[data-testid=timeline-row][data-step=decision-1]")).to_be_visible()
    page.locator("[data-testid=event-type]").fill("approve")
    page.locator("[data-testid=event-payload]").fill('{"by": "Grace"}')
    page.locator("[data-testid=send-event]").click()
    expect(status_badge(page)).to_have_attribute("data-status", "complete")
    expect(page.locator("[data-testid=output]")).to_contain_text('"by": "Grace"')
    expect(page.locator("[data-testid=send-event]")).to_be_disabled()


def test_user_data_is_shown_as_text(page: Page, site: Site, watch: Watch) -> None:
    params = {"html": "<script>alert(1)</script>", "img": "<img src=x onerror=alert(2)>"}
    site.post("/api/workflows/quick/instances", {"id": "xss", "params": params})
    site.post("/api/workflows/broken/instances", {"id": "xss-error"})
    site.wait_status("quick", "xss", "complete")
    site.wait_status("broken", "xss-error", "errored")

    page.goto(instance_url(site, "quick", "xss"))
    expect(page.locator("[data-testid=params]")).to_contain_text("<script>alert(1)</script>")
    expect(page.locator("[data-testid=params]")).to_contain_text("<img src=x onerror=alert(2)>")
    expect(page.locator("[data-testid=output]")).to_contain_text("<script>alert(1)</script>")
    page.locator("[data-testid=step-row][data-step=sum-1] summary").click()

    page.goto(instance_url(site, "broken", "xss-error"))
    expect(page.locator("[data-testid=error]")).to_contain_text(
        "<b>bold</b><script>alert(3)</script>"
    )
    page.goto(f"{site.url}/#/instances?workflow=broken")
    expect(page.locator("[data-testid=instance-row][data-id=xss-error]")).to_contain_text(
        "<b>bold</b>"
    )
    page.goto(f"{site.url}/#/workflows")
    expect(page.locator("[data-testid=workflow-quick]")).to_be_visible()
    for selector in ("#view script", "#view img", "#view b"):
        assert page.locator(selector).count() == 0, selector
    assert watch.dialogs == []  # no alert() ever ran


# -- more of the dashboard ---------------------------------------------------------------------


def test_instances_page_filters_pages_searches_and_refreshes(page: Page, site: Site) -> None:
    site.post("/api/workflows/napper/instances/batch", [{"id": f"many-{n:02d}"} for n in range(30)])
    page.goto(f"{site.url}/#/instances?workflow=napper")
    rows = page.locator("[data-testid=instance-row]")
    expect(rows).to_have_count(25)
    expect(rows.first).to_have_attribute("data-id", re.compile(r"many-29|nap-"))
    page.locator("[data-testid=older]").click()
    expect(page.locator("[data-testid=page-info]")).to_contain_text("Page 2")
    expect(rows.first).to_be_visible()
    on_page_two = rows.count()
    assert 5 <= on_page_two <= 25
    page.locator("[data-testid=newer]").click()
    expect(page.locator("[data-testid=page-info]")).to_contain_text("Page 1")
    # Filter by status: the paused one from test_pause_and_resume is complete by now.
    page.locator("[data-testid=filter-status]").select_option("terminated")
    expect(page.locator("td.empty")).to_contain_text("No instances match")
    page.locator("[data-testid=filter-status]").select_option("")
    page.locator("[data-testid=filter-workflow]").select_option("approval")
    expect(rows.first).to_be_visible()
    # Auto-refresh: a new instance appears without reloading.
    site.post("/api/workflows/approval/instances", {"id": "fresh-one"})
    expect(page.locator("[data-testid=instance-row][data-id=fresh-one]")).to_be_visible()
    # Search by id jumps to the instance.
    page.locator("[data-testid=filter-workflow]").select_option("")
    page.locator("[data-testid=search-id]").fill("many-07")
    page.locator("[data-testid=search-id]").press("Enter")
    expect(page).to_have_url(re.compile(r"#/workflows/napper/instances/many-07$"))


def test_instances_page_filters_by_a_filter_expression(page: Page, site: Site) -> None:
    site.post("/api/workflows/approval/instances", {"id": "tagged-1", "tags": {"team": "ops"}})
    site.post("/api/workflows/approval/instances", {"id": "tagged-2", "tags": {"team": "dev"}})
    page.goto(f"{site.url}/#/instances")
    page.locator("[data-testid=filter-where]").fill("team = 'ops'")
    page.locator("[data-testid=filter-where]").press("Enter")
    rows = page.locator("[data-testid=instance-row]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", "tagged-1")
    expect(page).to_have_url(re.compile(r"where=team"))


def test_terminate_with_rollback_and_restart_from_a_step(page: Page, site: Site) -> None:
    site.post("/api/workflows/approval/instances", {"id": "stop-me"})
    page.goto(instance_url(site, "approval", "stop-me"))
    expect(status_badge(page)).to_have_attribute("data-status", "waiting")
    page.locator("[data-testid=rollback]").check()
    page.locator("[data-testid=terminate]").click()
    expect(status_badge(page)).to_have_attribute("data-status", "terminated")
    expect(page.locator("[data-testid=terminate]")).to_be_disabled()

    site.post("/api/workflows/quick/instances", {"id": "again"})
    page.goto(instance_url(site, "quick", "again"))
    expect(status_badge(page)).to_have_attribute("data-status", "complete")
    first = page.locator("[data-testid=step-row][data-step=fetch-1] td").nth(5).inner_text()
    page.locator("[data-testid=restart-from]").select_option(label="from sum-1")
    page.locator("[data-testid=restart]").click()
    expect(status_badge(page)).to_have_attribute("data-status", "complete")
    expect(page.locator("[data-testid=step-row]")).to_have_count(3)
    assert page.locator("[data-testid=step-row][data-step=fetch-1] td").nth(5).inner_text() == first


def test_dag_graph_nodes_coloured_by_state(page: Page, site: Site) -> None:
    site.post("/api/workflows/etl/instances", {"id": "etl-1", "params": {"day": "monday"}})
    page.goto(instance_url(site, "etl", "etl-1"))
    expect(status_badge(page)).to_have_attribute("data-status", "complete")
    graph = page.locator("[data-testid=dag]")
    for name in ("extract", "clean", "enrich", "load"):
        expect(graph.locator(f"[data-node={name}]")).to_have_attribute("data-state", "complete")
    # The retried step shows its failed attempts in the table and the timeline.
    expect(page.locator("[data-testid=step-row][data-step=enrich-1]")).to_contain_text("failed")
    enrich = page.locator("[data-testid=timeline-row][data-step=enrich-1]")
    expect(enrich.locator("[data-kind=failed]")).to_have_count(2)
    expect(enrich.locator("[data-kind=delay]")).to_have_count(2)
    expect(enrich.locator("[data-kind=ok]")).to_have_count(1)
    assert axis_labels_apart(page) == 5  # a desktop-wide axis has room for all its labels


def test_decorated_steps_are_drawn_as_a_graph_like_a_dags(page: Page, site: Site) -> None:
    site.post("/api/workflows/decorated/instances", {"id": "dec-1"})
    page.goto(instance_url(site, "decorated", "dec-1"))
    expect(status_badge(page)).to_have_attribute("data-status", "complete")
    graph = page.locator("[data-testid=dag]")
    for name in ("fetch", "double", "report"):
        expect(graph.locator(f"[data-node={name}]")).to_have_attribute("data-state", "complete")
    expect(page.locator("[data-testid=step-row]")).to_have_count(3)


def test_token_dialog_enter_saves_and_cancel_explains(browser: Browser, tmp_path: Path) -> None:
    with _serve(tmp_path / "secured.db", "let-me-in") as server:
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(TIMEOUT)
        page.goto(f"{server.url}/#/workflows")
        dialog = page.locator("#token-dialog")
        field = page.locator("[data-testid=token-input]")
        expect(dialog).to_be_visible()
        # Cancel leaves a page that says what is missing, with a way back to the prompt.
        page.locator("[data-testid=token-cancel]").click()
        expect(dialog).to_be_hidden()
        needed = page.locator("[data-testid=token-needed]")
        expect(needed).to_contain_text("needs an API token")
        needed.locator("button").click()
        expect(dialog).to_be_visible()
        field.fill("wrong")
        page.locator("[data-testid=token-save]").click()
        expect(dialog).to_contain_text("refused")
        # Escape cancels too, whatever was typed.
        field.fill("let-me-in")
        field.press("Escape")
        expect(needed).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('stepline.token')") == "wrong"
        needed.locator("button").click()
        expect(dialog).to_contain_text("refused")
        # Enter in the field saves (it must not press Cancel, the form's other button).
        field.fill("let-me-in")
        field.press("Enter")
        expect(page.locator("[data-testid=workflow-quick]")).to_be_visible()
        expect(dialog).to_be_hidden()
        assert page.evaluate("sessionStorage.getItem('stepline.token')") == "let-me-in"
        page.reload()
        expect(page.locator("[data-testid=workflow-quick]")).to_be_visible()
        expect(dialog).to_be_hidden()
        context.close()


def axis_labels_apart(page: Page) -> int:
    """Assert that the timeline's axis labels lie inside the axis, at least 4 px apart, the
    first and the last one shown; return how many are shown."""
    boxes = page.evaluate(
        """() => {
          const axis = document.querySelector("[data-testid=timeline] .tl-axis");
          const a = axis.getBoundingClientRect();
          const shown = [...axis.querySelectorAll(".tick")]
            .filter((t) => t.getClientRects().length);
          return {axis: [a.left, a.right], ticks: shown.map((t) => {
            const r = t.getBoundingClientRect();
            return {text: t.textContent, left: r.left, right: r.right, top: r.top,
              bottom: r.bottom};
          })};
        }"""
    )
    ticks = boxes["ticks"]
    left, right = boxes["axis"]
    assert len(ticks) >= 2, boxes
    assert ticks[0]["text"] == "+0 ms", boxes  # the start and the end are always labelled
    assert ticks[-1]["right"] == pytest.approx(right, abs=1), boxes
    for tick in ticks:
        assert left - 0.5 <= tick["left"] and tick["right"] <= right + 0.5, (tick, boxes["axis"])
    for i, a in enumerate(ticks):
        for b in ticks[i + 1 :]:
            apart_x = a["right"] + 4 <= b["left"] or b["right"] + 4 <= a["left"]
            apart_y = a["bottom"] <= b["top"] or b["bottom"] <= a["top"]
            assert apart_x or apart_y, f"axis labels overlap: {a} and {b}"
    return len(ticks)


TAP_TARGETS = (
    "button, select, textarea, input:not([type=checkbox]), summary, label.check, label.toggle, "
    ".topbar a, a.button"
)


def small_tap_targets(page: Page, least: int = 44) -> list[str]:
    """The visible controls smaller than ``least`` CSS pixels either way (44 is Apple's minimum
    for a touch target; checkboxes count by their label, which is what a finger hits)."""
    return list(
        page.evaluate(
            """([selector, least]) => [...document.querySelectorAll(selector)]
              .filter((el) => el.getClientRects().length)
              .map((el) => [el, el.getBoundingClientRect()])
              .filter(([, r]) => r.width < least || r.height < least)
              .map(([el, r]) => `${el.dataset.testid || el.tagName} "${el.textContent.trim()
                .slice(0, 24)}" ${Math.round(r.width)}x${Math.round(r.height)}`)""",
            [TAP_TARGETS, least],
        )
    )


def cut_off(page: Page) -> list[str]:
    """Tables and graphs wider than the box that clips them, where that box does not scroll
    (so part of them cannot be reached)."""
    return list(
        page.evaluate(
            """() => [...document.querySelectorAll("#view table, #view svg.dag")].flatMap((el) => {
              let box = el.parentElement;
              while (box && getComputedStyle(box).overflowX === "visible") box = box.parentElement;
              if (!box || el.getBoundingClientRect().width <= box.clientWidth + 0.5) return [];
              const scrolls = ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
              return scrolls ? [] : [`${el.dataset.testid || el.tagName} in ${box.className}`];
            })"""
        )
    )


def test_on_a_phone_every_page_fits_and_stays_usable(
    phone: Page, site: Site, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("screenshots-phone")
    long_params = {"customer": "a-customer-with-a-rather-long-name-" * 3, "total": 99}
    site.post("/api/workflows/etl/instances", {"id": "etl-phone", "params": long_params})
    site.post("/api/workflows/approval/instances", {"id": "order-phone", "params": long_params})
    site.wait_status("etl", "etl-phone", "complete")
    site.wait_status("approval", "order-phone", "waiting")
    pages = [
        ("workflows", "#/workflows", "[data-testid=workflow-etl]"),
        ("instances", "#/instances", "[data-testid=instance-row]"),
        ("instance-dag", "#/workflows/etl/instances/etl-phone", "[data-testid=dag]"),
        ("instance-wait", "#/workflows/approval/instances/order-phone", "[data-testid=event-type]"),
    ]
    # 390 px is an iPhone 12-15; 320 px the narrowest phones still in use.
    for width in (PHONE["width"], 320):
        phone.set_viewport_size({"width": width, "height": PHONE["height"]})
        for name, route, ready in pages:
            phone.goto(f"{site.url}/{route}")
            expect(phone.locator(ready).first).to_be_visible()
            if name.startswith("instance-"):
                expect(phone.locator("[data-testid=step-row]").first).to_be_visible()
            phone.screenshot(path=out / f"{name}-{width}.png", full_page=True)
            wide = phone.evaluate("document.documentElement.scrollWidth")
            assert wide <= width, f"the {name} page is {wide} px wide on a {width} px phone"
            assert cut_off(phone) == [], (name, width)
            assert small_tap_targets(phone) == [], (name, width)
            if name.startswith("instance-"):
                assert axis_labels_apart(phone) == 3  # fewer than on a wider screen, below
    # Turned sideways the same page lays out again, and its axis shows all its labels.
    phone.set_viewport_size({"width": PHONE["height"], "height": PHONE["width"]})
    phone.screenshot(path=out / "instance-wait-landscape.png", full_page=True)
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["height"]
    assert axis_labels_apart(phone) == 5
    print(f"screenshots in {out}")


def test_screenshots_of_the_three_pages(
    page: Page, site: Site, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("screenshots")
    site.post("/api/workflows/etl/instances", {"id": "etl-shot", "params": {"day": "tuesday"}})
    site.post("/api/workflows/approval/instances", {"id": "order-42", "params": {"total": 99}})
    site.wait_status("etl", "etl-shot", "complete")
    site.wait_status("approval", "order-42", "waiting")

    page.goto(f"{site.url}/#/workflows")
    expect(page.locator("[data-testid=workflow-etl]")).to_be_visible()
    page.screenshot(path=out / "workflows.png", full_page=True)

    page.goto(f"{site.url}/#/instances")
    expect(page.locator("[data-testid=instance-row]").first).to_be_visible()
    page.screenshot(path=out / "instances.png", full_page=True)

    page.goto(instance_url(site, "etl", "etl-shot"))
    expect(page.locator("[data-testid=dag]")).to_be_visible()
    page.screenshot(path=out / "instance.png", full_page=True)

    page.goto(instance_url(site, "approval", "order-42"))
    expect(status_badge(page)).to_have_attribute("data-status", "waiting")
    page.screenshot(path=out / "instance-waiting.png", full_page=True)

    for name in ("workflows", "instances", "instance", "instance-waiting"):
        assert (out / f"{name}.png").stat().st_size > 10_000
    print(f"screenshots in {out}")


# -- offline: everything the dashboard loads is served by stepline -----------------------------


def test_assets_are_local_and_never_use_inner_html(site: Site) -> None:
    files = sorted(p for p in STATIC.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"index.html", "style.css", "app.js", "favicon.svg"}
    for path in files:
        text = path.read_text()
        urls = re.findall(r"https?://[^\s\"')]+", text)
        assert all(url == "http://www.w3.org/2000/svg" for url in urls), (path, urls)
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert banned not in text, f"{path.name} uses {banned}"
        served = httpx.get(f"{site.url}/{path.relative_to(STATIC).as_posix()}", timeout=10)
        assert served.status_code == 200 and served.content == path.read_bytes()
