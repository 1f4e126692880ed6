"""Workflows of the deploy process test, for ``python -m tests._procs --workflows``: the old
code of ``deploy`` version 1 (``_deploy_old``), and the new code (``_deploy_new``): version 1
with a patch, and version 2.

Every activation appends ``pid,instance,version,code`` to a ledger file of its process (the
directory comes in the params) before ``run()`` replays anything: which process ran which
instance under which code, even an activation that records nothing. Every step returns the
code that ran it.
"""

from __future__ import annotations

import os
from typing import Any

from stepline import Workflow, WorkflowEvent, WorkflowStep

NAME = "deploy"


def _ledger(event: WorkflowEvent, version: str, code: str) -> None:
    directory = event.payload["ledger"]
    line = f"{os.getpid()},{event.instance_id},{version},{code}\n"
    fd = os.open(
        os.path.join(directory, f"runs-{os.getpid()}.csv"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class OldV1(Workflow):
    """Version 1 as first deployed: a, a nap, the email."""

    name = NAME

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        _ledger(event, "1", "old")
        ran = [await step.do("a", lambda: "old")]
        await step.sleep("nap", float(event.payload["nap"]))
        ran.append(await step.do("email", lambda: "old"))
        return {"path": ["a", "email"], "ran": ran}


class PatchedV1(Workflow):
    """Version 1 patched in place: an sms after the nap, for instances that take the patch."""

    name = NAME

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        _ledger(event, "1", "patched")
        ran = [await step.do("a", lambda: "patched")]
        await step.sleep("nap", float(event.payload["nap"]))
        path = ["a"]
        if step.patched("sms-reminder"):
            ran.append(await step.do("sms", lambda: "patched"))
            path.append("sms")
        ran.append(await step.do("email", lambda: "patched"))
        return {"path": [*path, "email"], "ran": ran}


class V2(Workflow):
    """Version 2, a rewrite with other steps."""

    name = NAME
    version = "2"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        _ledger(event, "2", "v2")
        ran = [await step.do("start", lambda: "v2")]
        await step.sleep("nap", float(event.payload["nap"]))
        ran.append(await step.do("finish", lambda: "v2"))
        return {"path": ["start", "finish"], "ran": ran}
