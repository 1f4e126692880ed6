"""The step writer's order: records commit in the order they were sent, or together, also when
a cancellation cuts a write off (``_runtime/writer.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from stepline._runtime.divergence import ReplayCheck
from stepline._runtime.quiesce import Quiescence
from stepline._runtime.writer import StepRef, StepWriter
from stepline.store.base import Lease, StepWrite


class Recorder:
    """A store's ``record_step`` that logs what was submitted and what committed, and holds
    the writes of the names in ``hold`` until released."""

    def __init__(self, *hold: str) -> None:
        self.submitted: list[tuple[str, list[str]]] = []
        self.committed: list[str] = []
        self.held = {name: asyncio.Event() for name in hold}

    async def record_step(self, lease: Lease, write: StepWrite, now: float) -> str:
        self.submitted.append((write.name, list(self.committed)))
        gate = self.held.get(write.name)
        if gate is not None:
            await gate.wait()
        self.committed.append(write.name)
        return "running"

    def now(self) -> float:
        return 0.0


def writer_for(store: Recorder) -> StepWriter:
    loop = asyncio.get_running_loop()
    quiet = Quiescence(loop, ReplayCheck([]), store.now, terminating=False)
    return StepWriter(store, Lease(1, 1, "w"), set(), quiet, loop)  # type: ignore[arg-type]


def ref(name: str) -> StepRef:
    return StepRef((name, 1), 1, "do")


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_group_is_written_once_the_group_before_it_committed() -> None:
    store = Recorder("a")
    writer = writer_for(store)
    writer.send(ref("a"), "complete")
    await turn()  # "a" is in flight, held
    writer.send(ref("b"), "complete")
    await turn()
    assert [name for name, _ in store.submitted] == ["a"]  # "b" waits for "a"
    store.held["a"].set()
    await writer.committed()
    assert store.submitted == [("a", []), ("b", ["a"])]


async def test_one_tasks_records_of_a_turn_go_in_order_and_different_tasks_at_once() -> None:
    store = Recorder("a")
    writer = writer_for(store)

    async def sends(*names: str) -> None:
        for name in names:
            writer.send(ref(name), "complete")

    await asyncio.gather(sends("a", "b"), sends("c"))  # one turn
    await turn()
    assert {name for name, _ in store.submitted} == {"a", "c"}  # "b" after "a", "c" beside
    store.held["a"].set()
    await writer.committed()
    assert ("b", ["c", "a"]) in store.submitted or ("b", ["a", "c"]) in store.submitted


async def test_a_cancelled_write_puts_its_records_back_and_the_next_groups_after_them() -> None:
    store = Recorder("a")
    writer = writer_for(store)

    async def step_then_next() -> None:
        writer.send(ref("a"), "complete")
        await writer.committed()  # in the same turn: writes "a" from this task

    caller = asyncio.create_task(step_then_next())
    await turn()
    writer.send(ref("b"), "complete")  # a group of its own, after "a"
    await turn()
    writer.send(ref("c"), "complete")  # and one after "b"
    await turn()
    caller.cancel()  # cuts the write of "a" off
    await asyncio.gather(caller, return_exceptions=True)
    await turn()
    assert [name for name, _ in store.submitted] == ["a"]
    # All unsent again, in their order: the finish carries them in its transaction.
    carried: Any = await writer.for_finish()
    assert [write.name for write in carried] == ["a", "b", "c"]
