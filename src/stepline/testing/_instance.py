"""One instance under test: its own mocks, and waits that pass virtual time until what the test
asks for has happened (a status, a step's result, the end), reading the engine's records."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..client import Instance
from ..errors import StepFailedError, WorkflowFailedError
from ..records import (
    FINISHED_STATUSES,
    Attempt,
    EventRecord,
    InstanceStatus,
    InstanceStatusName,
    StepRecord,
)
from ._awaiting import Tracker, tracked
from ._driver import Driver
from ._mocks import MockError, Mocking, Rules, TestHooks, misspelled, stub, unknown_names

T = TypeVar("T")

MAX_TIMERS = 10_000
"""Timers a wait passes before it gives up (a workflow that sleeps in a loop for ever)."""


class StuckError(AssertionError):
    """What a wait asked for cannot happen without the test: the instance waits for an event
    (or a child, or a paused instance for a resume), or it ended without it."""


_NOT_YET: Any = object()


class TestInstance(Mocking):
    """An instance of a :class:`~stepline.testing.WorkflowTestEnv` (``await env.create(...)``).

    Its coroutine methods run the engine first: those that wait (:meth:`wait`,
    :meth:`wait_for_status`, :meth:`step_result`, :meth:`output`, ...) pass virtual time from
    timer to timer until what they wait for has happened; the others read the instance once
    nothing more can run at the current time.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, client: Instance, driver: Driver, hooks: TestHooks, tracker: Tracker):
        self.client = client
        """The engine's own handle (:class:`~stepline.Instance`): pause, terminate, restart..."""
        self.workflow = client.workflow
        self.id = client.id
        self.tracker = tracker
        self._driver = driver
        self._hooks = hooks
        self._reported = False

    def __repr__(self) -> str:
        return f"<TestInstance {self.workflow}/{self.id}>"

    # -- mocks of this instance (Mocking: mock_step, mock_event_timeout, disable_sleeps) ---------

    def stub_child(self, workflow: str, output: Any = None, *, error: str | None = None) -> None:
        """Run the children of ``workflow`` this instance starts as a stub: they end at once,
        complete with ``output``, or errored with ``error`` (the workflow must be registered, or
        stubbed for every instance with :meth:`WorkflowTestEnv.stub_workflow`)."""
        stub(self._mock_rules(), workflow, output, error)

    def _mock_rules(self) -> Rules:
        return self._hooks.rules((self.workflow, self.id))

    # -- the engine's view -----------------------------------------------------------------------

    @tracked("inst")
    async def send_event(self, type: str, payload: Any = None) -> None:
        """Send the instance an event (the engine's own ``send_event``)."""
        await self.client.send_event(type, payload)

    @tracked("inst")
    async def status(self) -> InstanceStatus:
        """Its status once nothing more can run at the current virtual time."""
        await self._driver.run_until_idle()
        status: InstanceStatus = await self.client.status()
        return status

    @tracked("inst")
    async def steps(self) -> list[StepRecord]:
        """Its step records (with attempts) once nothing more can run now."""
        await self._driver.run_until_idle()
        return await self.client.steps()

    @tracked("inst")
    async def steps_run(self) -> list[str]:
        """The names of the steps it ran so far, in the order they started (a step called
        twice appears twice; sleeps, waits and rollbacks included)."""
        await self._driver.run_until_idle()
        return [s.name for s in await self.client.steps()]

    @tracked("inst")
    async def attempts(self, name: str, count: int = 1) -> tuple[Attempt, ...]:
        """The attempts of step ``name`` (occurrence ``count``) so far."""
        await self._driver.run_until_idle()
        for record in await self.client.steps():
            if (record.name, record.count) == (name, count):
                return record.attempts
        return ()

    @tracked("inst")
    async def assert_step_ran(self, name: str, times: int) -> None:
        """Assert that step ``name`` ran exactly ``times`` times so far: its attempts, over
        every occurrence (a sleep or wait counts once per occurrence)."""
        await self._driver.run_until_idle()
        found = [s for s in await self.client.steps() if s.name == name]
        ran = sum(len(s.attempts) if s.kind in ("do", "rollback") else 1 for s in found)
        if ran != times:
            detail = "; ".join(
                f"{s.display_name}: {[a.state for a in s.attempts] or s.status}" for s in found
            )
            raise AssertionError(
                f"step {name!r} of {self.workflow}/{self.id} ran {ran} times, not {times}"
                + (f" ({detail})" if detail else "")
            )

    # -- waits -----------------------------------------------------------------------------------

    @tracked("inst")
    async def wait(self) -> InstanceStatus:
        """Pass virtual time until the instance ends (complete, errored or terminated)."""
        return await self._end()

    @tracked("inst")
    async def wait_for_status(self, *statuses: InstanceStatusName) -> InstanceStatus:
        """Pass virtual time until the instance has one of ``statuses``."""

        async def reached() -> Any:
            status = await self.client.status()
            return status if status.status in statuses else _NOT_YET

        status: InstanceStatus = await self._until(reached, f"status {' or '.join(statuses)}")
        return status

    @tracked("inst")
    async def step_result(self, name: str, count: int = 1) -> Any:
        """Pass virtual time until step ``name`` (occurrence ``count``) has finished; return
        its result as ``run()`` got it (an :class:`~stepline.EventRecord` for a wait, None
        for a sleep), or raise :class:`~stepline.StepFailedError` if it failed."""

        async def finished() -> Any:
            for record in await self.client.steps():
                if (record.name, record.count) == (name, count):
                    return _result(record)
            return _NOT_YET

        return await self._until(finished, f"step {name}-{count}")

    @tracked("inst")
    async def output(self) -> Any:
        """Pass virtual time until it ends; its output, or :class:`~stepline.WorkflowFailedError`
        if it did not complete."""
        status = await self._end()
        if status.status != "complete":
            raise WorkflowFailedError(self.workflow, self.id, status.status, status.error)
        return status.output

    @tracked("inst")
    async def error(self) -> dict[str, str] | None:
        """Pass virtual time until it ends; its error (``{"name", "message"}``), None if it
        completed."""
        return (await self._end()).error

    @tracked("inst")
    async def rollback(self) -> dict[str, Any] | None:
        """Pass virtual time until it ends; how its rollbacks went (None: none ran)."""
        return (await self._end()).rollback

    # -- helpers ---------------------------------------------------------------------------------

    async def _end(self) -> InstanceStatus:
        async def finished() -> Any:
            status = await self.client.status()
            return status if status.status in FINISHED_STATUSES else _NOT_YET

        status: InstanceStatus = await self._until(finished, "the end")
        return status

    async def _until(self, test: Callable[[], Awaitable[Any]], what: str) -> Any:
        driver = self._driver
        await driver.run_until_idle()
        for _ in range(MAX_TIMERS):
            found = await test()
            status = await self.client.status()
            if status.status in FINISHED_STATUSES:
                await self.check_mocks(ended=True)
            if found is not _NOT_YET:
                return found
            if status.status in FINISHED_STATUSES or not await driver.skip():
                raise StuckError(f"waiting for {what}: {await self._describe(status)}")
        raise StuckError(f"waiting for {what}: still not there after {MAX_TIMERS} timers")

    async def _describe(self, status: InstanceStatus) -> str:
        label = f"{self.workflow}/{self.id}"
        steps = await self.client.steps()
        ran = ", ".join(s.display_name for s in steps) or "none"
        if status.status in FINISHED_STATUSES:
            return f"{label} ended {status.status} (steps run: {ran})"
        waits = [_waiting_for(s) for s in steps if s.status == "waiting"]
        shown = "; ".join(w for w in waits if w) or "a resume or an event"
        return f"{label} is {status.status}, waiting for {shown}; no timer is left to pass"

    async def check_mocks(self, *, ended: bool) -> None:
        """Raise :class:`MockError` for this instance's mocks that matched nothing it ran (once):
        all of them if it ``ended``, else those that look like a typo of a step it ran."""
        if self._reported:
            return
        rules = self._hooks.instances.get((self.workflow, self.id))
        unused = rules.unused() if rules is not None else []
        if not unused:
            return
        ran = [s.name for s in await self.client.steps()]
        if not ended:
            unused = misspelled(unused, ran)
        if unused:
            self._reported = True
            raise MockError(f"{self.workflow}/{self.id}: {unknown_names(unused, ran)}")


def _result(record: StepRecord) -> Any:
    if record.status == "errored":
        error = record.error or {}
        raise StepFailedError(
            record.display_name, error.get("name", "Error"), error.get("message", "")
        )
    if record.status != "complete":
        return _NOT_YET
    if record.kind == "wait_for_event":
        out = record.output
        return EventRecord(out["type"], out["payload"], out["timestamp"])
    return record.output


def _waiting_for(record: StepRecord) -> str:
    info = record.info or {}
    if record.kind == "wait_for_event":
        return f"event {info.get('type')!r} (step {record.display_name!r})"
    if record.kind == "wait_for_workflow":
        return f"child {info.get('workflow')}/{info.get('id')} (step {record.display_name!r})"
    return ""
