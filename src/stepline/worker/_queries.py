"""Routed queries: the side task that answers the queries a client without a workflow's code
leaves for a worker that has it (docs/messaging.md), by replaying the instance here.

It takes requests as the claim loop takes instances (a request taken is this worker's for a
lease, then anyone's again), wakes when the store says something may be runnable (a request
made in this process, or a PostgreSQL notification), and otherwise polls: quickly after an
answer, backing off to the poll interval while idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from .._runtime import ActivationSettings
from ..errors import StoreError
from ..messages import answer_request
from ..store.base import QueryAnswer, QueryRequest, Store
from ..workflow import WorkflowDefinition
from ._log import log, outage_level
from ._settings import WorkerSettings

BATCH = 20
"""Requests taken at a time."""


class QueryService:
    """Answers the routed queries of the workflows of ``registry``."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        registry: Mapping[str, WorkflowDefinition],
        settings: WorkerSettings,
        versions: Mapping[str, Mapping[str, WorkflowDefinition]] | None = None,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.registry = registry
        self.versions = versions or {}
        self.settings = settings
        self._activation = ActivationSettings(settings.max_payload, payloads=settings.payloads)
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def loop(self) -> None:
        store, settings = self.store, self.settings
        fastest = (
            settings.poll_interval if store.pushes_notifications else settings.min_poll_interval
        )
        interval = fastest
        store.signals.add_ready_listener(self.wake)
        try:
            while True:
                self._wake.clear()
                try:
                    answered = await self.answer_now()
                except StoreError as exc:
                    log.log(outage_level(exc, logging.WARNING), "taking queries failed: %s", exc)
                    answered = 0
                if answered:
                    interval = fastest
                    continue
                # asyncio.timeout, not wait_for: a wake that lands with the task's cancellation
                # must not swallow the cancellation (the worker's shutdown waits for it).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval):
                        await self._wake.wait()
                interval = (
                    fastest if self._wake.is_set() else min(interval * 2, settings.poll_interval)
                )
        finally:
            store.signals.remove_ready_listener(self.wake)

    async def answer_now(self) -> int:
        """Take the requests waiting now and answer them; how many were taken."""
        workflows = list(self.registry)
        if not workflows:
            return 0
        store = self.store
        requests = await store.messages.take_queries(
            self.worker_id, workflows, BATCH, self.settings.lease, store.now()
        )
        await asyncio.gather(*(self._answer(request) for request in requests))
        return len(requests)

    async def _answer(self, request: QueryRequest) -> None:
        definition = self.registry[request.workflow]
        try:
            answer = await answer_request(
                self.store,
                definition,
                request,
                self._activation,
                self.versions.get(request.workflow),
            )
        except StoreError:
            raise
        except Exception as exc:  # a bug: the caller gets it rather than a timeout
            log.exception(
                "query %s of %s/%s failed", request.name, request.workflow, request.instance_id
            )
            answer = QueryAnswer(None, {"name": type(exc).__name__, "message": str(exc)})
        await self.store.messages.answer_query(request.pk, answer, self.store.now())
