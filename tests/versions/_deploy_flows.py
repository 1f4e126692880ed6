"""Workflows of the deploy process test, for ``python -m tests._procs --workflows``: the old
code of ``deploy`` version 1 (``_deploy_old``), and the new code (``_deploy_new``): version 1
with a patch, and version 2.

Every activation appends ``pid,instance,version,code`` to a ledger file of its process (the
directory comes in the params; ``deploy-twice``'s lines begin with the time) before ``run()``
replays anything: which process ran which
instance under which code, even an activation that records nothing. Every step returns the
code that ran it.
"""

from __future__ import annotations

import os
import time
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


TWICE = "deploy-twice"


def _timed_ledger(event: WorkflowEvent, code: str) -> None:
    """As the ledger, with the time first: ``time_ns,pid,instance,code`` (the order of an
    instance's activations across processes)."""
    directory = event.payload["ledger"]
    line = f"{time.time_ns()},{os.getpid()},{event.instance_id},{code}\n"
    fd = os.open(
        os.path.join(directory, f"runs-{os.getpid()}.csv"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class OldTwice(Workflow):
    """Version 1 of ``deploy-twice`` as first deployed: a, two naps, the email."""

    name = TWICE

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        _timed_ledger(event, "old")
        ran = [await step.do("a", lambda: "old")]
        await step.sleep("nap", float(event.payload["nap"]))
        await step.sleep("second-nap", float(event.payload["second"]))
        ran.append(await step.do("email", lambda: "old"))
        return {"path": ["a", "email"], "ran": ran}


class PatchedTwice(Workflow):
    """Version 1 of ``deploy-twice`` patched between the naps: an instance that takes the patch
    sleeps again after it, and must not wake on the old code."""

    name = TWICE

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        _timed_ledger(event, "patched")
        ran = [await step.do("a", lambda: "patched")]
        await step.sleep("nap", float(event.payload["nap"]))
        path = ["a"]
        if step.patched("sms-between"):
            ran.append(await step.do("sms", lambda: "patched"))
            path.append("sms")
        await step.sleep("second-nap", float(event.payload["second"]))
        ran.append(await step.do("email", lambda: "patched"))
        return {"path": [*path, "email"], "ran": ran}
