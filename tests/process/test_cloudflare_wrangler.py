"""The real ``wrangler`` CLI (from the npm registry, :data:`tests._wrangler.WRANGLER_VERSION`)
drives ``stepline serve`` unchanged, through ``CLOUDFLARE_API_BASE_URL``: every workflows
command it has but the hidden ``terminate-all``, each checked for its exit code and output.

One server and one wrangler install serve the module; setting up instances goes through
stepline's own ``/api``, which is quicker than a wrangler run (each takes a second or two).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from .._served import TOKEN, Served
from .._wrangler import install_wrangler, wrangler_env

pytestmark = pytest.mark.slow
ACCOUNT = "0123abcd"


@dataclass
class Wrangler:
    executable: Path
    served: Served
    home: Path

    def __call__(
        self, *args: str, token: str = TOKEN, account: str | None = ACCOUNT, ok: bool = True
    ) -> str:
        env = wrangler_env(self.served.base_url, token, self.home, account)
        done = subprocess.run(
            [str(self.executable), "workflows", *args],
            cwd=self.home, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert (done.returncode == 0) is ok, f"wrangler workflows {' '.join(args)}:\n{output}"
        return output

    def api(self, method: str, path: str, **kwargs: object) -> dict[str, object]:
        answer = httpx.request(
            method, f"{self.served.root}/api{path}",
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10, **kwargs,  # type: ignore[arg-type]
        )  # fmt: skip
        assert answer.status_code < 300, answer.text
        return dict(answer.json())

    def status(self, instance_id: str, *wanted: str) -> str:
        deadline = time.monotonic() + 15
        while True:
            status = str(
                self.api("GET", f"/workflows/greet/instances/{instance_id}")["workflow"]["status"]
            )  # type: ignore[index]
            if not wanted or status in wanted:
                return status
            assert time.monotonic() < deadline, f"{instance_id} is still {status}"
            time.sleep(0.05)

    def waiting(self, instance_id: str, name: str = "world") -> None:
        self.api(
            "POST", "/workflows/greet/instances", json={"id": instance_id, "params": {"name": name}}
        )
        self.status(instance_id, "waiting")


@pytest.fixture(scope="module")
def wrangler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wrangler]:
    executable = install_wrangler()
    served = Served(tmp_path_factory.mktemp("cloudflare-wrangler"))
    try:
        yield Wrangler(executable, served, tmp_path_factory.mktemp("wrangler-home"))
    finally:
        served.stop()


def test_workflows_list_and_describe(wrangler: Wrangler) -> None:
    out = wrangler("list")
    assert "Showing 2 workflows from page 1:" in out
    for cell in ("Name", "Script name", "Class name", "greet", "flaky", "flows"):
        assert cell in out
    out = wrangler("describe", "greet")
    assert "Name:" in out and "greet" in out and "Script Name:" in out and "Latest Version:" in out
    # Without CLOUDFLARE_ACCOUNT_ID wrangler asks /memberships which account to use.
    assert "greet" in wrangler("list", account=None)


def test_trigger_and_list_instances(wrangler: Wrangler) -> None:
    out = wrangler("trigger", "greet", '{"name": "Ada"}', "--id", "wr-trigger")
    assert '🚀 Workflow instance "wr-trigger" has been queued successfully' in out
    assert wrangler.status("wr-trigger", "waiting") == "waiting"
    assert wrangler.api("GET", "/workflows/greet/instances/wr-trigger")["workflow"]["params"] == {  # type: ignore[index]
        "name": "Ada"
    }
    out = wrangler("instances", "list", "greet")
    assert "Showing" in out and "wr-trigger" in out and "⏰ Waiting" in out


def test_describe_latest(wrangler: Wrangler) -> None:
    wrangler.waiting("wr-latest", "Bea")
    out = wrangler("instances", "describe", "greet", "latest")
    assert "Describing latest instance:" in out
    for label, value in (
        ("Workflow Name:", "greet"),
        ("Instance Id:", "wr-latest"),
        ("Status:", "⏰ Waiting"),
        ("Trigger:", "🌎 API"),
        ("Last Successful Step:", "name-1"),
    ):
        line = next(line for line in out.splitlines() if line.startswith(label))
        assert value in line, line
    steps = out.split("Steps:", 1)[1]
    assert "Name:      name-1" in steps and "🎯 Step" in steps and "✅ Yes" in steps
    assert 'Output:    "Bea"' in steps
    assert "│ Start" in steps and "✅ Success" in steps  # the attempts table
    assert "Name:      approval-1" in steps and "👀 Waiting for event" in steps


def test_pause_resume_and_send_event(wrangler: Wrangler) -> None:
    wrangler.waiting("wr-control")
    out = wrangler("instances", "pause", "greet", "wr-control")
    assert '⏸️ The instance "wr-control" from greet was paused successfully' in out
    assert wrangler.status("wr-control") == "paused"
    out = wrangler("instances", "resume", "greet", "wr-control")
    assert '🔄 The instance "wr-control" from greet was resumed successfully' in out
    wrangler.status("wr-control", "waiting")
    out = wrangler(
        "instances", "send-event", "greet", "wr-control", "--type", "approve",
        "--payload", '{"by": "wrangler"}',
    )  # fmt: skip
    assert 'The event with type "approve"' in out and '"wr-control" from greet' in out
    assert wrangler.status("wr-control", "complete") == "complete"


def test_restart_and_terminate(wrangler: Wrangler) -> None:
    wrangler.waiting("wr-end")
    out = wrangler("instances", "restart", "greet", "wr-end")
    assert 'The instance "wr-end" from greet was restarted successfully' in out
    wrangler.status("wr-end", "waiting")
    out = wrangler("instances", "terminate", "greet", "wr-end")
    assert 'The instance "wr-end" from greet was terminated successfully' in out
    assert wrangler.status("wr-end") == "terminated"
    out = wrangler("instances", "describe", "greet", "wr-end")
    assert "🚫 Terminated" in out and "🚫 Termination" in out


def test_errors_reach_the_user(wrangler: Wrangler) -> None:
    out = wrangler("instances", "describe", "greet", "no-such-id", ok=False)
    assert "workflows.api.error.instance.not_found" in out and "[code: 10400]" in out
    out = wrangler("list", token="wrong", ok=False)
    assert "Authentication error" in out
    out = wrangler("delete", "greet", ok=False)
    assert "stepline does not delete workflows" in out
