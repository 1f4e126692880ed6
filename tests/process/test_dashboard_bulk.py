# ruff: noqa: F811  (the imported fixtures are parameters of the tests)
"""The dashboard's bulk jobs in headless Chromium: from the instances page's filter a dry run
(count and first instances) then a start that opens the job's page and runs to the end; the
list with each job's progress; cancelling a running job; a job's Cancel and the bulk panel
hidden from `read` and `operate` tokens (the API needs `admin`); and the pages on a 390 px phone.

Two servers: one with an in-process worker (jobs run to the end), one without a worker and with
tokens (a job stays running at 0 done, so Cancel and the roles can be seen).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.access import Role, Token, digest
from stepline.http import create_app

from .._http_server import ServerThread
from .test_dashboard import (  # noqa: F401  (fixtures)
    PHONE,
    TIMEOUT,
    Site,
    _watched_page,
    browser,
    cut_off,
    page,
    playwright,
    small_tap_targets,
    watch,
)


@workflow(name="held")
async def held(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Waits for a go-ahead, so a bulk terminate finds it unfinished."""
    await step.do("prepare", lambda: "ready")
    return (await step.wait_for_event("go", type="go", timeout="1 hour")).payload


SECRETS: dict[Role, str] = {"read": "r-token", "operate": "o-token", "admin": "a-token"}
TOKENS = [Token(f"{role}-user", role, digest(secret)) for role, secret in SECRETS.items()]
SPRING, AUTUMN, MISSPELT = (
    quote(f) for f in ("campaign = 'spring'", "campaign = 'autumn'", "stauts = 1")
)
ADMIN = {"Authorization": f"Bearer {SECRETS['admin']}"}


def _create(url: str, items: list[dict[str, Any]], headers: dict[str, str]) -> None:
    resp = httpx.post(
        f"{url}/api/workflows/held/instances/batch", json=items, headers=headers, timeout=10
    )
    assert resp.status_code < 300, resp.text


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    db = tmp_path_factory.mktemp("dashboard-bulk") / "stepline.db"
    engine = Engine(f"sqlite:///{db}", [held], worker=True, poll_interval=0.05, grace_period=1)
    with ServerThread(create_app(engine, manage_engine=True)) as server:
        spring = [{"id": f"s{n}", "tags": {"campaign": "spring"}} for n in range(3)]
        _create(server.url, [*spring, {"id": "other", "tags": {"campaign": "autumn"}}], {})
        yield Site(server.url)


@pytest.fixture(scope="module")
def idle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A server without a worker: its job stays running. Yields the URL and the job's id."""
    db = tmp_path_factory.mktemp("dashboard-bulk-idle") / "stepline.db"
    engine = Engine(f"sqlite:///{db}", [held], worker=False)
    with ServerThread(create_app(engine, tokens=TOKENS, manage_engine=True)) as server:
        _create(server.url, [{"id": "q1"}, {"id": "q2"}], ADMIN)
        resp = httpx.post(
            f"{server.url}/api/bulk",
            json={"action": "terminate", "workflow": "held"},
            headers=ADMIN,
            timeout=10,
        )
        assert resp.status_code == 201, resp.text
        yield server.url, resp.json()["id"]


def as_role(browser: Browser, role: Role, **options: Any) -> Iterator[Page]:
    options.setdefault("viewport", {"width": 1280, "height": 900})
    context = browser.new_context(**options)
    # The token as the dialog would have saved it, before the page's scripts run.
    context.add_init_script(f"sessionStorage.setItem('stepline.token', '{SECRETS[role]}')")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT)
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


def status_of(site: Site, instance_id: str) -> str:
    resp = httpx.get(f"{site.url}/api/workflows/held/instances/{instance_id}", timeout=10)
    return str(resp.json()["workflow"]["status"])


def test_a_dry_run_then_start_from_the_instances_filter(page: Page, site: Site) -> None:
    for instance_id in ("s0", "s1", "s2", "other"):
        site.wait_status("held", instance_id, "waiting")
    page.goto(f"{site.url}/#/instances?where={SPRING}")
    expect(page.locator("[data-testid=instance-row]")).to_have_count(3)
    box = page.locator("[data-testid=bulk-box]")
    box.locator("summary").click()
    box.locator("[data-testid=bulk-action-select]").select_option("terminate")
    expect(box.locator("[data-testid=bulk-from-step]")).to_be_hidden()
    box.locator("[data-testid=bulk-preview]").click()
    expect(box.locator("[data-testid=bulk-count]")).to_have_text(
        "3 instances match: terminate would act on them"
    )
    expect(box.locator("[data-testid=bulk-first]")).to_have_count(3)
    expect(box.locator("[data-testid=bulk-first]").first).to_contain_text("s0")
    assert status_of(site, "s0") == "waiting"  # a dry run changes nothing

    # Another filter drops the preview: Start only ever runs what was previewed.
    page.locator("[data-testid=filter-status]").select_option("waiting")
    expect(box.locator("[data-testid=bulk-start]")).to_have_count(0)
    box.locator("[data-testid=bulk-preview]").click()
    start = box.locator("[data-testid=bulk-start]")
    expect(start).to_have_text("Start: terminate 3 instances")
    expect(box.locator("[data-testid=bulk-count]")).to_be_focused()
    for _ in range(3):  # past the three instances' links: Start, from the keyboard
        page.keyboard.press("Tab")
    expect(box.locator("[data-testid=bulk-first] a").last).to_be_focused()
    page.keyboard.press("Tab")
    expect(start).to_be_focused()
    page.keyboard.press("Enter")

    expect(page).to_have_url(re.compile(r"#/bulk/bulk-[0-9a-f]+$"))
    expect(page.locator("[data-testid=bulk-status]")).to_have_attribute("data-status", "complete")
    expect(page.locator("[data-testid=bulk-figures]")).to_have_text(
        "3 done · 0 skipped · 0 to go · 3 matched"
    )
    expect(page.locator("[data-testid=bulk-job-filter]")).to_have_text(
        "(campaign = 'spring') and status = 'waiting'"
    )
    expect(page.locator("[data-testid=bulk-cancel]")).to_be_hidden()
    assert [status_of(site, i) for i in ("s0", "s1", "s2")] == ["terminated"] * 3
    assert status_of(site, "other") == "waiting"


def test_restart_asks_for_its_step_and_a_bad_filter_is_reported(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/#/instances?where={MISSPELT}")
    box = page.locator("[data-testid=bulk-box]")
    box.locator("summary").click()
    box.locator("[data-testid=bulk-action-select]").select_option("restart")
    expect(box.locator("[data-testid=bulk-from-step]")).to_be_visible()
    box.locator("[data-testid=bulk-from-step]").fill("prepare")
    box.locator("[data-testid=bulk-preview]").click()
    expect(box.locator("[data-testid=bulk-error]")).to_contain_text("stauts")
    expect(box.locator("[data-testid=bulk-start]")).to_have_count(0)

    page.goto(f"{site.url}/#/instances?workflow=held&where={AUTUMN}")
    box.locator("summary").click()
    box.locator("[data-testid=bulk-action-select]").select_option("restart")
    box.locator("[data-testid=bulk-from-step]").fill("prepare")
    box.locator("[data-testid=bulk-preview]").click()
    expect(box.locator("[data-testid=bulk-start]")).to_have_text(
        "Start: restart from prepare 1 instance"
    )


def test_the_list_shows_each_job_and_its_progress(page: Page, site: Site) -> None:
    resp = httpx.post(
        f"{site.url}/api/bulk", json={"action": "pause", "where": "campaign = 'autumn'"}, timeout=10
    )
    assert resp.status_code == 201, resp.text
    job = resp.json()
    page.goto(f"{site.url}/#/bulk")
    expect(page.locator("nav [data-nav=bulk]")).to_have_class(re.compile(r"\bactive\b"))
    row = page.locator(f"[data-testid=bulk-row][data-id={job['id']}]")
    expect(row).to_have_attribute("data-status", "complete")
    expect(row.locator("[data-testid=bulk-action]")).to_have_text("pause")
    expect(row).to_contain_text("campaign = 'autumn'")
    expect(row.locator("[data-testid=bulk-count]")).to_have_text("1/1")
    expect(row.locator("[data-testid=bulk-by]")).to_have_text("—")  # the API is open: no name
    bar = row.locator("[data-testid=bulk-progress]")
    expect(bar).to_have_attribute("aria-valuenow", "1")
    expect(bar).to_have_attribute("aria-valuemax", "1")
    assert bar.locator(".seg.done").evaluate("el => el.style.width") == "100%"
    page.locator("[data-testid=bulk-filter-status]").select_option("running")
    expect(row).to_have_count(0)
    page.locator("[data-testid=bulk-filter-status]").select_option("")
    row.locator("a").click()
    expect(page).to_have_url(re.compile(rf"#/bulk/{job['id']}$"))
    expect(page.locator("[data-testid=bulk-job-action]")).to_have_text("pause")


def test_an_admin_cancels_a_running_job(browser: Browser, idle: tuple[str, str]) -> None:
    url, job_id = idle
    for tab in as_role(browser, "admin"):
        tab.goto(f"{url}/#/bulk")
        row = tab.locator(f"[data-testid=bulk-row][data-id={job_id}]")
        expect(row).to_have_attribute("data-status", "running")
        expect(row.locator("[data-testid=bulk-count]")).to_have_text("0/2")
        expect(row.locator("[data-testid=bulk-by]")).to_have_text("admin-user")
        expect(row.locator("[data-testid=bulk-progress]")).to_have_attribute("aria-valuenow", "0")
        tab.goto(f"{url}/#/bulk/{job_id}")
        expect(tab.locator("[data-testid=bulk-status]")).to_have_attribute("data-status", "running")
        tab.locator("[data-testid=bulk-cancel]").click()
        expect(tab.locator("[data-testid=bulk-status]")).to_have_attribute(
            "data-status", "cancelled"
        )
        expect(tab.locator("[data-testid=bulk-cancel]")).to_be_hidden()
        expect(tab.locator("[data-testid=bulk-job-by]")).to_have_text("admin-user")
        resp = httpx.get(f"{url}/api/bulk/{job_id}", headers=ADMIN, timeout=10)
        assert resp.json()["status"] == "cancelled"


@pytest.mark.parametrize("role", ["read", "operate"])
def test_tokens_below_admin_see_no_bulk_controls(
    browser: Browser, idle: tuple[str, str], role: Role
) -> None:
    url, _ = idle
    resp = httpx.post(
        f"{url}/api/bulk", json={"action": "pause", "workflow": "held"}, headers=ADMIN, timeout=10
    )
    job_id = resp.json()["id"]
    for tab in as_role(browser, role):
        tab.goto(f"{url}/#/bulk/{job_id}")
        expect(tab.locator("body")).to_have_attribute("data-role", role)
        expect(tab.locator("[data-testid=bulk-status]")).to_have_attribute("data-status", "running")
        expect(tab.locator("[data-testid=bulk-cancel]")).to_be_hidden()
        tab.goto(f"{url}/#/instances")
        expect(tab.locator("[data-testid=instance-row]")).to_have_count(2)
        expect(tab.locator("[data-testid=bulk-box]")).to_be_hidden()
    for tab in as_role(browser, "admin"):
        tab.goto(f"{url}/#/bulk/{job_id}")
        expect(tab.locator("[data-testid=bulk-cancel]")).to_be_visible()
        tab.goto(f"{url}/#/instances")
        expect(tab.locator("[data-testid=bulk-box]")).to_be_visible()


def test_the_bulk_pages_fit_a_phone(browser: Any, site: Site, watch: Any, tmp_path: Path) -> None:
    for phone in _watched_page(browser, watch, viewport=PHONE, is_mobile=True, has_touch=True):
        phone.goto(f"{site.url}/#/instances?where={AUTUMN}")
        box = phone.locator("[data-testid=bulk-box]")
        box.locator("summary").click()
        box.locator("[data-testid=bulk-action-select]").select_option("restart")
        box.locator("[data-testid=bulk-preview]").click()
        expect(box.locator("[data-testid=bulk-start]")).to_be_visible()
        pages = {"instances": None, "list": "#/bulk", "job": None}
        for name, hash_ in pages.items():
            if hash_ is not None:
                phone.goto(f"{site.url}/{hash_}")
                expect(phone.locator("[data-testid=bulk-row]").first).to_be_visible()
            if name == "job":
                phone.locator("[data-testid=bulk-row] a").first.click()
                expect(phone.locator("[data-testid=bulk-figures]")).to_be_visible()
            phone.screenshot(path=tmp_path / f"bulk-{name}-390.png", full_page=True)
            wide = phone.evaluate("document.documentElement.scrollWidth")
            assert wide <= PHONE["width"], f"{name}: {wide} px wide on a {PHONE['width']} px phone"
            assert cut_off(phone) == [], name
            assert small_tap_targets(phone) == [], name
