"""Virtual time: running the engine's worker at the clock's current time, and moving the clock
from timer to timer.

The worker is the engine's own (``worker.run_once()``: claim what is runnable now, run each
activation to its end or its next suspension). The clock moves only here, by jumps: to a timer
the store reports (a sleep's end, a retry's delay, a wait's deadline) or to where a test asked.
Each jump also sweeps the attempt clock, so a step attempt in flight times out by virtual time.
"""

from __future__ import annotations

import asyncio

from .._runtime.calls import IN_CALLBACK
from ..clock import ManualClock
from ..engine import Engine
from ._mocks import TestHooks


class StallError(AssertionError):
    """Step callbacks kept running for a long time of real time: the virtual clock does not
    move while they run, so a callback waiting for it waits for ever."""


class Driver:
    """Runs one environment's engine and moves its virtual clock."""

    __slots__ = ("_clock", "_engine", "_hooks", "_lock", "stall_after")

    def __init__(
        self, engine: Engine, clock: ManualClock, hooks: TestHooks, stall_after: float
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._hooks = hooks
        self._lock = asyncio.Lock()
        """Held while instances run: a test's concurrent calls take turns."""
        self.stall_after = stall_after
        """Real seconds a run may take before :class:`StallError` names the steps in flight."""

    @staticmethod
    def in_callback() -> bool:
        """Whether the caller is a step's callback (run by the env itself)."""
        return IN_CALLBACK.get() is not None

    async def run_until_idle(self) -> int:
        """Run every instance until none can go on at the current virtual time; return how many
        activations ran."""
        if self.in_callback():
            raise RuntimeError(
                "a step's callback cannot run the env's instances (it runs inside that run); "
                "only advance() may be awaited there, to make the step take virtual time"
            )
        async with self._lock:
            return await self._run()

    async def _run(self) -> int:
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
        """The earliest time at which an instance needs the worker, if any (a deadline too)."""
        store, workflows = self._engine.store, list(self._engine.workflows)
        nxt = await self._engine.worker.next_wakeup()  # routed: what its worker would claim
        deadline = await store.closing.expire_deadlines(workflows, store.now())
        if deadline is not None and (nxt is None or deadline < nxt):
            return deadline
        return nxt

    async def advance(self, seconds: float) -> int:
        """Move the clock ``seconds`` forward, stopping at every timer on the way, each fired at
        its own time; return how many activations ran. From a step's callback, just move it
        (the run under way goes on) and return 0."""
        if seconds < 0:
            raise ValueError(f"time only moves forward: cannot advance by {seconds:g} seconds")
        target = self._clock() + seconds
        if self.in_callback():
            self.move(target)
            # Let a timeout the move fired reach the attempt's callback here, where it waits,
            # rather than later in the engine's code.
            await asyncio.sleep(0)
            return 0
        ran = 0
        async with self._lock:
            while True:
                ran += await self._run()
                nxt = await self.next_timer()
                if nxt is None or nxt > target or nxt <= self._clock():
                    break
                self.move(nxt)
            self.move(target)
            return ran + await self._run()

    async def skip(self) -> bool:
        """Move the clock to the next timer and run what it wakes; False when nothing can
        happen without the test (no timer, nothing runnable)."""
        async with self._lock:
            nxt = await self.next_timer()
            if nxt is None:
                return False
            moved = nxt > self._clock()
            self.move(nxt)
            ran = await self._run()
            return moved or ran > 0
