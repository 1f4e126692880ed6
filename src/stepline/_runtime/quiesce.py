"""Quiescence: parked and held steps, and the test that suspends an idle activation.

A step that cannot go on now (a sleep that has not elapsed, an event that has not arrived, a
retry delay) *parks*; a new step met while recorded steps are still uncalled is *held* (see
:mod:`.divergence`). Work in flight (a step callback running, a record being written) is
counted. Once nothing is in flight and the loop has gone a few turns without progress, the
quiescence test concludes: every parked step is released with
:class:`~stepline.errors.SuspendInstance`, ``run()`` unwinds, and the instance is stored
``waiting`` until the earliest wake-up, holding no memory; or, if new steps are held, the replay
has diverged and they are released with the error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NoReturn

from ..errors import InstanceFatalError, SuspendInstance
from .divergence import ReplayCheck
from .replay import StepKey
from .signals import Terminating

_IDLE_TURNS = 3
"""Loop turns without progress after which nothing in run() is about to call a step."""

_HELD: StepKey = ("", 0)
"""The key a held step parks under when a stop suspends it (no update starts while stopping)."""

_IN_FLIGHT_POLL = 0.05
"""After run() returned: how long to wait for a step a left-behind task still runs."""


class Quiescence:
    """What one activation has in flight, parked and held, and whether it is stopping."""

    __slots__ = (
        "_after_test",
        "_check",
        "_loop",
        "_now",
        "in_flight",
        "limits",
        "on_idle",
        "parked",
        "progress",
        "stop_reason",
        "terminating",
        "testing",
        "wake_at",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        check: ReplayCheck,
        now: Callable[[], float],
        *,
        terminating: bool,
    ) -> None:
        self._loop = loop
        self._check = check
        self._now = now
        self.in_flight = 0
        """Step callbacks and record writes under way: nothing suspends meanwhile."""
        self.progress = 0
        """Bumped by every step call and every start and end of work; the test watches it."""
        self.parked: list[tuple[float | None, asyncio.Future[None], StepKey]] = []
        """Parked steps: (wake-up time or None, the future they wait on, the step's key)."""
        self.testing = False
        """The quiescence test is running (the activation may be about to suspend)."""
        self.wake_at: float | None = None
        """Once suspended: the earliest wake-up of the parked steps (None: an event's)."""
        self.limits: list[tuple[float, str]] = []
        """The parked steps waiting for a slot of a named limit: (wake-up time, limit)."""
        self.stop_reason: str | None = None
        """``"pause"`` or ``"shutdown"`` once requested: no new step starts."""
        self.terminating = terminating
        """A termination with rollback: replay up to the first unrecorded step, then roll back."""
        self._after_test: Callable[[], None] | None = None
        self.on_idle: Callable[[], bool] | None = None
        """Asked before the activation suspends (not while stopping): True if it started work
        (an update's handler, :mod:`.updates`), and the activation is not idle after all."""

    # -- work in flight --------------------------------------------------------------------------

    def begin(self) -> None:
        self.in_flight += 1
        self.progress += 1

    def end(self) -> None:
        self.in_flight -= 1
        self.progress += 1
        if self.in_flight == 0:
            self._test_if_idle()

    def request_stop(self, reason: str) -> None:
        """Start no new step (pause requested, or shutdown); running steps finish."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self._test_if_idle()

    # -- where steps wait ------------------------------------------------------------------------

    def gate_needed(self, wake_at: float | None) -> bool:
        """Whether :meth:`gate` would do anything (on a step's path, skipping it saves making a
        coroutine)."""
        return wake_at is not None or self.terminating or self.stop_reason is not None

    async def gate(
        self, key: StepKey, wake_at: float | None = None, limit: str | None = None
    ) -> None:
        """Before new work of step ``key``: park if the activation is stopping, or until
        ``wake_at`` (for a slot of named limit ``limit``, if given); raise :class:`Terminating`
        if it is terminating."""
        if self.terminating:
            raise Terminating()
        if self.stop_reason is not None:
            await self.park(None, key)
        if wake_at is not None and wake_at > self._now():
            if limit is not None:
                self.limits.append((wake_at, limit))
            await self.park(wake_at, key)

    @property
    def parked_on(self) -> str | None:
        """Once suspended: the named limit a parked step waits for a slot of, if any (the one
        whose recheck comes first)."""
        return min(self.limits)[1] if self.limits else None

    async def park(self, wake_at: float | None, key: StepKey) -> NoReturn:
        """Wait for the activation to suspend (``wake_at``: when to run again, None for an
        event) in step ``key``; raises :class:`SuspendInstance`, or the divergence error."""
        if self.terminating:
            raise Terminating()
        fut: asyncio.Future[None] = self._loop.create_future()
        self.parked.append((wake_at, fut, key))
        self.progress += 1
        self._test_if_idle()
        await fut
        raise SuspendInstance()  # pragma: no cover - the future only ever fails

    async def wait_for(self, fut: asyncio.Future[Any], key: StepKey) -> None:
        """Wait in step ``key`` for ``fut``, which the activation itself resolves (an update's
        handler replaying first, :mod:`.updates`), counted as parked meanwhile: if nothing
        resolves it the activation suspends, and this raises :class:`SuspendInstance`."""
        entry = (None, fut, key)
        self.parked.append(entry)
        self.progress += 1
        self._test_if_idle()
        try:
            await fut
        finally:
            if entry in self.parked:
                self.parked.remove(entry)
        self.progress += 1

    def abort(self, exc: BaseException) -> None:
        """Fail every parked and held step with ``exc`` (an update's handler met an error that
        ends the activation), so that every branch of run() unwinds with it."""
        parked, self.parked = self.parked, []
        held, self._check.held = self._check.held, []
        for fut in [f for _, f, _ in parked] + [f for _, f in held]:
            if not fut.done():
                fut.set_exception(exc)

    async def hold(self, key: StepKey) -> None:
        """A new step while recorded steps are still uncalled: wait until they are all called
        (then go on), or until the loop quiesces without that (the replay diverged)."""
        check = self._check
        if check.diverged is not None:
            raise check.fatal()
        if self.terminating:
            return  # the step stops at its gate: a termination rolls back, not replays
        fut: asyncio.Future[None] = self._loop.create_future()
        check.held.append((f"{key[0]}-{key[1]}", fut))
        self.progress += 1
        self._test_if_idle()
        await fut

    # -- the quiescence test ---------------------------------------------------------------------

    def unless_suspended(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the running test ends without suspending the activation."""
        self._after_test = callback

    def _test_if_idle(self) -> None:
        if self.in_flight == 0 and (self.parked or self._check.held) and not self.testing:
            self.testing = True
            self._loop.create_task(self._test())

    async def _test(self) -> None:
        """Suspend once run() is stuck on parked steps only (a few idle loop turns); or, if new
        steps are held for recorded ones that nothing calls, end the replay as diverged."""
        suspended = False
        check = self._check
        try:
            while self.in_flight == 0 and (self.parked or check.held):
                mark = self.progress
                for _ in range(_IDLE_TURNS):
                    await asyncio.sleep(0)
                if self.in_flight == 0 and mark == self.progress:
                    on_idle = self.on_idle
                    if (
                        on_idle is not None
                        and self.stop_reason is None
                        and not self.terminating
                        and not check.held
                        and on_idle()
                    ):
                        continue  # an update's handler started: not idle after all
                    if check.held and self.stop_reason is None:
                        check.diverge_at()
                        self._release_parked()
                        return
                    # Stopping (pause, shutdown): a recorded step may be parked behind the stop
                    # at its gate, so held steps suspend with the rest; the next replay decides.
                    self.parked.extend((None, fut, _HELD) for _, fut in check.held)
                    check.held = []
                    wakes = [w for w, _, _ in self.parked if w is not None]
                    self.wake_at = min(wakes) if wakes else None
                    parked, self.parked = self.parked, []
                    for _, fut, _ in parked:
                        if not fut.done():
                            fut.set_exception(SuspendInstance())
                    suspended = True
                    return
        finally:
            self.testing = False
            after, self._after_test = self._after_test, None
            if not suspended and after is not None:
                after()

    async def divergence_at_end(self) -> InstanceFatalError | None:
        """After run() returned: the replay diverged, or left recorded steps uncalled once the
        loop has quiesced (a sibling task may still be on its way to them)."""
        check = self._check
        while check.diverged is None and check.unvisited:
            mark = self.progress
            for _ in range(_IDLE_TURNS):
                await asyncio.sleep(0)
            if self.in_flight:
                await asyncio.sleep(_IN_FLIGHT_POLL)  # a step of a task run() left behind
            elif mark == self.progress and check.unvisited:
                check.diverge_at_end()
                self._release_parked()
        return check.fatal() if check.diverged is not None else None

    def _release_parked(self) -> None:
        """After a divergence: fail the held and parked steps, so every branch of run() unwinds."""
        parked, self.parked = self.parked, []
        self._check.release([fut for _, fut, _ in parked])
