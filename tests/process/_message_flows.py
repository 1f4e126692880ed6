"""Workflows of the message process tests (``python -m tests._procs --workflows
tests.process._message_flows``): an account taking deposits by update, and an importer that
publishes progress from inside a step.

Side effects go to a ledger directory given in the params: one ``os.write`` per line on an
``O_APPEND`` descriptor, which survives SIGKILL of the writing process.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import stepline
from stepline import Workflow, WorkflowEvent, WorkflowStep


def note(ledger: str, line: str) -> None:
    fd = os.open(
        os.path.join(ledger, f"ledger-{os.getpid()}.csv"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, f"{line},{os.getpid()}\n".encode())
    finally:
        os.close(fd)


def ledger_lines(ledger: Path) -> list[list[str]]:
    lines: list[list[str]] = []
    for path in sorted(ledger.glob("ledger-*.csv")):
        lines += [row.split(",") for row in path.read_text().splitlines() if row]
    return lines


class Account(Workflow):
    """Parks until 'close'; deposits arrive as updates, each noted in the ledger by a step."""

    name = "account"

    def __init__(self) -> None:
        self.balance = 0
        self.deposits: list[str] = []

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        self.ledger = event.payload["ledger"]
        await step.do("open", lambda: note(self.ledger, f"open,{event.instance_id}"))
        await step.wait_for_event("close", type="close", timeout="1 day")
        return {"balance": self.balance, "deposits": self.deposits}

    @stepline.query
    def balance_now(self) -> int:
        return self.balance

    @stepline.update
    async def deposit(self, step: WorkflowStep, amount: int, tag: str, hold: bool = False) -> Any:
        ledger = self.ledger

        def record() -> str:
            note(ledger, f"record,{tag}")
            return tag

        def settle() -> str:  # in the thread pool: it may block
            note(ledger, f"settle,{tag}")
            if hold:  # until the test lets it go (it kills this worker meanwhile)
                while not os.path.exists(os.path.join(ledger, "go")):
                    time.sleep(0.02)
            return "settled"

        await step.do("record", record)
        await step.do("settle", settle)
        self.balance += amount
        self.deposits.append(tag)
        return {"tag": tag, "balance": self.balance}


class Importer(Workflow):
    """Publishes ``count`` progress items from inside one step, ``gap`` seconds apart."""

    name = "importer"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        count, gap = event.payload["count"], event.payload["gap"]

        async def load() -> int:
            for n in range(1, count + 1):
                await step.publish("progress", {"n": n})
                await asyncio.sleep(gap)
            return count

        return await step.do("load", load)


WORKFLOWS = [Account, Importer]
