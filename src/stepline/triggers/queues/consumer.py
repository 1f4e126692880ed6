"""The queue consumer: messages in, one durable instance per message out.

Each iteration receives a batch, decides for every message which workflow, instance id and
params it stands for (or why it never can: those go to the dead-letter queue with the reason),
creates the instances of each workflow in one transaction (ids that exist are skipped, so a
redelivered message creates nothing), and only then acknowledges the batch. A failure before
the acknowledgement leaves the messages with the broker, which delivers them again: at least
once delivery plus idempotent creation make exactly one instance per message id.

The consumer works through the client layer only: ``engine.workflow(name)`` bindings and the
workflow list's instance counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from ...client import WorkflowBinding
from ...errors import InvalidPayloadError, WorkflowNotFoundError
from ...records import WorkflowInfo
from .broker import Broker, BrokerError, Message, open_broker
from .config import QueueTrigger
from .decoding import Decoder, Item, Poison, traceparent

log = logging.getLogger("stepline.triggers")


class Bindings(Protocol):
    """What the consumer needs of an :class:`~stepline.Engine` (client side only)."""

    def workflow(self, workflow: str) -> WorkflowBinding: ...

    async def list_workflows(self) -> list[WorkflowInfo]: ...


def _queued(infos: Sequence[WorkflowInfo], workflow: str) -> int:
    for info in infos:
        if info.name == workflow:
            return info.counts.get("queued", 0)
    return 0


class Consumer:
    """Consume one :class:`QueueTrigger` into instances, through ``bindings`` (an Engine).

    ``run()`` until :meth:`stop` (``concurrency`` batches in flight, each on a broker
    connection of its own); ``run_once()`` for one batch (tests). ``broker_factory`` makes the
    broker objects (default: :func:`open_broker` on the trigger's URL).
    """

    def __init__(
        self,
        bindings: Bindings,
        trigger: QueueTrigger,
        *,
        broker_factory: Callable[[], Broker] | None = None,
        receive_timeout: float = 1.0,
        pause_interval: float = 0.5,
        backoff: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self.bindings = bindings
        self.trigger = trigger
        self._decoder = Decoder(trigger)
        self._make_broker = broker_factory or (
            lambda: open_broker(trigger.broker, trigger.queue, **trigger.broker_options())
        )
        self.receive_timeout = receive_timeout
        self.pause_interval = pause_interval
        self.backoff = backoff
        self._brokers: list[Broker] = []
        self._stopping = asyncio.Event()
        self._outage_since: float | None = None
        self._paused = False
        self.handled = 0
        """Messages handled so far: turned into instances (or found to exist) or dead-lettered."""
        self.dead_lettered = 0

    def __repr__(self) -> str:
        return f"<Consumer {self.trigger.name}: {self.trigger.describe()}>"

    # -- running -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop after the batches in flight (a receive that is waiting is abandoned)."""
        self._stopping.set()

    async def run(self) -> None:
        """Consume until :meth:`stop` (or cancelled); broker and store failures are retried
        with capped exponential backoff, logged once when they start and once when they end.

        A configured ``workflow`` that no engine registered raises
        :class:`~stepline.WorkflowNotFoundError` before anything is received.
        """
        await self.check_workflow()
        log.info(
            "consuming %s into %s (batch size %d, concurrency %d)",
            self.trigger.describe(),
            self.trigger.workflow or "the workflows its messages name",
            self.trigger.batch_size,
            self.trigger.concurrency,
        )
        try:
            async with asyncio.TaskGroup() as group:
                for lane in range(self.trigger.concurrency):
                    group.create_task(self._lane(self._broker(lane)), name=f"consume-{lane}")
        finally:
            await self.close()

    async def run_once(self, timeout: float = 0.0) -> int:
        """One iteration on the first broker connection: receive one batch (waiting at most
        ``timeout`` seconds) and handle it; with no room under ``max_queued``, receive nothing.
        Returns how many messages were handled; failures propagate."""
        broker = self._broker(0)
        limit = await self._room()
        if limit == 0:
            return 0
        await broker.connect()
        messages = await broker.receive(limit, timeout)
        return await self._handle(broker, messages)

    async def close(self) -> None:
        """Close the broker connections (unacknowledged messages stay with the broker)."""
        brokers, self._brokers = self._brokers, []
        for broker in brokers:
            await _close_quietly(broker)

    async def check_workflow(self) -> None:
        """Raise :class:`~stepline.WorkflowNotFoundError` if the configured workflow is
        unknown to the database (an engine registers its workflows when it opens)."""
        workflow = self.trigger.workflow
        if workflow is None:
            return
        known = sorted(info.name for info in await self.bindings.list_workflows())
        if workflow not in known:
            raise WorkflowNotFoundError(workflow, known)

    def _broker(self, lane: int) -> Broker:
        while len(self._brokers) <= lane:
            self._brokers.append(self._make_broker())
        return self._brokers[lane]

    async def _lane(self, broker: Broker) -> None:
        delay = self.backoff[0]
        while not self._stopping.is_set():
            try:
                limit = await self._room()
                if limit == 0:
                    await self._sleep(self.pause_interval)
                    continue
                await broker.connect()
                messages = await self._receive(broker, limit)
                await self._handle(broker, messages)
            except Exception as exc:
                # Never crash on a failure: what was not acknowledged is delivered again.
                self._failed(exc)
                if isinstance(exc, BrokerError):
                    await _close_quietly(broker)
                await self._sleep(delay)
                delay = min(delay * 2, self.backoff[1])
                continue
            self._recovered()
            delay = self.backoff[0]

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _receive(self, broker: Broker, limit: int) -> list[Message]:
        """Receive, abandoning the wait when the consumer stops (nothing received is lost:
        unacknowledged messages are delivered again)."""
        receiving = asyncio.ensure_future(broker.receive(limit, self.receive_timeout))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({receiving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not receiving.done():
                receiving.cancel()
        # Waits for the cancelled receive to unwind (asyncio.wait never raises its error).
        await asyncio.wait({receiving})
        if receiving.cancelled():
            return []
        return receiving.result()

    # -- back-pressure -------------------------------------------------------------------------

    async def _room(self) -> int:
        """How many messages to take now: the batch size, less near ``max_queued``; 0 while the
        workflow has ``max_queued`` queued instances or more."""
        limit = self.trigger.max_queued
        workflow = self.trigger.workflow
        if limit is None or workflow is None:
            return self.trigger.batch_size
        queued = _queued(await self.bindings.list_workflows(), workflow)
        room = max(0, min(self.trigger.batch_size, limit - queued))
        if room == 0 and not self._paused:
            log.info(
                "queue trigger %s: pausing, %s has %d queued instances (max_queued %d)",
                self.trigger.name,
                workflow,
                queued,
                limit,
            )
        elif room and self._paused:
            log.info("queue trigger %s: resuming, %d queued", self.trigger.name, queued)
        self._paused = room == 0
        return room

    # -- outages ---------------------------------------------------------------------------------

    def _failed(self, exc: Exception) -> None:
        if self._outage_since is not None:
            return
        self._outage_since = time.monotonic()
        what = "broker" if isinstance(exc, BrokerError) else "creating instances"
        log.warning(
            "queue trigger %s: %s failed: %s: %s; retrying with backoff (up to %g s)",
            self.trigger.name,
            what,
            type(exc).__name__,
            exc,
            self.backoff[1],
        )

    def _recovered(self) -> None:
        if self._outage_since is None:
            return
        lasted = time.monotonic() - self._outage_since
        self._outage_since = None
        log.info("queue trigger %s: recovered after %.1f s", self.trigger.name, lasted)

    # -- one batch -------------------------------------------------------------------------------

    async def _handle(self, broker: Broker, messages: Sequence[Message]) -> int:
        """Dead-letter what can never be an instance, create the rest, then acknowledge."""
        by_workflow: dict[str, list[Item]] = {}
        for message in messages:
            try:
                item = self._decoder.decode(message)
            except Poison as poison:
                await self._dead_letter(broker, message, str(poison))
                continue
            by_workflow.setdefault(item.workflow, []).append(item)
        created: list[Message] = []
        for workflow, items in by_workflow.items():
            refused = await self._create(workflow, items)
            for item in items:
                reason = refused.get(item.instance_id)
                if reason is None:
                    created.append(item.message)
                else:
                    await self._dead_letter(broker, item.message, reason)
        await broker.ack(created)
        self.handled += len(messages)
        return len(messages)

    async def _dead_letter(self, broker: Broker, message: Message, reason: str) -> None:
        await broker.dead_letter(message, reason)
        self.dead_lettered += 1
        log.warning(
            "queue trigger %s: message %s dead-lettered: %s", self.trigger.name, message.id, reason
        )

    async def _create(self, workflow: str, items: Sequence[Item]) -> dict[str, str]:
        """Create the instances (durably, skipping ids that exist); the ids that can never be
        created, with the reason. Any other failure propagates: nothing is acknowledged."""
        binding = self.bindings.workflow(workflow)
        unique = {item.instance_id: item for item in reversed(items)}
        batch = [
            {
                "id": i.instance_id,
                "params": i.params,
                "traceparent": traceparent(i.message),
                "tags": i.tags,
            }
            for i in reversed(unique.values())
        ]
        label = self.trigger.trigger_label
        try:
            await binding.create_batch(batch, trigger=label)
        except WorkflowNotFoundError:
            return {instance_id: f"unknown workflow {workflow!r}" for instance_id in unique}
        except InvalidPayloadError as exc:
            if len(batch) == 1:
                return {batch[0]["id"]: f"params rejected: {exc}"}
            refused: dict[str, str] = {}
            # Some message's params are refused (too large for this engine): find which.
            for entry in batch:
                try:
                    await binding.create_batch([entry], trigger=label)
                except InvalidPayloadError as exc:
                    refused[entry["id"]] = f"params rejected: {exc}"
            return refused
        return {}


async def _close_quietly(broker: Broker) -> None:
    try:
        await broker.close()
    except Exception as exc:
        log.debug("closing %s failed: %s", broker.url, exc)
