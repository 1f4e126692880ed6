"""The pool sync callbacks run in (stepline._threads): outcomes, its limit and backlog, late
outcomes dropped, idle threads ended, and the engine ending them when it closes."""

from __future__ import annotations

import asyncio
import os
import threading
import warnings
from typing import Any

import pytest

from stepline import Engine, WorkflowEvent, WorkflowStep, _threads, workflow
from stepline._threads import NAME, WAITS_PER_TURN, StepThreads

pytestmark = pytest.mark.both_loops


class Gate:
    """Calls that block until opened, counting how many run at once."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.threads: set[threading.Thread] = set()

    def __call__(self, value: Any) -> Any:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread())
        self.open.wait(10)
        with self.lock:
            self.running -= 1
        return value


def join(threads: Any) -> None:
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive(), f"{thread.name} did not end"


async def test_results_and_errors_reach_the_awaiting_task() -> None:
    pool = StepThreads(limit=2)
    loop = asyncio.get_running_loop()
    assert await pool.call(loop, lambda a, b: a + b, (2, 3)) == 5
    with pytest.raises(KeyError, match="missing"):
        await pool.call(loop, {}.__getitem__, ("missing",))
    pool.release_idle()


async def test_calls_past_the_limit_wait_for_a_thread_and_all_complete() -> None:
    pool = StepThreads(limit=2)
    loop = asyncio.get_running_loop()
    gate = Gate()
    futures = [pool.call(loop, gate, (n,)) for n in range(5)]
    await asyncio.sleep(0.05)
    assert not await asyncio.to_thread(pool.wait_idle, 0.05)  # calls running and queued
    gate.open.set()
    assert await asyncio.gather(*futures) == [0, 1, 2, 3, 4]
    assert gate.most == 2 and len(gate.threads) == 2
    assert pool.wait_idle(1)
    # once idle, the same threads take new calls: no thread starts past the limit
    assert await asyncio.gather(*(pool.call(loop, gate, (n,)) for n in range(4))) == [0, 1, 2, 3]
    assert len(gate.threads) == 2
    pool.release_idle()
    join(gate.threads)


async def test_a_cancelled_calls_outcome_is_dropped() -> None:
    """A call whose awaiting task gave up (a timeout, a stopped activation) runs on; what it
    returns or raises afterwards goes nowhere, and the loop reports nothing."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    pool = StepThreads(limit=2)
    for outcome in ("late", KeyError("late")):
        gate = Gate()

        def late(outcome: Any = outcome, gate: Gate = gate) -> Any:
            gate(None)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        future = pool.call(loop, late, ())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(future, 0.05)
        assert future.cancelled()
        gate.open.set()
        assert await asyncio.to_thread(pool.wait_idle, 5)
        await asyncio.sleep(0.05)  # the outcome's callback has run on the loop
    assert reported == []
    pool.release_idle()


def test_an_outcome_for_a_closed_loop_is_dropped_quietly() -> None:
    """The loop a call came from closed before the call ended (its engine and test are gone):
    the thread drops the outcome (an exception in it would be a warning, an error here)."""
    pool = StepThreads(limit=1)
    gate = Gate()
    loop = asyncio.new_event_loop()
    future = pool.call(loop, gate, ("late",))
    loop.close()
    gate.open.set()
    assert pool.wait_idle(5)
    assert not future.done()
    pool.release_idle()
    join(gate.threads)


async def test_release_idle_ends_idle_threads_and_later_calls_start_new_ones() -> None:
    pool = StepThreads(limit=3)
    loop = asyncio.get_running_loop()
    gate = Gate()
    futures = [pool.call(loop, gate, (n,)) for n in range(3)]
    gate.open.set()
    await asyncio.gather(*futures)
    pool.release_idle()  # at once: a thread is idle before its outcome is out
    join(gate.threads)
    again = await pool.call(loop, threading.current_thread, ())
    assert again not in gate.threads and again.name.startswith(NAME)
    pool.release_idle()
    join([again])


async def test_a_closed_engine_leaves_no_idle_step_thread(tmp_path: Any) -> None:
    ran: set[threading.Thread] = set()

    def one() -> int:
        ran.add(threading.current_thread())
        return 1

    @workflow(name="sync-steps")
    async def sync_steps(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await asyncio.gather(*(step.do(f"s{i}", one) for i in range(4)))

    async with Engine(f"sqlite:///{tmp_path}/db.sqlite", [sync_steps]) as engine:
        inst = await engine.workflow("sync-steps").create()
        assert (await inst.wait(timeout=10)).output == [1, 1, 1, 1]
    assert ran and all(t.name.startswith(NAME) for t in ran)
    join(ran)


async def test_a_call_into_an_idle_pool_that_ends_within_the_wait_is_done_on_return() -> None:
    """One call at a time (a sync step's usual case): the caller waits for it on its own
    thread, and the loop need not wake for it. (A long wait here: the outcome must not
    depend on how soon the machine runs the thread.)"""
    pool = StepThreads(limit=2, wait=10.0)
    loop = asyncio.get_running_loop()
    await pool.call(loop, int, ())  # starts the thread: a call that starts one does not wait
    for n in range(3):
        future = pool.call(loop, lambda n=n: n * 2, ())
        assert future.done() and future.result() == n * 2
    failed = pool.call(loop, {}.__getitem__, ("missing",))
    assert failed.done()
    with pytest.raises(KeyError, match="missing"):
        failed.result()
    pool.release_idle()


async def test_a_call_past_the_wait_or_beside_another_completes_through_the_loop() -> None:
    """A call still running when the wait runs out, and one made while another runs (no
    wait then: the loop has other calls to see to), end through the loop; a later waited
    call gets its own outcome, not a late one's."""
    pool = StepThreads(limit=3, wait=0.001)
    loop = asyncio.get_running_loop()
    await asyncio.gather(pool.call(loop, int, ()), pool.call(loop, int, ()))  # two threads
    gate = Gate()
    slow = pool.call(loop, gate, ("slow",))  # waited for 1 ms, then left to the loop
    assert not slow.done()
    quick = pool.call(loop, int, ("5",))  # to the other idle thread
    assert not quick.done()  # another call was running: not waited for
    assert await quick == 5
    gate.open.set()
    assert await slow == "slow"
    assert await asyncio.to_thread(pool.wait_idle, 5)
    for n in range(3):
        future = pool.call(loop, gate, (n,))
        assert (await future) == n
    pool.release_idle()
    join(gate.threads)


async def test_in_one_turn_of_the_loop_only_one_tasks_calls_are_waited_for() -> None:
    """Tasks ready together (instances running side by side) do not wait in turn for their
    calls: the first task's are waited for, the others' go to the threads at once."""
    pool = StepThreads(limit=2, wait=10.0)
    loop = asyncio.get_running_loop()
    await pool.call(loop, int, ())

    async def calls(n: int) -> list[bool]:
        futures = [pool.call(loop, int, (str(n),)) for _ in range(2)]
        done = [future.done() for future in futures]
        assert await asyncio.gather(*futures) == [n, n]
        return done

    first, second = await asyncio.gather(calls(1), calls(2))  # both start in one turn
    assert first == [True, True] and second == [False, False]
    await asyncio.to_thread(pool.wait_idle, 5)
    assert pool.call(loop, int, ()).done()  # a later turn: waited for again
    pool.release_idle()


async def test_a_task_calling_without_yielding_is_waited_for_a_few_calls_a_turn() -> None:
    """A task that calls and calls without yielding (each outcome already there) would hold
    the loop: past a few waited calls in one turn, its calls go through the loop."""
    pool = StepThreads(limit=2, wait=10.0)
    loop = asyncio.get_running_loop()
    await pool.call(loop, int, ())
    done = []
    for _ in range(WAITS_PER_TURN + 1):
        future = pool.call(loop, int, ())
        done.append(future.done())
        await future  # done: no turn of the loop
    assert done == [True] * WAITS_PER_TURN + [False]
    pool.release_idle()


def test_a_forked_child_waits_on_pipes_of_its_own() -> None:
    """A child forked after its parent waited for a call must not share the parent's pipes:
    a byte meant for one process's wait could be read by the other's."""
    parent = _threads._bell()
    report_read, report_write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads running
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            child = _threads._bell()
            shared = os.fstat(child.read).st_ino == os.fstat(parent.read).st_ino
            os.write(report_write, b"shared" if shared else b"own")
        finally:
            os._exit(0)
    os.close(report_write)
    try:
        assert os.read(report_read, 16) == b"own"
    finally:
        os.close(report_read)
        os.waitpid(pid, 0)
