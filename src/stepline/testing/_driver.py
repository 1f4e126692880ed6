"""Virtual time: running the engine's worker at the clock's current time, and moving the clock
from timer to timer.

The worker is the engine's own (``worker.run_once()``: claim what is runnable now, run each
activation to its end or its next suspension). The clock moves only here, by jumps: to a timer
the store reports (a sleep's end, a retry's delay, a wait's deadline) or to where a test asked.
Each jump also sweeps the attempt clock, so a step attempt in flight times out by virtual time.
"""

from __future__ import annotations

import asyncio

from ..clock import ManualClock
from ..engine import Engine
from ._mocks import TestHooks


class StallError(AssertionError):
    """Step callbacks kept running for a long time of real time: the virtual clock does not
    move while they run, so a callback waiting for it waits for ever."""


class Driver:
    """Runs one environment's engine and moves its virtual clock."""

    __slots__ = ("_clock", "_driving", "_engine", "_hooks", "stall_after")

    def __init__(
        self, engine: Engine, clock: ManualClock, hooks: TestHooks, stall_after: float
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._hooks = hooks
        self._driving = False
        self.stall_after = stall_after
        """Real seconds a run may take before :class:`StallError` names the steps in flight."""

    @property
    def driving(self) -> bool:
        """Whether instances are running now (a step's callback may be calling the env)."""
        return self._driving

    async def run_until_idle(self) -> int:
        """Run every instance until none can go on at the current virtual time; return how many
        activations ran."""
        if self._driving:
            raise RuntimeError(
                "the env is already running instances (is this called from a step's callback?); "
                "only advance() may be awaited there, to make the step take virtual time"
            )
        self._driving = True
        try:
            task = asyncio.ensure_future(self._drain())
            done, _ = await asyncio.wait({task}, timeout=self.stall_after)
            if not done:
                running = sorted(self._hooks.in_flight.values()) or ["(none: engine work)"]
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise StallError(
                    f"instances still running after {self.stall_after:g} s of real time, in "
                    f"{', '.join(running)}; virtual time does not pass while a step's callback "
                    "runs: mock the step, or make it take virtual time with `await env.advance()`"
                )
            return task.result()
        finally:
            self._driving = False

    async def _drain(self) -> int:
        total = 0
        worker = self._engine.worker
        while ran := await worker.run_once():
            total += ran
        return total

    def move(self, to: float) -> None:
        """Set the clock forward to ``to`` (never back) and time out the attempts now due."""
        if to > self._clock():
            self._clock.set(to)
            self._hooks.attempt_clock.sweep_now()

    async def next_timer(self) -> float | None:
        """The earliest time at which an instance needs the worker, if any."""
        return await self._engine.store.next_wakeup(list(self._engine.workflows))

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward, stopping at every timer on the way, each fired at
        its own time; from a step's callback, just move it (the run under way goes on)."""
        if seconds < 0:
            raise ValueError(f"time only moves forward: cannot advance by {seconds:g} seconds")
        target = self._clock() + seconds
        if self._driving:
            self.move(target)
            # Let a timeout the move fired reach the attempt's callback here, where it waits,
            # rather than later in the engine's code.
            await asyncio.sleep(0)
            return
        while True:
            await self.run_until_idle()
            nxt = await self.next_timer()
            if nxt is None or nxt > target or nxt <= self._clock():
                break
            self.move(nxt)
        self.move(target)
        await self.run_until_idle()

    async def skip(self) -> bool:
        """Move the clock to the next timer and run what it wakes; False when nothing can
        happen without the test (no timer, nothing runnable)."""
        nxt = await self.next_timer()
        if nxt is None:
            return False
        moved = nxt > self._clock()
        self.move(nxt)
        ran = await self.run_until_idle()
        return moved or ran > 0
