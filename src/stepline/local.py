"""The worker and the scheduler an engine runs in its own process: made on first use, started
with the engine (``async with Engine(...)``) or by ``Engine.run_worker``, stopped when the engine
closes or on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ._runtime import Observer, RuntimeHooks
from .store import Store
from .telemetry import Telemetry
from .triggers.cron import Scheduler
from .worker import Reservation, Worker, WorkerSettings
from .workflow import WorkflowDefinition

log = logging.getLogger("stepline")

Listener = Callable[[str, dict[str, Any]], None]


class LocalWorker:
    """One engine's in-process worker and scheduler."""

    def __init__(
        self,
        store: Store,
        registry: Mapping[str, WorkflowDefinition],
        settings: WorkerSettings,
        telemetry: Telemetry,
        *,
        worker_id: str | None,
        listeners: tuple[Listener, ...],
        hooks: RuntimeHooks | None,
        versions: Mapping[str, Mapping[str, WorkflowDefinition]] | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._versions = versions
        self._settings = settings
        self._telemetry = telemetry
        self._worker_id = worker_id
        self._listeners = listeners
        self._hooks = hooks
        self._worker: Worker | None = None
        self._task: asyncio.Task[None] | None = None
        self._scheduler: Scheduler | None = None

    @property
    def observer(self) -> Observer | None:
        """What observes the engine (the telemetry's observer), None when nothing does."""
        return self._telemetry.observer(self._store)

    @property
    def worker(self) -> Worker:
        """The worker, made on first use."""
        if self._worker is None:
            worker = self._worker = Worker(
                self._store,
                self._registry,
                self._settings,
                worker_id=self._worker_id,
                listeners=self._listeners,
                hooks=self._hooks,
                observer=self.observer,
                versions=self._versions,
            )
            metrics = self._telemetry.metrics
            if metrics is not None:
                metrics.watch_worker(lambda: worker.active_count, self._settings.concurrency)
        return self._worker

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler of the registered workflows' schedules, made on first use."""
        if self._scheduler is None:
            self._scheduler = Scheduler(
                self._store, self._registry.values(), observer=self.observer
            )
        return self._scheduler

    def wake_scheduler(self) -> None:
        """Let a running scheduler see a schedule made, changed or deleted in this process."""
        if self._scheduler is not None:
            self._scheduler.wake()

    @property
    def running(self) -> bool:
        """Whether the worker runs in the background (started with the engine)."""
        return self._task is not None

    def forget_worker(self) -> None:
        """Make the worker anew at its next use (the workflows it claims were fixed when it was
        made). Only while it does not run."""
        self._worker = None

    def reserve(self, workflow: str, count: int, version: str) -> Reservation | None:
        """Slots of the worker, if one exists and runs, for new instances of ``workflow`` at
        ``version``."""
        worker = self._worker
        return None if worker is None else worker.reserve(workflow, count, version)

    def reserve_update(self, workflow: str) -> Reservation | None:
        """A slot of the worker, if one exists and runs, for the instance of ``workflow`` an
        update is about to be sent to."""
        worker = self._worker
        return None if worker is None else worker.reserve_update(workflow)

    async def start(self) -> None:
        """Start the scheduler and the worker in the background."""
        await self.scheduler.start()
        self._task = asyncio.create_task(self.worker.run(), name="stepline-worker")

    async def stop(self) -> None:
        """Stop the scheduler and the background worker (gracefully)."""
        if self._scheduler is not None:
            await self._scheduler.close()
        if self._task is not None and self._worker is not None:
            self._worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run_until_signalled(
        self, open_engine: Callable[[], Awaitable[None]], *, handle_signals: bool
    ) -> None:
        """``Engine.run_worker``: open the engine, then run the scheduler and the worker until
        SIGINT/SIGTERM (or ``worker.stop()``). The first signal stops gracefully (one that comes
        while the engine opens returns once it is open, claiming nothing); another at once (one
        that comes while it opens abandons the open)."""
        worker = self.worker
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        signals = 0
        opening: asyncio.Future[None] | None = None

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if opening is None or not opening.done():
                if signals == 1:
                    log.info("stopping before the worker started; signal again to stop at once")
                elif opening is not None:
                    opening.cancel()
                return
            if signals == 1:
                log.info(
                    "stopping: running steps have %g s to finish; signal again to stop at once",
                    self._settings.grace_period,
                )
            worker.stop(at_once=signals > 1)

        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, on_signal)
                    installed.append(sig)
        try:
            opening = asyncio.ensure_future(open_engine())
            try:
                await opening
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if signals < 2 or (task is not None and task.cancelling()):
                    raise
                return  # abandoned by a second signal: nothing was claimed
            if signals:
                return
            await self.scheduler.start()
            await worker.run()
        finally:
            if self._scheduler is not None:
                await self._scheduler.close()
            for sig in installed:
                loop.remove_signal_handler(sig)
