"""Mocks: what a test puts in place of a step's callback, a timer or a child workflow, for every
instance or for one, applied by the runtime's seam (:class:`~stepline._runtime.RuntimeHooks`).

The engine still runs every step as it would: a mocked result is recorded, a mocked failure is
retried by the step's own policy, a forced timeout is the error a real one records. Each mock
notes whether it was used, so a mock of a step that never ran (a misspelled name) is reported.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .._runtime import RunningMarks, RuntimeHooks, timeout_error, validate_step_name
from ..clock import ManualClock
from ..errors import SteplineError
from ..records import InstanceRecord, StepKind
from ..step import StepContext, WorkflowStep
from ..workflow import Workflow, WorkflowEvent, validate_name

InstanceKey = tuple[str, str] | None
"""(workflow, id) of the instance a mock is for; None: every instance."""

_UNSET: Any = object()


class StepError(Exception):
    """A failure to raise from a mocked step: ``StepError("card declined", times=2)`` fails the
    first two attempts (then the step runs, or returns its mocked result); without ``times``
    every attempt fails. The attempt's recorded error is ``StepError: card declined``."""

    def __init__(self, message: str, *, times: int | None = None) -> None:
        super().__init__(message)
        if times is not None and (isinstance(times, bool) or times < 1):
            raise ValueError(
                f"times must be a whole number from 1 (or None: always), not {times!r}"
            )
        self.message = message
        self.times = times


class MockError(SteplineError):
    """A mock that cannot apply: it named a step, wait or child workflow that never ran."""


@dataclass
class StepMock:
    """What one step's attempts do instead of (or before) its callback."""

    result: Any = _UNSET
    error: BaseException | None = None
    fails: int | None = None
    """How many first attempts fail (None: every one), when ``error`` or ``timeout`` is set."""
    timeout: bool = False
    callback: Callable[[], Any] | None = None
    """Runs instead of the step's callback (sync or async, no argument)."""
    used: bool = False

    async def attempt(self, context: StepContext, call: Callable[[], Awaitable[Any]]) -> Any:
        self.used = True
        fails_now = self.fails is None or context.attempt <= self.fails
        if self.timeout and fails_now:
            label = f"{context.step_name}-{context.count}"
            raise timeout_error(label, context.attempt, context.config.timeout)
        error = self.error
        if error is not None and fails_now:
            # A fresh exception per attempt: one raised again would carry every traceback.
            raise StepError(error.message) if isinstance(error, StepError) else error
        if self.result is not _UNSET:
            return self.result
        if self.callback is not None:
            result = self.callback()
            return await result if inspect.isawaitable(result) else result
        return await call()


@dataclass
class Stub:
    """A child workflow replaced: it ends at once, complete with ``output`` or errored."""

    output: Any = None
    error: str | None = None
    used: bool = False


class StubError(Exception):
    """The error a stubbed child workflow ends with."""


class StubWorkflow(Workflow):
    """Runs an instance as its :class:`Stub` says, without steps."""

    def __init__(self, stub: Stub) -> None:
        self._stub = stub

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        if self._stub.error is not None:
            raise StubError(self._stub.error)
        return self._stub.output


@dataclass
class Rules:
    """The mocks of one instance (or of every instance)."""

    steps: dict[str, StepMock] = field(default_factory=dict)
    event_timeouts: dict[str, bool] = field(default_factory=dict)
    """wait_for_event step names whose wait times out at once: used or not."""
    no_sleeps: bool = False
    children: dict[str, Stub] = field(default_factory=dict)

    def unused(self) -> list[str]:
        found = [f"mock_step({n!r})" for n, m in self.steps.items() if not m.used]
        found += [f"mock_event_timeout({n!r})" for n, u in self.event_timeouts.items() if not u]
        found += [f"stub_child({n!r})" for n, s in self.children.items() if not s.used]
        return found


class Mocking:
    """The mock methods an environment and its instances share, on the rules that
    :meth:`_mock_rules` gives (every instance's, or one's)."""

    def _mock_rules(self) -> Rules:
        raise NotImplementedError

    def mock_step(
        self,
        name: str,
        result: Any = _UNSET,
        *,
        error: BaseException | None = None,
        timeout: bool | int = False,
        callback: Callable[[], Any] | None = None,
    ) -> None:
        """Mock step ``name``. ``result``: the step returns it without running its callback.
        ``error``: attempts raise it: a :class:`StepError` with ``times=N`` the first N attempts
        (then the callback runs, or ``result`` is returned), any other exception every attempt.
        ``timeout``: attempts time out as if they ran past the step's timeout (``True``: every
        attempt; N: the first N). ``callback``: runs instead of the step's own (sync or async,
        no argument). The step's retry policy applies as always, and its outcome is recorded.
        """
        validate_step_name(name)
        if timeout is not False and error is not None:
            raise ValueError(f"mock_step({name!r}): give error= or timeout=, not both")
        if result is not _UNSET and callback is not None:
            raise ValueError(f"mock_step({name!r}): give a result or a callback, not both")
        if result is _UNSET and error is None and timeout is False and callback is None:
            raise ValueError(f"mock_step({name!r}): give a result, callback=, error= or timeout=")
        fails = error.times if isinstance(error, StepError) else None
        if timeout is not False and timeout is not True:
            if isinstance(timeout, bool) or timeout < 1:
                raise ValueError("timeout= is True (every attempt) or a number of attempts from 1")
            fails = timeout
        mock = StepMock(result, error, fails, timeout=timeout is not False, callback=callback)
        self._mock_rules().steps[name] = mock

    def mock_event_timeout(self, name: str) -> None:
        """Make the ``wait_for_event`` step ``name`` time out as soon as it waits."""
        validate_step_name(name)
        self._mock_rules().event_timeouts[name] = False

    def disable_sleeps(self) -> None:
        """Make sleeps end as soon as they start."""
        self._mock_rules().no_sleeps = True


def stub(rules: Rules, workflow: str, output: Any, error: str | None) -> None:
    validate_name(workflow, what="workflow name")
    rules.children[workflow] = Stub(output, error)


def _mocked_name(mock: str) -> str:
    """The step or workflow name in an entry of :meth:`Rules.unused`."""
    return mock.split("'")[1] if "'" in mock else mock


def misspelled(unused: list[str], ran: list[str]) -> list[str]:
    """The unused mocks of an instance still running that name a step close to one it ran
    unmocked: a typo (a mock for a step it has yet to reach is not one)."""
    return [m for m in unused if difflib.get_close_matches(_mocked_name(m), ran, n=1)]


def unknown_names(unused: list[str], ran: list[str]) -> str:
    """The message for mocks never used, with the step names that did run."""
    lines = []
    for mock in unused:
        close = difflib.get_close_matches(_mocked_name(mock), ran, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        lines.append(f"{mock} matched nothing that ran{hint}")
    shown = ", ".join(repr(n) for n in dict.fromkeys(ran)) or "none"
    return "; ".join(lines) + f". Steps that ran: {shown}"


class TestHooks(RuntimeHooks):
    """The toolkit's hooks: the mocks, a virtual attempt clock, and the attempts in flight."""

    __test__ = False  # not a pytest test class

    def __init__(self, clock: ManualClock) -> None:
        self.attempt_clock = RunningMarks(now=clock)
        self.marks = self.attempt_clock
        self.every = Rules()
        self.instances: dict[tuple[str, str], Rules] = {}
        self.in_flight: dict[int, str] = {}
        """Attempts running now: id -> ``workflow/id: step-count attempt n``."""

    def rules(self, key: InstanceKey) -> Rules:
        if key is None:
            return self.every
        return self.instances.setdefault(key, Rules())

    def _own(self, workflow: str, instance_id: str) -> Rules | None:
        return self.instances.get((workflow, instance_id))

    def workflow(self, instance: InstanceRecord, workflow: Workflow) -> Workflow:
        parent = instance.parent
        if parent is not None:
            own = self._own(parent["workflow"], parent["id"])
            found = own.children.get(instance.workflow) if own is not None else None
            if found is not None:
                found.used = True
                return StubWorkflow(found)
        found = self.every.children.get(instance.workflow)
        if found is not None:
            found.used = True
            return StubWorkflow(found)
        return workflow

    async def attempt(self, context: StepContext, call: Callable[[], Awaitable[Any]]) -> Any:
        own = self._own(context.workflow_name, context.instance_id)
        mock = own.steps.get(context.step_name) if own is not None else None
        if mock is None:
            mock = self.every.steps.get(context.step_name)
        label = (
            f"{context.workflow_name}/{context.instance_id}: step "
            f"{context.step_name}-{context.count} attempt {context.attempt}"
        )
        token = id(context)
        self.in_flight[token] = label
        try:
            if mock is None:
                return await call()
            return await mock.attempt(context, call)
        finally:
            del self.in_flight[token]

    def timer(
        self,
        instance: InstanceRecord,
        kind: StepKind,
        name: str,
        count: int,
        at: float,
        now: float,
    ) -> float:
        own = self._own(instance.workflow, instance.id)
        if kind == "sleep":
            return now if self.every.no_sleeps or (own is not None and own.no_sleeps) else at
        for rules in (own, self.every):
            if rules is not None and name in rules.event_timeouts:
                rules.event_timeouts[name] = True
                return now
        return at
