# ruff: noqa: F811  (the imported fixtures are parameters of the tests)
"""The dashboard under tokens with roles, in headless Chromium: it learns the token's role from
/api/whoami and hides what the role cannot do (read: no controls, no trigger form, no schedule
buttons; operate: controls but no delete and no schedule buttons; admin: everything), and the
schedules panel tells code-declared schedules from those made at run time (and deletes these).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from stepline import Engine, Schedule, Workflow, WorkflowEvent, WorkflowStep
from stepline.access import Role, Token, digest
from stepline.http import create_app

from .._http_server import ServerThread
from .test_dashboard import TIMEOUT, browser, playwright  # noqa: F401  (fixtures)


class Nightly(Workflow):
    name = "nightly"
    schedules = (Schedule("0 3 * * *", name="nightly-code"),)

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("stamp", lambda: event.instance_id)


SECRETS: dict[Role, str] = {"read": "r-token", "operate": "o-token", "admin": "a-token"}
TOKENS = [Token(f"{role}-user", role, digest(secret)) for role, secret in SECRETS.items()]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("dashboard-roles") / "stepline.db"
    engine = Engine(f"sqlite:///{db}", [Nightly], worker=True, poll_interval=0.05, grace_period=1)
    with ServerThread(create_app(engine, tokens=TOKENS, manage_engine=True)) as server:
        admin = {"Authorization": f"Bearer {SECRETS['admin']}"}
        made = httpx.post(
            f"{server.url}/api/schedules",
            json={"name": "nightly-api", "workflow": "nightly", "cron": "0 4 * * *"},
            headers=admin,
            timeout=10,
        )
        assert made.status_code == 201, made.text
        created = httpx.post(
            f"{server.url}/api/workflows/nightly/instances",
            json={"id": "one"},
            headers=admin,
            timeout=10,
        )
        assert created.status_code == 201, created.text
        yield server.url


def as_role(browser: Browser, role: Role) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    # The token as the dialog would have saved it, before the page's scripts run.
    context.add_init_script(f"sessionStorage.setItem('stepline.token', '{SECRETS[role]}')")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT)
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


@pytest.mark.parametrize("role", ["read", "operate", "admin"])
def test_the_dashboard_hides_what_the_role_cannot_do(
    browser: Browser, site: str, role: Role
) -> None:
    for page in as_role(browser, role):
        page.goto(f"{site}/#/workflows")
        expect(page.locator("body")).to_have_attribute("data-role", role)
        expect(page.locator("[data-testid=role]")).to_have_text(f"{role}-user · {role}")
        rows = page.locator("[data-testid=schedule-row]")
        expect(rows).to_have_count(2)
        api_row = rows.and_(page.locator("[data-source=api]"))
        expect(api_row.locator("[data-testid=schedule-source]")).to_have_text("api")
        code_row = rows.and_(page.locator("[data-source=code]"))
        expect(code_row.locator("[data-testid=schedule-source]")).to_have_text("code")
        expect(code_row.locator("[data-testid=schedule-delete]")).to_have_count(0)
        admin = role == "admin"
        for button in ("schedule-pause", "schedule-trigger"):
            shown = expect(code_row.locator(f"[data-testid={button}]"))
            shown.to_be_visible() if admin else shown.to_be_hidden()
        delete = expect(api_row.locator("[data-testid=schedule-delete]"))
        delete.to_be_visible() if admin else delete.to_be_hidden()
        new = expect(page.locator("[data-testid=new-schedule]"))
        new.to_be_visible() if admin else new.to_be_hidden()
        trigger = expect(page.locator("details.trigger-box"))
        trigger.to_be_hidden() if role == "read" else trigger.to_be_visible()

        page.goto(f"{site}/#/workflows/nightly/instances/one")
        status = page.locator("[data-testid=status] .badge")
        expect(status).to_have_attribute("data-status", "complete")
        controls = expect(page.locator("[data-testid=controls]"))
        controls.to_be_hidden() if role == "read" else controls.to_be_visible()
        remove = expect(page.locator("[data-testid=delete]"))
        remove.to_be_visible() if admin else remove.to_be_hidden()


def test_an_admin_deletes_a_run_time_schedule_from_the_panel(browser: Browser, site: str) -> None:
    for page in as_role(browser, "admin"):
        page.goto(f"{site}/#/workflows")
        row = page.locator("[data-testid=schedule-row][data-name=nightly-api]")
        row.locator("[data-testid=schedule-delete]").click()
        expect(row).to_have_count(0)
        expect(page.locator("[data-testid=schedule-row]")).to_have_count(1)
        admin = {"Authorization": f"Bearer {SECRETS['admin']}"}
        resp = httpx.get(f"{site}/api/schedules/nightly-api", headers=admin, timeout=10)
        assert resp.status_code == 404


def test_an_admin_creates_a_schedule_from_the_panel(browser: Browser, site: str) -> None:
    for page in as_role(browser, "admin"):
        page.goto(f"{site}/#/workflows")
        page.locator("[data-testid=new-schedule] summary").click()
        page.locator("[data-testid=new-schedule-name]").fill("from-the-panel")
        page.locator("[data-testid=new-schedule-workflow]").fill("nightly")
        page.locator("[data-testid=new-schedule-cron]").fill("0 5 * *")
        page.locator("[data-testid=new-schedule-create]").click()
        error = page.locator("[data-testid=new-schedule-error]")
        expect(error).to_contain_text("invalid cron expression '0 5 * *'")
        page.locator("[data-testid=new-schedule-cron]").fill("0 5 * * *")
        page.locator("[data-testid=new-schedule-timezone]").fill("Europe/Paris")
        page.locator("[data-testid=new-schedule-create]").click()
        row = page.locator("[data-testid=schedule-row][data-name=from-the-panel]")
        expect(row).to_have_attribute("data-source", "api")
        expect(row).to_contain_text("0 5 * * * · Europe/Paris")
        expect(error).to_be_empty()
