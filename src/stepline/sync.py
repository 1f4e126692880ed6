"""A thin synchronous facade over the async client, for scripts and sync web frameworks.

It runs one event loop in a background thread and forwards each call to the async
implementation; there is no second implementation.

    with SyncEngine("sqlite:///stepline.db") as engine:
        instance = engine.workflow("greeting").create(params={"name": "Ada"})
        print(instance.status())
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from . import _loop
from ._creating import OnConflict
from .client import Instance, OnDuplicate, WorkflowBinding
from .durations import Duration
from .engine import Engine
from .instance import FINISHED_ORDER
from .records import (
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    InstanceStatus,
    StepRecord,
    WorkerInfo,
    WorkflowInfo,
)
from .store.types import StreamRead
from .triggers.cron import Backfill, ScheduleClient, ScheduleInfo
from .triggers.cron.client import Moment

T = TypeVar("T")


class _Portal:
    """An event loop in a daemon thread; :meth:`call` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = _loop.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, daemon=True, name="stepline-sync"
        )
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class SyncInstance:
    """Synchronous twin of :class:`~stepline.client.Instance` (same methods, blocking)."""

    def __init__(self, portal: _Portal, instance: Instance) -> None:
        self._portal = portal
        self._instance = instance
        self.id = instance.id
        self.workflow = instance.workflow

    def status(self) -> InstanceStatus:
        return self._portal.call(self._instance.status())

    def steps(self) -> list[StepRecord]:
        return self._portal.call(self._instance.steps())

    def events(self) -> list[InstanceEvent]:
        return self._portal.call(self._instance.events())

    def delete(self, *, force: bool = False) -> None:
        self._portal.call(self._instance.delete(force=force))

    def pause(self) -> None:
        self._portal.call(self._instance.pause())

    def resume(self) -> None:
        self._portal.call(self._instance.resume())

    def terminate(self, *, rollback: bool = False) -> None:
        self._portal.call(self._instance.terminate(rollback=rollback))

    def restart(self, from_step: str | None = None, *, count: int = 1) -> None:
        self._portal.call(self._instance.restart(from_step, count=count))

    def control(
        self,
        action: str,
        *,
        rollback: bool = False,
        from_step: str | None = None,
        count: int = 1,
    ) -> InstanceStatus:
        return self._portal.call(
            self._instance.control(action, rollback=rollback, from_step=from_step, count=count)
        )

    def send_event(self, type: str, payload: Any = None) -> None:
        self._portal.call(self._instance.send_event(type, payload))

    def wait(self, timeout: Duration | None = None) -> InstanceStatus:
        return self._portal.call(self._instance.wait(timeout))

    def query(self, name: str, *args: Any, timeout: Duration | None = None) -> Any:
        return self._portal.call(self._instance.query(name, *args, timeout=timeout))

    def update(
        self,
        name: str,
        *args: Any,
        update_id: str | None = None,
        timeout: Duration | None = None,
    ) -> Any:
        return self._portal.call(
            self._instance.update(name, *args, update_id=update_id, timeout=timeout)
        )

    def send_update(self, name: str, *args: Any, update_id: str | None = None) -> str:
        return self._portal.call(self._instance.send_update(name, *args, update_id=update_id))

    def update_result(self, update_id: str, *, timeout: Duration | None = None) -> Any:
        return self._portal.call(self._instance.update_result(update_id, timeout=timeout))

    def read_stream(self, stream: str, *, after: int = 0, limit: int = 100) -> StreamRead:
        return self._portal.call(self._instance.read_stream(stream, after=after, limit=limit))


class SyncWorkflowBinding:
    """Synchronous twin of :class:`~stepline.client.WorkflowBinding`."""

    def __init__(self, portal: _Portal, binding: WorkflowBinding) -> None:
        self._portal = portal
        self._binding = binding
        self.name = binding.name

    def create(
        self,
        id: str | None = None,
        params: Any = None,
        *,
        trigger: str = "api",
        key: str | None = None,
        priority: int = 0,
        dedup_key: str | None = None,
        on_duplicate: OnDuplicate = "return",
        retention: Mapping[str, Duration] | None = None,
        timeout: Duration | None = None,
        on_conflict: OnConflict | None = None,
        debounce: Duration | None = None,
    ) -> SyncInstance:
        made = self._binding.create(
            id,
            params,
            trigger=trigger,
            key=key,
            priority=priority,
            dedup_key=dedup_key,
            on_duplicate=on_duplicate,
            retention=retention,
            timeout=timeout,
            on_conflict=on_conflict,
            debounce=debounce,
        )
        return SyncInstance(self._portal, self._portal.call(made))

    def create_batch(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        trigger: str = "api",
        version: str | None = None,
    ) -> list[SyncInstance]:
        """:meth:`stepline.WorkflowBinding.create_batch`: each item takes a create's options."""
        batch = self._binding.create_batch(list(items), trigger=trigger, version=version)
        made = self._portal.call(batch)
        return [SyncInstance(self._portal, i) for i in made]

    def get(self, id: str) -> SyncInstance:
        return SyncInstance(self._portal, self._portal.call(self._binding.get(id)))

    def delete(self, ids: Iterable[str], *, force: bool = False) -> int:
        return self._portal.call(self._binding.delete(list(ids), force=force))

    def purge(self, *, statuses: Iterable[str] = FINISHED_ORDER, older_than: Duration = 0) -> int:
        return self._portal.call(
            self._binding.purge(statuses=tuple(statuses), older_than=older_than)
        )

    def create_and_update(
        self, id: str, update: str, *args: Any, timeout: Duration | None = None, **options: Any
    ) -> Any:
        call = self._binding.create_and_update(id, update, *args, timeout=timeout, **options)
        return self._portal.call(call)


class SyncScheduleClient:
    """Synchronous twin of :class:`~stepline.triggers.cron.ScheduleClient`."""

    def __init__(self, portal: _Portal, client: ScheduleClient) -> None:
        self._portal = portal
        self._client = client

    def create(self, name: str, workflow: str, cron: str, **options: Any) -> ScheduleInfo:
        return self._portal.call(self._client.create(name, workflow, cron, **options))

    def update(self, name: str, /, **changes: Any) -> ScheduleInfo:
        return self._portal.call(self._client.update(name, **changes))

    def delete(self, name: str) -> ScheduleInfo:
        return self._portal.call(self._client.delete(name))

    def get(self, name: str) -> ScheduleInfo:
        return self._portal.call(self._client.get(name))

    def pause(self, name: str) -> ScheduleInfo:
        return self._portal.call(self._client.pause(name))

    def resume(self, name: str) -> ScheduleInfo:
        return self._portal.call(self._client.resume(name))

    def trigger(self, name: str, at: Moment | None = None) -> InstanceRecord:
        return self._portal.call(self._client.trigger(name, at))

    def backfill(self, name: str, start: Moment, end: Moment) -> Backfill:
        return self._portal.call(self._client.backfill(name, start, end))

    # Last: within the class body below this, ``list`` would mean this method.
    def list(self, workflow: str | None = None) -> builtins.list[ScheduleInfo]:
        return self._portal.call(self._client.list(workflow))


class SyncEngine:
    """Blocking client over an :class:`~stepline.Engine` (no worker unless ``worker=True``)."""

    def __init__(
        self,
        url: str | None = None,
        workflows: Iterable[Any] = (),
        *,
        worker: bool = False,
        **options: Any,
    ) -> None:
        self._portal = _Portal()
        self.engine = Engine(url, workflows, worker=worker, **options)
        try:
            self._portal.call(self.engine.__aenter__())
        except BaseException:
            self._portal.close()
            raise

    def workflow(self, workflow: str | Any) -> SyncWorkflowBinding:
        return SyncWorkflowBinding(self._portal, self.engine.workflow(workflow))

    def list_instances(
        self,
        workflow: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> InstancePage:
        return self._portal.call(self.engine.list_instances(workflow, status, limit, cursor))

    def list_workflows(self) -> list[WorkflowInfo]:
        return self._portal.call(self.engine.list_workflows())

    def list_workers(self) -> list[WorkerInfo]:
        return self._portal.call(self.engine.list_workers())

    def schedules(self) -> SyncScheduleClient:
        return SyncScheduleClient(self._portal, self.engine.schedules())

    def close(self) -> None:
        try:
            self._portal.call(self.engine.close())
        finally:
            self._portal.close()

    def __enter__(self) -> SyncEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
