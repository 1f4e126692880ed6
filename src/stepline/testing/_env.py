"""The test environment: a real :class:`~stepline.Engine` on a throwaway database, driven by a
virtual clock, with mocks and replay checks."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from types import TracebackType
from typing import Any

from ..client import Instance
from ..clock import ManualClock
from ..durations import Duration, parse_duration
from ..engine import Engine
from ..replaycheck import replay
from ..step import WorkflowStep
from ..workflow import WorkflowEvent, definition_of, workflow
from ._awaiting import Tracker, tracked
from ._driver import Driver
from ._instance import TestInstance
from ._mocks import MockError, Mocking, Rules, TestHooks, stub, unknown_names
from ._stores import Database

DEFAULT_START = 1_767_225_600.0
"""Where the virtual clock starts unless told: 2026-01-01 00:00 UTC, the same in every run."""


class WorkflowTestEnv(Mocking):
    """A real engine for tests, on a virtual clock.

    ``workflows``: those its instances run (more with :meth:`register` before the first
    instance). ``store``: ``"sqlite"`` (a temporary file, the default), ``"memory"``,
    ``"postgres"`` (a fresh schema on ``$STEPLINE_TEST_DATABASE_URL``, else
    ``postgresql://postgres@127.0.0.1:5432/test``, dropped at the end), or a database URL the
    test owns. ``start``: where the clock starts (epoch seconds or a datetime); ``clock``: a
    :class:`~stepline.ManualClock` to share instead. ``stall_after``: real seconds a run may
    take before the env gives up on step callbacks that never return. Other keyword arguments
    go to the :class:`~stepline.Engine` (``limits``, ``max_payload``, ...).

    Nothing runs until the test asks: :meth:`run_until_idle` runs what can run now,
    :meth:`advance` moves the clock (firing every timer on the way), and the waits of
    :class:`TestInstance` pass virtual time until what they wait for has happened.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        workflows: Iterable[Any] = (),
        *,
        store: str = "sqlite",
        start: float | datetime | None = None,
        clock: ManualClock | None = None,
        stall_after: float = 60.0,
        **engine_options: Any,
    ) -> None:
        if clock is None:
            begin = DEFAULT_START if start is None else start
            clock = ManualClock(begin.timestamp() if isinstance(begin, datetime) else begin)
        self.clock = clock
        self.hooks = TestHooks(clock)
        self._database = Database(store)
        self.engine = Engine(
            self._database.url,
            workflows,
            worker=False,
            clock=clock,
            hooks=self.hooks,
            **engine_options,
        )
        self.tracker = Tracker()
        self._driver = Driver(self.engine, clock, self.hooks, stall_after)
        self._instances: dict[tuple[str, str], TestInstance] = {}
        self._opened = False
        self._closed = False

    @property
    def url(self) -> str:
        """The database URL of this environment."""
        return self._database.url

    # -- life ------------------------------------------------------------------------------------

    def register(self, *workflows: Any) -> None:
        """Add workflows before the engine opens (it registers them then): before entering
        ``async with``, or without it before the first call that runs anything."""
        if self._opened:
            raise MockError(
                "register workflows before entering `async with WorkflowTestEnv(...)` (the "
                "engine opens there), or without it before the env's first instance: pass them "
                "to WorkflowTestEnv([...]) or call env.register(...) first"
            )
        for wf in workflows:
            self.engine.register(wf)

    @tracked("env")
    async def open(self) -> None:
        """Open the engine (done on entering ``async with``, else by the first call that needs
        it)."""
        await self._open()

    async def _open(self) -> None:
        if self._closed:
            raise RuntimeError("this WorkflowTestEnv is closed")
        if not self._opened:
            self._opened = True
            await self.engine.open()

    async def close(self, *, check: bool = True) -> None:
        """Close the engine and delete the database this env created. With ``check``, first
        raise for calls never awaited and mocks that matched nothing."""
        if self._closed:
            return
        try:
            if check:
                self.tracker.check()
                await self._check_mocks()
        finally:
            self._closed = True
            try:
                await self.engine.close()
            finally:
                await self._database.remove()

    async def __aenter__(self) -> WorkflowTestEnv:
        # Open at once, so that ``env.engine`` is usable inside the block like the env's own
        # calls; workflows are registered before it (or passed to the constructor).
        try:
            await self._open()
        except BaseException:
            await self.close(check=False)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(check=exc is None)

    # -- time ------------------------------------------------------------------------------------

    def now(self) -> float:
        """The virtual time (epoch seconds)."""
        return self.clock()

    @tracked("env")
    async def advance(self, duration: Duration) -> int:
        """Move virtual time forward by ``duration`` (``"3 days"``, seconds), running every
        instance at each timer on the way; return how many activations ran. Awaited in a step's
        callback, it makes the step take that long: the attempt times out if that passes its
        ``timeout``."""
        seconds = parse_duration(duration, what="advance", allow_zero=True)
        if not self._driver.in_callback():
            await self._open()
        return await self._driver.advance(seconds)

    @tracked("env")
    async def run_until_idle(self) -> int:
        """Run every instance until none can go on without time passing or an event; return
        how many activations ran."""
        await self._open()
        return await self._driver.run_until_idle()

    # -- instances -------------------------------------------------------------------------------

    @tracked("env")
    async def create(
        self, workflow: Any, /, id: str | None = None, params: Any = None, **options: Any
    ) -> TestInstance:
        """Create an instance of ``workflow`` (a name, class, Pipeline or Dag; one not yet
        registered is registered first). It runs when the test runs the env: set its mocks
        first."""
        await self._open()
        if (
            not isinstance(workflow, str)
            and definition_of(workflow).name not in self.engine.workflows
        ):
            await self.engine.add_workflow(workflow)
        return self._wrap(await self.engine.workflow(workflow).create(id, params, **options))

    @tracked("env")
    async def get(self, workflow: Any, id: str) -> TestInstance:
        """An existing instance (a child, for example)."""
        await self._open()
        return self._wrap(await self.engine.workflow(workflow).get(id))

    def _wrap(self, client: Instance) -> TestInstance:
        key = (client.workflow, client.id)
        if key not in self._instances:
            self._instances[key] = TestInstance(client, self._driver, self.hooks, self.tracker)
        return self._instances[key]

    @tracked("env")
    async def send_event(self, instance: TestInstance, type: str, payload: Any = None) -> None:
        """Send ``instance`` an event (kept until a ``wait_for_event`` of that type takes it)."""
        await instance.client.send_event(type, payload)

    # -- mocks of every instance (Mocking: mock_step, mock_event_timeout, disable_sleeps) --------

    def _mock_rules(self) -> Rules:
        return self.hooks.every

    def stub_workflow(self, name: str, output: Any = None, *, error: str | None = None) -> None:
        """Run every instance of workflow ``name`` (children, typically) as a stub that ends at
        once: complete with ``output``, or errored with ``error``. A workflow not registered is
        registered as the stub (before the engine opens, as :meth:`register`)."""
        stub(self.hooks.every, name, output, error)
        if name not in self.engine.workflows:
            self.register(_placeholder(name))

    # -- replay ----------------------------------------------------------------------------------

    @tracked("env")
    async def replay(self, instance: TestInstance, workflow: Any = None) -> None:
        """Replay ``instance``'s recorded history with the workflow's code as it is now (or
        ``workflow``): raise :class:`ReplayError` naming the step where it no longer follows the
        history. Nothing of the instance changes, and no step callback runs."""
        await self._open()
        record = await instance.client.record()
        steps = await instance.client.steps()
        code = definition_of(workflow) if workflow is not None else None
        if code is None:
            code = self.engine.workflows[record.workflow]
        await replay(record, steps, code.make(), self.clock, self.engine.settings.max_payload)

    # -- checks ----------------------------------------------------------------------------------

    async def _check_mocks(self) -> None:
        if not self.hooks.instances and not self.hooks.every.unused():
            return  # no mock to check: no reads
        for handle in self._instances.values():
            status = (await handle.client.status()).status
            await handle.check_mocks(ended=status in ("complete", "errored", "terminated"))
        unused = self.hooks.every.unused()
        if unused and self._instances:
            ran: list[str] = []
            for handle in self._instances.values():
                ran += [s.name for s in await handle.client.steps()]
            raise MockError(f"in every instance: {unknown_names(unused, ran)}")


def _placeholder(name: str) -> Any:
    """A workflow named ``name`` that only stubs run (the env's hook replaces its code)."""

    async def stubbed(event: WorkflowEvent, step: WorkflowStep) -> Any:
        raise MockError(f"workflow {name!r} is stubbed in this env, but no stub applies here")

    return workflow(name=name)(stubbed)
