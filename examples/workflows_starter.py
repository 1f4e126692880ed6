"""The Cloudflare Workflows starter (``cloudflare/workflows-starter``), in Python.

Four steps, as in the original: one returns a list of files, one reads something (here the
Cloudflare IP ranges from a JSON file shipped next to this example, instead of calling
``https://api.cloudflare.com/client/v4/ips``, so no network is needed), a durable sleep, and a
flaky "write" retried with exponential backoff. The flaky step fails its first two attempts
(``failures`` in the params changes that), so you can watch the retries::

    stepline run examples/workflows_starter.py:MyWorkflow '{"email": "ada@example.com"}'

It takes about five seconds: a two-second sleep, then retries after one and two seconds.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from stepline import StepContext, Workflow, WorkflowEvent, WorkflowStep

IP_RANGES_FILE = Path(__file__).resolve().parent / "data" / "cloudflare-ips.json"

FILES = [
    "doc_7392_rev3.pdf",
    "report_x29_final.pdf",
    "memo_2024_05_12.pdf",
    "file_089_update.pdf",
    "proj_alpha_v2.pdf",
    "data_analysis_q2.pdf",
    "notes_meeting_52.pdf",
    "summary_fy24_draft.pdf",
]


class StorageUnavailableError(ConnectionError):
    """The (pretend) storage system refused the write."""


def read_ip_ranges() -> dict[str, Any]:
    """What the starter fetches from the Cloudflare API, read from a local file.

    The ranges are validated, as one should with any response from another system.
    """
    response: dict[str, Any] = json.loads(IP_RANGES_FILE.read_text(encoding="utf-8"))
    result = response["result"]
    for cidr in [*result["ipv4_cidrs"], *result["ipv6_cidrs"]]:
        ipaddress.ip_network(cidr)
    return response


class MyWorkflow(Workflow):
    """The workflows-starter: list files, read the IP ranges, sleep, then a flaky write."""

    name = "workflows-starter"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> dict[str, Any]:
        params = event.payload if isinstance(event.payload, dict) else {}
        failures = int(params.get("failures", 2))

        # Fetch a list of files from $SOME_SERVICE.
        files = await step.do(
            "my first step",
            lambda: {
                "inputParams": {
                    "timestamp": event.timestamp.isoformat(),
                    "payload": event.payload,
                },
                "files": FILES,
            },
        )

        api_response = await step.do("some other step", read_ip_ranges)

        await step.sleep("wait on something", "2 seconds")

        def write(ctx: StepContext) -> dict[str, Any]:
            # Do stuff here, with access to the state from the previous steps. The first
            # `failures` attempts fail, as a storage system having a bad moment would.
            if ctx.attempt <= failures:
                raise StorageUnavailableError("API call to $STORAGE_SYSTEM failed")
            ranges = api_response["result"]
            return {
                "written": len(files["files"]),
                "allowed_ranges": len(ranges["ipv4_cidrs"]) + len(ranges["ipv6_cidrs"]),
                "attempt": ctx.attempt,
            }

        written = await step.do(
            "make a call to write that could maybe, just might, fail",
            # Define a retry strategy.
            {
                "retries": {"limit": 5, "delay": "1 second", "backoff": "exponential"},
                "timeout": "15 minutes",
            },
            write,
        )
        return {"files": len(files["files"]), "write": written}
