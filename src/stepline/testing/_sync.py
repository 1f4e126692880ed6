"""The synchronous twin of the test environment, for tests that are not ``async``: each call
runs the async environment's on the sync facade's event loop (:mod:`stepline.sync`) and waits.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from types import TracebackType
from typing import Any

from ..clock import ManualClock
from ..durations import Duration
from ..records import Attempt, InstanceStatus, InstanceStatusName, StepRecord
from ..sync import _Portal
from ._env import WorkflowTestEnv
from ._instance import TestInstance
from ._mocks import Mocking, Rules


class TestInstanceSync(Mocking):
    """Blocking twin of :class:`~stepline.testing.TestInstance` (same methods)."""

    __test__ = False  # not a pytest test class

    def __init__(self, portal: _Portal, instance: TestInstance) -> None:
        self._portal = portal
        self.instance = instance
        self.id = instance.id
        self.workflow = instance.workflow

    def _mock_rules(self) -> Rules:
        return self.instance._mock_rules()

    def stub_child(self, workflow: str, output: Any = None, *, error: str | None = None) -> None:
        self.instance.stub_child(workflow, output, error=error)

    def send_event(self, type: str, payload: Any = None) -> None:
        self._portal.call(self.instance.send_event(type, payload))

    def status(self) -> InstanceStatus:
        return self._portal.call(self.instance.status())

    def steps(self) -> list[StepRecord]:
        return self._portal.call(self.instance.steps())

    def steps_run(self) -> list[str]:
        return self._portal.call(self.instance.steps_run())

    def attempts(self, name: str, count: int = 1) -> tuple[Attempt, ...]:
        return self._portal.call(self.instance.attempts(name, count))

    def assert_step_ran(self, name: str, times: int) -> None:
        self._portal.call(self.instance.assert_step_ran(name, times))

    def wait(self) -> InstanceStatus:
        return self._portal.call(self.instance.wait())

    def wait_for_status(self, *statuses: InstanceStatusName) -> InstanceStatus:
        return self._portal.call(self.instance.wait_for_status(*statuses))

    def step_result(self, name: str, count: int = 1) -> Any:
        return self._portal.call(self.instance.step_result(name, count))

    def output(self) -> Any:
        return self._portal.call(self.instance.output())

    def error(self) -> dict[str, str] | None:
        return self._portal.call(self.instance.error())

    def rollback(self) -> dict[str, Any] | None:
        return self._portal.call(self.instance.rollback())


class WorkflowTestEnvSync(Mocking):
    """Blocking twin of :class:`~stepline.testing.WorkflowTestEnv` (same arguments, same
    methods): ``with WorkflowTestEnvSync([Checkout]) as env: ...``."""

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
        self.env = WorkflowTestEnv(
            workflows,
            store=store,
            start=start,
            clock=clock,
            stall_after=stall_after,
            **engine_options,
        )
        self._portal = _Portal()
        self._closed = False

    def register(self, *workflows: Any) -> None:
        self.env.register(*workflows)

    def close(self, *, check: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._portal.call(self.env.close(check=check))
        finally:
            self._portal.close()

    def __enter__(self) -> WorkflowTestEnvSync:
        # Opens the engine, as ``async with WorkflowTestEnv(...)`` does.
        try:
            self._portal.call(self.env.__aenter__())
        except BaseException:
            self.close(check=False)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(check=exc is None)

    def now(self) -> float:
        return self.env.now()

    def advance(self, duration: Duration) -> int:
        return self._portal.call(self.env.advance(duration))

    def run_until_idle(self) -> int:
        return self._portal.call(self.env.run_until_idle())

    def create(
        self, workflow: Any, id: str | None = None, params: Any = None, **options: Any
    ) -> TestInstanceSync:
        made = self._portal.call(self.env.create(workflow, id, params, **options))
        return TestInstanceSync(self._portal, made)

    def get(self, workflow: Any, id: str) -> TestInstanceSync:
        return TestInstanceSync(self._portal, self._portal.call(self.env.get(workflow, id)))

    def send_event(self, instance: TestInstanceSync, type: str, payload: Any = None) -> None:
        self._portal.call(self.env.send_event(instance.instance, type, payload))

    def _mock_rules(self) -> Rules:
        return self.env._mock_rules()

    def stub_workflow(self, name: str, output: Any = None, *, error: str | None = None) -> None:
        self.env.stub_workflow(name, output, error=error)

    def replay(self, instance: TestInstanceSync, workflow: Any = None) -> None:
        self._portal.call(self.env.replay(instance.instance, workflow))
