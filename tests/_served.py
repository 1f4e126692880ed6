"""``stepline serve --worker`` in a subprocess, on a small project, for the tests that drive it
with Cloudflare's own clients (the ``cloudflare`` SDK, ``wrangler``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

TOKEN = "cf-test-token"

FLOWS = """
from stepline import workflow


@workflow(name="greet")
async def greet(event, step):
    name = await step.do("name", lambda: (event.params or {}).get("name", "world"))
    approval = await step.wait_for_event("approval", type="approve", timeout="1 hour")
    return {"hello": name, "approved_by": approval.payload}


def _fail():
    raise RuntimeError("no luck")


@workflow(name="flaky")
async def flaky(event, step):
    await step.do("try", {"retries": {"limit": 1, "delay": 0}}, _fail)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    """The server process; ``base_url`` is what ``CLOUDFLARE_API_BASE_URL`` is set to."""

    def __init__(self, directory: Path, config: str = "") -> None:
        (directory / "flows.py").write_text(FLOWS, encoding="utf-8")
        (directory / "stepline.toml").write_text(
            'database = "sqlite:///served.db"\n\n'
            '[[workflows]]\nname = "greet"\nclass_name = "flows:greet"\n\n'
            '[[workflows]]\nname = "flaky"\nclass_name = "flows:flaky"\n\n'
            f'[worker]\npoll_interval = "0.05 seconds"\n\n{config}',
            encoding="utf-8",
        )
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/client/v4"
        env = {**os.environ, "STEPLINE_API_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
        env.pop("STEPLINE_DATABASE_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stepline.cli", "serve", "--worker", "--port", str(self.port)],
            cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{self.root}/api/workflows", timeout=2)
                return
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"stepline serve did not start:\n{self.output}") from None
                time.sleep(0.05)

    output = ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.output = self.proc.communicate(timeout=30)[0].decode()
