"""The official ``cloudflare`` Python SDK drives ``stepline serve`` unchanged: every Workflows call
the SDK has, against a real server process (docs/cloudflare.md).

The SDK's calls (``cloudflare`` 5.9.0): ``workflows.list/get/update/delete``,
``workflows.instances.create/list/bulk/get/step``, ``.instances.status.edit``,
``.instances.events.create``, ``workflows.versions.list/get/graph``. ``update`` (deploy) and
``delete`` are refused with 405 (stepline's workflows are code); the rest are served.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudflare
import httpx
import pytest
from cloudflare import Cloudflare

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline._project_cloudflare import CloudflareConfig
from stepline.http import create_app

from .._http_server import ServerThread
from .._served import TOKEN, Served

pytestmark = pytest.mark.slow
ACCOUNT = "0123abcd"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("cloudflare-sdk"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cf(served: Served) -> Cloudflare:
    return Cloudflare(base_url=served.base_url, api_token=TOKEN, max_retries=0)


def _until(cf: Cloudflare, instance_id: str, *statuses: str, workflow: str = "greet") -> Any:
    deadline = time.monotonic() + 15
    while True:
        detail = cf.workflows.instances.get(instance_id, account_id=ACCOUNT, workflow_name=workflow)
        if detail.status in statuses:
            return detail
        assert time.monotonic() < deadline, f"{instance_id} is still {detail.status}"
        time.sleep(0.05)


def test_workflows_list_get_and_versions(cf: Cloudflare) -> None:
    page = cf.workflows.list(account_id=ACCOUNT, per_page=1)
    assert page.result_info.page == 1 and page.result_info.per_page == 1
    assert len(page.result) == 1
    # Auto-pagination walks page 2, then stops at the empty page 3.
    assert sorted(w.name for w in cf.workflows.list(account_id=ACCOUNT, per_page=1)) == [
        "flaky",
        "greet",
    ]
    assert [w.name for w in cf.workflows.list(account_id=ACCOUNT, search="GRE")] == ["greet"]
    greet = cf.workflows.get("greet", account_id=ACCOUNT)
    assert (greet.name, greet.class_name, greet.script_name) == ("greet", "greet", "flows")
    assert set(greet.instances) >= {"queued", "running", "complete", "errored", "waiting"}
    versions = list(cf.workflows.versions.list("greet", account_id=ACCOUNT))
    assert len(versions) == 1 and versions[0].workflow_id == greet.id
    assert versions[0].language == "python"
    version = cf.workflows.versions.get(versions[0].id, account_id=ACCOUNT, workflow_name="greet")
    assert version.id == versions[0].id
    graph = cf.workflows.versions.graph(versions[0].id, account_id=ACCOUNT, workflow_name="greet")
    assert graph.graph is None and graph.workflow_id == greet.id
    with pytest.raises(cloudflare.NotFoundError) as missing:
        cf.workflows.versions.get("v-nope", account_id=ACCOUNT, workflow_name="greet")
    assert missing.value.body["errors"][0]["code"] == 10400


def test_create_bulk_list_and_pages(cf: Cloudflare) -> None:
    created = cf.workflows.instances.create(
        "greet", account_id=ACCOUNT, instance_id="sdk-one", params={"name": "Ada"}
    )
    assert created.id == "sdk-one" and created.trigger_source == "api"
    assert created.status in ("queued", "running", "waiting")
    bulk = list(
        cf.workflows.instances.bulk(
            "greet", account_id=ACCOUNT, body=[{"instance_id": f"sdk-b{n}"} for n in range(3)]
        )
    )
    assert [i.id for i in bulk] == ["sdk-b0", "sdk-b1", "sdk-b2"]
    for instance_id in ("sdk-one", "sdk-b0", "sdk-b1", "sdk-b2"):
        _until(cf, instance_id, "waiting")

    first = cf.workflows.instances.list("greet", account_id=ACCOUNT, per_page=2, status="waiting")
    assert first.result_info.total_count >= 4 and len(first.result) == 2
    everything = [
        i.id for i in cf.workflows.instances.list("greet", account_id=ACCOUNT, per_page=2)
    ]
    assert {"sdk-one", "sdk-b0", "sdk-b1", "sdk-b2"} <= set(everything)
    assert len(everything) == len(set(everything))  # no page repeats an instance
    page2 = cf.workflows.instances.list("greet", account_id=ACCOUNT, per_page=2, page=2)
    assert [i.id for i in page2.result] == everything[2:4]
    by_cursor = cf.workflows.instances.list(
        "greet", account_id=ACCOUNT, per_page=2, status="waiting", cursor=first.result_info.cursor
    )
    assert {i.id for i in by_cursor.result}.isdisjoint({i.id for i in first.result})
    oldest = cf.workflows.instances.list("greet", account_id=ACCOUNT, direction="asc", per_page=100)
    assert [i.id for i in oldest.result] == list(reversed(everything))
    dated = cf.workflows.instances.list(
        "greet", account_id=ACCOUNT, date_start="2024-01-01T00:00:00"
    )
    assert {i.id for i in dated.result} == {i.id for i in oldest.result}
    assert dated.result_info.total_count == len(everything)
    none = cf.workflows.instances.list("greet", account_id=ACCOUNT, date_end="2024-01-01T00:00:00")
    assert (none.result, none.result_info.total_count) == ([], 0)
    with pytest.raises(cloudflare.BadRequestError, match="date_start"):
        cf.workflows.instances.list("greet", account_id=ACCOUNT, date_start="yesterday")


def test_describe_a_waiting_and_an_errored_instance(cf: Cloudflare) -> None:
    cf.workflows.instances.create("greet", account_id=ACCOUNT, instance_id="sdk-d", params={})
    detail = _until(cf, "sdk-d", "waiting")
    assert detail.trigger.source == "api" and detail.params == {} and detail.success is None
    assert detail.step_count == 2
    name, approval = detail.steps
    assert (name.name, name.type, name.success, name.output) == ("name-1", "step", True, "world")
    assert [a.success for a in name.attempts] == [True]
    assert (approval.name, approval.type, approval.finished) == (
        "approval-1",
        "waitForEvent",
        False,
    )
    assert approval.event_type == "approve"
    simple = cf.workflows.instances.get(
        "sdk-d", account_id=ACCOUNT, workflow_name="greet", simple="true"
    )
    assert simple.steps == [] and simple.step_count == 2
    newest = cf.workflows.instances.get(
        "sdk-d", account_id=ACCOUNT, workflow_name="greet", order="desc"
    )
    assert [s.name for s in newest.steps] == ["approval-1", "name-1"]
    step = cf.workflows.instances.step(
        "sdk-d", account_id=ACCOUNT, workflow_name="greet", name="name-1", type="step"
    )
    assert (step.status, step.output, step.error) == ("complete", "world", None)

    cf.workflows.instances.create("flaky", account_id=ACCOUNT, instance_id="sdk-f")
    failed = _until(cf, "sdk-f", "errored", workflow="flaky")
    assert failed.success is False and failed.error.name == "RuntimeError"
    (attempted,) = failed.steps
    assert attempted.success is False
    assert [(a.success, a.error.message) for a in attempted.attempts] == [(False, "no luck")] * 2
    second = cf.workflows.instances.step(
        "sdk-f", account_id=ACCOUNT, workflow_name="flaky", name="try-1", type="step", attempt=2
    )
    assert second.status == "errored" and second.error.message == "no luck"


def test_status_changes_and_events(cf: Cloudflare) -> None:
    cf.workflows.instances.create(
        "greet", account_id=ACCOUNT, instance_id="sdk-s", params={"name": "Bo"}
    )
    _until(cf, "sdk-s", "waiting")
    edit = cf.workflows.instances.status.edit
    assert (
        edit("sdk-s", account_id=ACCOUNT, workflow_name="greet", status="pause").status == "paused"
    )
    assert edit("sdk-s", account_id=ACCOUNT, workflow_name="greet", status="resume").status in (
        "queued", "running", "waiting",
    )  # fmt: skip
    _until(cf, "sdk-s", "waiting")
    sent = cf.workflows.instances.events.create(
        "approve", account_id=ACCOUNT, workflow_name="greet", instance_id="sdk-s", body={"by": "Cy"}
    )
    assert sent.instance_id == "sdk-s"
    done = _until(cf, "sdk-s", "complete")
    assert done.output == {"hello": "Bo", "approved_by": {"by": "Cy"}} and done.success is True
    assert done.steps[1].finished is True and done.steps[1].output["payload"] == {"by": "Cy"}

    restarted = edit(
        "sdk-s", account_id=ACCOUNT, workflow_name="greet", status="restart",
        from_={"name": "approval", "count": 1, "type": "waitForEvent"},
    )  # fmt: skip
    assert restarted.status in ("queued", "running", "waiting", "complete")
    _until(cf, "sdk-s", "complete")  # the event is delivered again to the restarted wait
    cf.workflows.instances.create("greet", account_id=ACCOUNT, instance_id="sdk-t")
    _until(cf, "sdk-t", "waiting")
    assert edit("sdk-t", account_id=ACCOUNT, workflow_name="greet", status="terminate").status == (
        "terminated"
    )
    ended = cf.workflows.instances.get("sdk-t", account_id=ACCOUNT, workflow_name="greet")
    assert ended.steps[-1].type == "termination"
    with pytest.raises(cloudflare.ConflictError) as refused:
        edit("sdk-t", account_id=ACCOUNT, workflow_name="greet", status="pause")
    assert refused.value.body["errors"][0]["code"] == 10401
    assert refused.value.response.headers["x-should-retry"] == "false"


def test_what_clients_ask_first(cf: Cloudflare) -> None:
    """Token verification and account lookups (wrangler's whoami, and its account choice
    without CLOUDFLARE_ACCOUNT_ID)."""
    assert cf.user.tokens.verify().status == "active"
    assert [a.id for a in cf.accounts.list()] == ["stepline"]
    assert cf.accounts.get(account_id=ACCOUNT).id == ACCOUNT
    assert [m.account.id for m in cf.memberships.list()] == ["stepline"]
    with pytest.raises(cloudflare.PermissionDeniedError) as no_user:
        cf.user.get()
    assert no_user.value.body["errors"][0]["code"] == 9109


def test_errors_and_refused_calls(cf: Cloudflare, served: Served) -> None:
    with pytest.raises(cloudflare.NotFoundError) as missing:
        cf.workflows.instances.get("nope", account_id=ACCOUNT, workflow_name="greet")
    assert missing.value.body["errors"][0]["code"] == 10400
    assert "workflows.api.error.instance.not_found" in missing.value.body["errors"][0]["message"]
    with pytest.raises(cloudflare.NotFoundError) as no_workflow:
        cf.workflows.get("nope", account_id=ACCOUNT)
    assert no_workflow.value.body["errors"][0]["code"] == 10200
    with pytest.raises(cloudflare.NotFoundError):
        cf.workflows.instances.events.create(
            "approve", account_id=ACCOUNT, workflow_name="nope", instance_id="x", body={}
        )
    cf.workflows.instances.create("greet", account_id=ACCOUNT, instance_id="sdk-twice")
    with pytest.raises(cloudflare.ConflictError, match="already has an instance"):
        cf.workflows.instances.create("greet", account_id=ACCOUNT, instance_id="sdk-twice")
    with pytest.raises(cloudflare.BadRequestError, match="unknown key 'priority'"):
        cf.workflows.instances.create("greet", account_id=ACCOUNT, extra_body={"priority": 1})
    bad = Cloudflare(base_url=served.base_url, api_token="wrong", max_retries=0)
    with pytest.raises(cloudflare.AuthenticationError) as denied:
        bad.workflows.list(account_id=ACCOUNT)
    assert denied.value.body["errors"][0]["code"] == 10000
    for refused in (
        lambda: cf.workflows.delete("greet", account_id=ACCOUNT),
        lambda: cf.workflows.update("greet", account_id=ACCOUNT, class_name="X", script_name="y"),
    ):
        with pytest.raises(cloudflare.APIStatusError, match="stepline does not") as error:
            refused()
        assert error.value.status_code == 405


FAILED_ONCE: set[str] = set()


@workflow(name="recovers")
async def recovers(event: WorkflowEvent, step: WorkflowStep) -> Any:
    def call() -> str:
        if event.instance_id not in FAILED_ONCE:
            FAILED_ONCE.add(event.instance_id)
            raise RuntimeError("not yet")
        return "done"

    return await step.do("call", {"retries": {"limit": 1, "delay": 0}}, call)


def test_a_successful_attempt_is_complete_and_a_short_last_page_counts(tmp_path: Path) -> None:
    """A step that failed once, then succeeded: its second attempt is ``complete`` (its first
    ``errored``) where the SDK reads one attempt, and succeeded in describe's attempts; three
    instances two per page make two pages, the second short (the app served in a thread)."""
    FAILED_ONCE.clear()
    engine = Engine(f"sqlite:///{tmp_path}/r.db", [recovers], poll_interval=0.02)
    with ServerThread(create_app(engine, manage_engine=True)) as server:
        sdk = Cloudflare(base_url=f"{server.url}/client/v4", api_token="x", max_retries=0)
        for n in range(3):
            sdk.workflows.instances.create("recovers", account_id=ACCOUNT, instance_id=f"r{n}")
        detail = _until(sdk, "r0", "complete", workflow="recovers")
        (called,) = detail.steps
        assert [a.success for a in called.attempts] == [False, True]
        attempts = [
            sdk.workflows.instances.step(
                "r0", account_id=ACCOUNT, workflow_name="recovers", name="call-1", type="step",
                attempt=number,
            )
            for number in (1, 2)
        ]  # fmt: skip
        assert [(a.status, a.output) for a in attempts] == [("errored", None), ("complete", "done")]
        assert attempts[0].error.message == "not yet" and attempts[1].error is None

        first = sdk.workflows.instances.list("recovers", account_id=ACCOUNT, per_page=2)
        info = first.result_info
        assert (info.page, info.per_page, info.count) == (1, 2, 2)
        assert (info.total_count, info.total_pages) == (3, 2)
        last = sdk.workflows.instances.list("recovers", account_id=ACCOUNT, per_page=2, page=2)
        assert (last.result_info.count, last.result_info.total_pages) == (1, 2)
        assert len(last.result) == 1


def test_account_and_prefix_settings(tmp_path: Path) -> None:
    """A fixed account id refuses others and is the one listed; the prefix moves the routes;
    ``enabled=False`` leaves them out (the app served in a thread)."""
    config = CloudflareConfig(prefix="/cf", account_id="acct42")
    app = create_app(
        Engine(f"sqlite:///{tmp_path}/a.db"), manage_engine=True, cloudflare_api=config
    )
    with ServerThread(app) as server:
        sdk = Cloudflare(base_url=f"{server.url}/cf", api_token="x", max_retries=0)
        assert list(sdk.workflows.list(account_id="acct42")) == []
        with pytest.raises(cloudflare.PermissionDeniedError, match="serves account 'acct42'"):
            sdk.workflows.list(account_id="other")
        assert [a.id for a in sdk.accounts.list()] == ["acct42"]
        assert httpx.get(f"{server.url}/client/v4/accounts/acct42/workflows").status_code == 404
        # The router's own errors, under the prefix, are in Cloudflare's envelope too.
        for answer, status, code in (
            (httpx.get(f"{server.url}/cf/nope"), 404, 7000),
            (httpx.post(f"{server.url}/cf/accounts/acct42/workflows"), 405, 7001),
            (httpx.get(f"{server.url}/cf/accounts/acct42/workflows?x={'y' * 9000}"), 414, 10002),
        ):
            assert answer.status_code == status
            assert answer.json()["success"] is False
            assert answer.json()["errors"][0]["code"] == code
    off = create_app(
        Engine(f"sqlite:///{tmp_path}/b.db"), manage_engine=True,
        cloudflare_api=CloudflareConfig(enabled=False),
    )  # fmt: skip
    with ServerThread(off) as server:
        answer = httpx.get(f"{server.url}/client/v4/accounts/a/workflows")
        assert "success" not in answer.text  # the dashboard's 404, not the API's
