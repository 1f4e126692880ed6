"""Fixtures of the trigger tests: a workflow to create, a fresh Redis stream per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from stepline import Workflow, WorkflowEvent, WorkflowStep

from ..brokers import _redis


class Orders(Workflow):
    name = "orders"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("echo", lambda: event.payload)


class Invoices(Workflow):
    name = "invoices"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return None


@pytest.fixture
def stream() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    _redis.cleanup(name)
