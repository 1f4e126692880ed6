"""The :class:`Engine`: owns the registry, the store and the settings; opened explicitly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from . import _threads
from ._json import DEFAULT_MAX_PAYLOAD
from ._runtime import RuntimeHooks
from .client import Instance, WorkflowBinding, check_listing
from .clock import SystemClock
from .durations import Duration, parse_worker_duration
from .errors import DefinitionError, WorkflowNotFoundError
from .limits import Limit, check_limit_names
from .liveness import unserved_warning
from .records import InstancePage, InstanceRecord, PendingRetry, WorkerInfo, WorkflowInfo
from .retrying import read_retries
from .store import Store, create_store
from .store.base import WorkflowMeta
from .triggers.cron import ScheduleClient, Scheduler
from .worker import Reservation, Worker, WorkerSettings
from .workflow import WorkflowDefinition, check_schedule_names, definition_of, is_valid_name

log = logging.getLogger("stepline")

DEFAULT_URL = "sqlite:///stepline.db"
Listener = Callable[[str, dict[str, Any]], None]


class Engine:
    """Stepline's entry point.

    ``url`` selects the database (default: ``$STEPLINE_DATABASE_URL``, else
    ``sqlite:///stepline.db``). ``async with Engine(...) as engine:`` opens the store (creating
    and migrating the schema) and, unless ``worker=False``, runs an in-process worker for the
    registered ``workflows`` until the block exits.

    Worker settings: ``concurrency`` (activations at once), ``lease`` (how long a claim lasts
    without renewal: a dead worker's instances move on after it), ``poll_interval`` (longest idle
    wait between looks at the database), ``grace_period`` (how long running steps may finish at
    shutdown), ``max_payload`` (bytes, for params, results and event payloads), ``retention``
    (finished instances are deleted this long after they ended; default: kept forever),
    ``heartbeat`` (how often the worker writes its row in the worker list, which shows it live
    while its last heartbeat is at most three intervals old).

    ``clock``: a clock to follow instead of real time (tests: :class:`~stepline.ManualClock`),
    used as it is; without one the store keeps real time, on PostgreSQL the server's clock.

    ``create`` (default True): opening creates a SQLite file that does not exist (with its
    directories). A client that must not create a database no worker reads passes
    ``create=False``: a missing file then raises :class:`~stepline.ConfigError` naming it.

    ``limits``: the named limits (:class:`~stepline.Limit`) that workflows share by naming them
    in their ``limits``; registering a workflow that names one not given raises
    :class:`~stepline.DefinitionError`. Opening stores them with the workflows' own limits,
    which every worker's claims then apply.

    ``hooks``: the runtime's seam for :mod:`stepline.testing` (mocked steps, a virtual attempt
    clock); applications leave it out.
    """

    def __init__(
        self,
        url: str | None = None,
        workflows: Iterable[Any] = (),
        *,
        worker: bool = True,
        concurrency: int = 100,
        lease: Duration = 30,
        poll_interval: Duration = 0.5,
        grace_period: Duration = 10,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        retention: Duration | None = None,
        heartbeat: Duration = 5,
        clock: Callable[[], float] | None = None,
        worker_id: str | None = None,
        listeners: Iterable[Listener] = (),
        create: bool = True,
        limits: Iterable[Limit] = (),
        hooks: RuntimeHooks | None = None,
    ) -> None:
        self.url = url or os.environ.get("STEPLINE_DATABASE_URL") or DEFAULT_URL
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if max_payload < 1:
            raise ValueError(f"max_payload must be positive, got {max_payload}")
        self.settings = WorkerSettings(
            concurrency=concurrency,
            lease=parse_worker_duration("lease", lease, what="lease"),
            poll_interval=parse_worker_duration(
                "poll_interval", poll_interval, what="poll_interval"
            ),
            grace_period=parse_worker_duration("grace_period", grace_period, what="grace_period"),
            max_payload=max_payload,
            retention=None
            if retention is None
            else parse_worker_duration("retention", retention, what="retention"),
            heartbeat=parse_worker_duration("heartbeat", heartbeat, what="heartbeat"),
        )
        self.clock = clock or SystemClock()
        # Without a clock of the user's the store keeps real time its own way (PostgreSQL: the
        # server's clock), so it is given none.
        self.store: Store = create_store(self.url, clock, create=create)
        self._registry: dict[str, WorkflowDefinition] = {}
        self._limits = _named_limits(limits)
        self._opened = False
        for wf in workflows:
            self.register(wf)
        self._run_worker = worker
        self._worker_id = worker_id
        self._listeners = tuple(listeners)
        self._hooks = hooks
        self._worker: Worker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._scheduler: Scheduler | None = None
        self._db_workflows: set[str] = set()

    # -- registry --------------------------------------------------------------------------------

    def register(self, workflow: Any) -> WorkflowDefinition:
        """Register a workflow class, ``@workflow`` function, Pipeline or Dag."""
        if self._opened:
            raise DefinitionError("register workflows before the engine is opened")
        definition = definition_of(workflow)
        existing = self._registry.get(definition.name)
        if existing is not None and existing != definition:
            raise DefinitionError(
                f"two workflows are named {definition.name!r}: {existing.class_name} and "
                f"{definition.class_name}; give one of them another name"
            )
        check_schedule_names(self._registry.values(), definition)
        check_limit_names([(definition.name, definition.limits)], self._limits)
        self._registry[definition.name] = definition
        return definition

    @property
    def workflows(self) -> dict[str, WorkflowDefinition]:
        """The registered workflows by name."""
        return dict(self._registry)

    @property
    def limits(self) -> tuple[Limit, ...]:
        """The named limits given (each once)."""
        return self._limits

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the store and register the workflows in it. Idempotent."""
        if self._opened:
            return
        await self.store.open()
        self._opened = True
        if self._registry:
            metas = [_meta(definition) for definition in self._registry.values()]
            await self.store.register_workflows(metas, self._limits)

    async def close(self) -> None:
        """Stop the scheduler and the in-process worker (gracefully) and close the store."""
        if self._scheduler is not None:
            await self._scheduler.close()
        if self._worker_task is not None:
            assert self._worker is not None
            self._worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker_task
            self._worker_task = None
        _threads.release_idle()  # the threads of sync callbacks that no longer run
        if self._opened:
            await self.store.close()
            self._opened = False

    async def __aenter__(self) -> Engine:
        await self.open()
        if self._run_worker and self._registry:
            await self.scheduler.start()
            self._worker_task = asyncio.create_task(self.worker.run(), name="stepline-worker")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def worker(self) -> Worker:
        """This engine's worker (created on first use; started by ``async with`` or
        :meth:`run_worker`, or driven step by step with ``worker.run_once()``)."""
        if self._worker is None:
            self._worker = Worker(
                self.store,
                self._registry,
                self.settings,
                worker_id=self._worker_id,
                listeners=self._listeners,
                hooks=self._hooks,
            )
        return self._worker

    async def run_worker(self, *, handle_signals: bool = True) -> None:
        """Run a worker until SIGINT/SIGTERM (or ``engine.worker.stop()``), then shut down
        gracefully: stop claiming, let running steps finish within the grace period, release
        leases. A second SIGINT/SIGTERM cuts the grace period short (the leases are released
        all the same).

        The signals are handled from the start: one that comes while the store opens (and
        migrates) returns once the open is done, without claiming anything; a second one
        abandons the open at once."""
        worker = self.worker
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        signals = 0
        opening: asyncio.Future[None] | None = None

        def on_signal() -> None:
            # The first signal stops gracefully; another one (an impatient Ctrl-C) at once.
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
                    self.settings.grace_period,
                )
            worker.stop(at_once=signals > 1)

        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, on_signal)
                    installed.append(sig)
        try:
            opening = asyncio.ensure_future(self.open())
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

    # -- cron schedules --------------------------------------------------------------------------

    @property
    def scheduler(self) -> Scheduler:
        """This engine's scheduler for the registered workflows' schedules (created on first
        use; started next to the worker, or driven with ``sync()`` and ``run_once(now)``)."""
        if self._scheduler is None:
            self._scheduler = Scheduler(self.store, self._registry.values())
        return self._scheduler

    def schedules(self) -> ScheduleClient:
        """List, pause, resume, trigger and backfill the schedules stored in the database."""
        return ScheduleClient(self.store)

    # -- client ----------------------------------------------------------------------------------

    def workflow(self, workflow: str | Any) -> WorkflowBinding:
        """A binding to create and look up instances: by name, class, Pipeline or Dag."""
        name = workflow if isinstance(workflow, str) else definition_of(workflow).name
        return WorkflowBinding(
            self.store, name, self._check_workflow, self.settings.max_payload, self._reserve
        )

    def _reserve(self, workflow: str, count: int) -> Reservation | None:
        # This engine's worker, if one exists and runs, takes new instances straight from
        # create() (looked up at each create: the worker may start after the binding is made).
        return None if self._worker is None else self._worker.reserve(workflow, count)

    async def _check_workflow(self, name: str) -> None:
        if name in self._registry or name in self._db_workflows:
            return
        known = {info.name for info in await self.store.list_workflows()}
        self._db_workflows = known
        if name not in known:
            raise WorkflowNotFoundError(name, sorted(known | set(self._registry)))

    async def get_instance(self, workflow: str, instance_id: str) -> Instance:
        """A handle on an existing instance of ``workflow``."""
        return await self.workflow(workflow).get(instance_id)

    async def list_instances(
        self,
        workflow: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        *,
        oldest_first: bool = False,
    ) -> InstancePage:
        """Page through instances, newest first (or oldest first); pass ``page.cursor`` back
        for the next page."""
        check_listing(status, limit)
        if workflow is not None and not is_valid_name(workflow):
            return InstancePage([], None)  # no workflow can have that name: nothing to read
        return await self.store.list_instances(
            workflow, status, limit, cursor, oldest_first=oldest_first
        )

    def now(self) -> float:
        """The store's clock (seconds since the epoch): the time timers and leases follow (on
        PostgreSQL the server's), for showing how long ago or how soon something happens."""
        return self.store.now()

    async def list_workflows(self) -> list[WorkflowInfo]:
        """Workflows known to the database, with instance counts by status."""
        return await self.store.list_workflows()

    async def list_workers(self) -> list[WorkerInfo]:
        """Workers registered in the database, live or not (``info.live(engine.store.now())``),
        oldest first. A worker registers when it starts, beats every ``heartbeat`` seconds,
        deregisters when it stops gracefully; the row of one that died expires."""
        return await self.store.list_workers()

    async def retries(self, records: Sequence[InstanceRecord]) -> list[PendingRetry | None]:
        """For each record, the retry it waits for (:class:`~stepline.PendingRetry`: the step,
        its attempt that failed last, that attempt's error, when the next is due), or None.
        One read for all the records (a page of :meth:`list_instances`), none if all are
        finished."""
        return await read_retries(self.store, records)

    async def unserved_warnings(self, records: Sequence[InstanceRecord]) -> list[str | None]:
        """For each record, ``"no live worker serves 'name'"`` if it is due to run and no live
        worker runs its workflow, else None (:func:`stepline.liveness.unserved_warning`). Reads
        the worker list once, and only if some record is due."""
        now = self.store.now()
        if not any(r.due(now) for r in records):
            return [None] * len(records)
        workers = await self.store.list_workers()
        return [unserved_warning(record, workers, now) for record in records]


def _meta(definition: WorkflowDefinition) -> WorkflowMeta:
    """What the store keeps of a workflow: its code's name, description and limits."""
    return WorkflowMeta(
        definition.name, definition.class_name, definition.describe(), limits=definition.limits
    )


def _named_limits(limits: Iterable[Limit]) -> tuple[Limit, ...]:
    """The named limits, each once; one name defined twice differently raises."""
    given = tuple(limits)
    for limit in given:
        if not isinstance(limit, Limit):
            raise DefinitionError(f"Engine limits are stepline.Limit objects, not {limit!r}")
    check_limit_names((), given)
    return tuple({limit.name: limit for limit in given}.values())
