"""The :class:`Engine`: owns the registry, the store and the settings; opened explicitly."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Unpack

from . import _threads
from ._json import DEFAULT_MAX_PAYLOAD
from ._runtime import Observer, RuntimeHooks
from .client import Instance, WorkflowBinding, check_listing
from .clock import SystemClock
from .durations import Duration, parse_duration, parse_worker_duration
from .errors import DefinitionError
from .limits import Limit
from .liveness import unserved_warning, version_served
from .local import LocalWorker
from .messages import Messaging
from .operations.bulk import Bulk
from .operations.language import Filter
from .operations.search import Ranges, build_filter, listing_filter, search
from .payloads import PayloadConfig, build_codec
from .payloads.records import open_instances
from .records import InstancePage, InstanceRecord, PendingRetry, WorkerInfo, WorkflowInfo
from .registry import Registry
from .retrying import read_retries
from .store import Store, create_store
from .telemetry import Activity, ActivityReadings, Telemetry
from .triggers.cron import ScheduleClient, Scheduler
from .versions import VersionState, version_states
from .worker import Worker, WorkerSettings
from .workflow import WorkflowDefinition, definition_of, is_valid_name, payload_type

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
    (the default retention: finished instances whose workflow or own retention does not name
    their outcome are deleted this long after they ended; default: kept forever),
    ``heartbeat`` (how often the worker writes its row in the worker list, which shows it live
    while its last heartbeat is at most three intervals old), ``stream_keep`` and
    ``stream_keep_for`` (what each stream an instance publishes to keeps: its last items, for
    how long; None: no age limit; docs/messaging.md).

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

    ``telemetry``: traces, metrics and the log context (:class:`stepline.telemetry.Telemetry`);
    by default traces are on when an OpenTelemetry tracer provider is configured, and nothing
    else is (docs/observability.md).

    ``payloads`` (:class:`~stepline.payloads.PayloadConfig`): offload values over
    ``offload_over`` to a blob store, encrypt stored values (docs/data.md); keys are read when
    the engine is made. Default: neither.
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
        stream_keep: int = 1000,
        stream_keep_for: Duration | None = "7 days",
        clock: Callable[[], float] | None = None,
        worker_id: str | None = None,
        listeners: Iterable[Listener] = (),
        create: bool = True,
        limits: Iterable[Limit] = (),
        hooks: RuntimeHooks | None = None,
        telemetry: Telemetry | None = None,
        payloads: PayloadConfig | None = None,
    ) -> None:
        self.url = url or os.environ.get("STEPLINE_DATABASE_URL") or DEFAULT_URL
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if max_payload < 1:
            raise ValueError(f"max_payload must be positive, got {max_payload}")
        self.payloads = build_codec(payloads, self.url, max_payload)
        """Seals stored values and opens them (offload, encryption; docs/data.md)."""
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
            stream_keep=_stream_keep(stream_keep),
            stream_keep_for=None
            if stream_keep_for is None
            else parse_duration(stream_keep_for, what="stream_keep_for"),
            payloads=self.payloads,
            sweep_grace=payloads.sweep_grace if payloads is not None else 3600.0,
        )
        self.clock = clock or SystemClock()
        # Without a clock of the user's the store keeps real time its own way (PostgreSQL: the
        # server's clock), so it is given none.
        self.store: Store = create_store(self.url, clock, create=create)
        self.registry = Registry(limits)
        self._registry = self.registry.definitions  # the dict the worker and scheduler read
        self._opened = False
        for wf in workflows:
            self.register(wf)
        self._run_worker = worker
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self._activity: ActivityReadings | None = None
        self._local = LocalWorker(
            self.store,
            self._registry,
            self.settings,
            self.telemetry,
            worker_id=worker_id,
            listeners=tuple(listeners),
            hooks=hooks,
            versions=self.registry.versions,
        )
        self._messaging = Messaging(
            self.store, max_payload, self._registry, self.registry.versions, self.payloads
        )

    # -- registry --------------------------------------------------------------------------------

    def register(self, workflow: Any) -> WorkflowDefinition:
        """Register a workflow class, ``@workflow`` function, Pipeline or Dag."""
        if self._opened:
            raise DefinitionError("register workflows before the engine is opened")
        return self.registry.add(workflow)

    async def add_workflow(self, workflow: Any) -> WorkflowDefinition:
        """Register a workflow in an engine that is open already and runs no worker in the
        background (a test's: ``stepline.testing``); it is stored at once, and the worker, if
        one was made, claims it from its next claim on."""
        if not self._opened:
            return self.register(workflow)
        if self._local.running:
            raise DefinitionError("register workflows before the engine's worker starts")
        definition = self.registry.add(workflow)
        await self.store.register_workflows(self.registry.metas([definition]), self.limits)
        self._local.forget_worker()
        return definition

    @property
    def workflows(self) -> dict[str, WorkflowDefinition]:
        """The registered workflows by name."""
        return dict(self._registry)

    @property
    def limits(self) -> tuple[Limit, ...]:
        """The named limits given (each once)."""
        return self.registry.limits

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the store and register the workflows in it. Idempotent."""
        if self._opened:
            return
        self.observer  # noqa: B018 - wired now: whether a tracer provider is configured
        await self.store.open()
        self._opened = True
        if self._registry:
            await self.store.register_workflows(self.registry.metas(), self.limits)

    async def close(self) -> None:
        """Stop the scheduler and the in-process worker (gracefully) and close the store."""
        await self._local.stop()
        _threads.release_idle()  # the threads of sync callbacks that no longer run
        if self._opened:
            await self.store.close()
            await self.payloads.close()
            self._opened = False

    async def __aenter__(self) -> Engine:
        await self.open()
        if self._run_worker and self._registry:
            await self._local.start()
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
        return self._local.worker

    @property
    def observer(self) -> Observer | None:
        """What observes this engine (:attr:`telemetry`'s observer), None when nothing does;
        wired the first time it is asked for."""
        return self._local.observer

    async def run_worker(self, *, handle_signals: bool = True) -> None:
        """Run a worker until SIGINT/SIGTERM (or ``engine.worker.stop()``), then shut down
        gracefully: stop claiming, let running steps finish within the grace period, release
        leases. A second SIGINT/SIGTERM cuts the grace period short (the leases are released
        all the same).

        The signals are handled from the start: one that comes while the store opens (and
        migrates) returns once the open is done, without claiming anything; a second one
        abandons the open at once."""
        await self._local.run_until_signalled(self.open, handle_signals=handle_signals)

    # -- cron schedules --------------------------------------------------------------------------

    @property
    def scheduler(self) -> Scheduler:
        """This engine's scheduler for the registered workflows' schedules (created on first
        use; started next to the worker, or driven with ``sync()`` and ``run_once(now)``)."""
        return self._local.scheduler

    def schedules(self) -> ScheduleClient:
        """Create, update and delete schedules at run time; list, pause, resume, trigger and
        backfill the schedules stored in the database."""
        return ScheduleClient(
            self.store,
            check_workflow=self._check_workflow,
            declared=self._declared_schedules,
            changed=self._local.wake_scheduler,
        )

    def _declared_schedules(self) -> set[str]:
        """The names of the schedules the registered workflows declare (stored or not yet)."""
        return {s.key for d in self.registry.definitions.values() for s in d.schedules}

    # -- client ----------------------------------------------------------------------------------

    def workflow(self, workflow: str | Any) -> WorkflowBinding:
        """A binding to create and look up instances: by name, class, Pipeline or Dag."""
        name = workflow if isinstance(workflow, str) else definition_of(workflow).name
        definition = self.registry.definitions.get(name)
        return WorkflowBinding(
            self.store,
            name,
            self._check_workflow,
            self.settings.max_payload,
            self._local.reserve,
            self.observer,
            self._messaging,
            self._version_of,
            self.payloads,
            params_type=None if definition is None else payload_type(definition.cls),
            timeout_of=self.registry.timeout_of,
        )

    async def _check_workflow(self, name: str) -> None:
        await self.registry.check_known(self.store, name)

    async def _version_of(self, name: str, version: str | None) -> str:
        """The version a create of ``name`` uses: ``version`` (checked), or the newest one.
        Known from this engine's registry, else from the versions live workers serve."""
        if name in self.registry.versions:
            return self.registry.version_of(name, version)
        now = self.store.now()
        live = [w for w in await self.store.workers.list_workers() if w.live(now)]
        return version_served(name, version, live)

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
        values: bool = True,
        where: str | Filter | None = None,
        **ranges: Unpack[Ranges],
    ) -> InstancePage:
        """Page through instances, newest first (or oldest first); pass ``page.cursor`` back
        for the next page. ``values=False``: params and outputs as stored (offloaded or
        encrypted ones not fetched nor opened), for listings that do not show them.
        ``where``: a filter (docs/operations.md), a bad one raises ``FilterError`` naming its
        column; the ranges bound the creation and end times. A filtered list's records carry
        their tags."""
        check_listing(status, limit)
        if workflow is not None and not is_valid_name(workflow):
            return InstancePage([], None)  # no workflow can have that name: nothing to read
        chosen = listing_filter(where, workflow=workflow, status=status, **ranges)
        if chosen is not None:
            page = await search(self.store, chosen, limit, cursor, oldest_first=oldest_first)
        else:
            page = await self.store.list_instances(
                workflow, status, limit, cursor, oldest_first=oldest_first
            )
        if not values:
            return page
        return InstancePage(await open_instances(self.payloads, page.instances), page.cursor)

    async def count_instances(
        self, where: str | Filter | None = None, *, workflow: str | None = None
    ) -> int:
        """How many instances match ``where`` (and are of ``workflow``, if given)."""
        chosen = build_filter(where, workflow=workflow)
        return await self.store.operations.count(chosen or Filter(None))

    @property
    def bulk(self) -> Bulk:
        """Bulk actions by filter: dry runs, durable jobs, their progress (docs/operations.md)."""
        return Bulk(self.store)

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
        return await self.store.workers.list_workers()

    async def activity(self) -> Activity:
        """The fleet's activity: instances ended per minute over the last hour by status, and
        now the backlog, what limits hold, instances by status, live workers (bounded reads,
        kept a few seconds; the dashboard's chart)."""
        if self._activity is None:
            self._activity = ActivityReadings(self.store, self.telemetry.fleet_ttl)
        return await self._activity.get()

    async def retries(self, records: Sequence[InstanceRecord]) -> list[PendingRetry | None]:
        """For each record, the retry it waits for (:class:`~stepline.PendingRetry`: the step,
        its attempt that failed last, that attempt's error, when the next is due), or None.
        One read for all the records (a page of :meth:`list_instances`), none if all are
        finished."""
        return await read_retries(self.store, records)

    async def workflow_versions(self, name: str) -> list[VersionState]:
        """Per version of workflow ``name``: its instances by status, the live workers that
        serve it, whether it is drained (:mod:`stepline.versions`). Unknown workflows raise
        :class:`~stepline.WorkflowNotFoundError`."""
        await self._check_workflow(name)
        counts = await self.store.version_counts(name)
        workers = await self.store.workers.list_workers()
        known = self.registry.versions.get(name, {})
        return version_states(name, counts, workers, self.store.now(), known)

    async def unserved_warnings(self, records: Sequence[InstanceRecord]) -> list[str | None]:
        """For each record, ``"no live worker serves 'name'"`` if it is due to run and no live
        worker runs its workflow, else None (:func:`stepline.liveness.unserved_warning`). Reads
        the worker list once, and only if some record is due."""
        now = self.store.now()
        if not any(r.due(now) for r in records):
            return [None] * len(records)
        workers = await self.store.workers.list_workers()
        return [unserved_warning(record, workers, now) for record in records]


def _stream_keep(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"stream_keep must be a whole number of items, at least 1, got {value!r}")
    return value
