"""The :class:`Engine`: owns the registry, the store and the settings; opened explicitly."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from . import _threads
from ._engine_reads import EngineReads
from ._json import DEFAULT_MAX_PAYLOAD
from ._runtime import Observer, RuntimeHooks
from .client import Instance, WorkflowBinding
from .clock import SystemClock
from .durations import Duration, parse_duration, parse_worker_duration
from .errors import DefinitionError
from .limits import Limit
from .liveness import version_served
from .local import LocalWorker
from .messages import Messaging
from .payloads import PayloadConfig, build_codec
from .registry import Registry
from .store import Store, create_store
from .telemetry import ActivityReadings, Telemetry
from .triggers.cron import ScheduleClient, Scheduler
from .worker import Worker, WorkerSettings
from .workflow import WorkflowDefinition, definition_of, payload_type

log = logging.getLogger("stepline")

DEFAULT_URL = "sqlite:///stepline.db"
Listener = Callable[[str, dict[str, Any]], None]


class Engine(EngineReads):
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
            self.store,
            max_payload,
            self._registry,
            self.registry.versions,
            self.payloads,
            self._local.reserve_update,
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


def _stream_keep(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"stream_keep must be a whole number of items, at least 1, got {value!r}")
    return value
