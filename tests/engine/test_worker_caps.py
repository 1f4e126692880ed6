"""``worker_concurrency``: a worker runs at most that many activations of the workflow at once.
Its claims ask the store for no more (``caps``), leave out a workflow with no room, and do not
busy-loop on instances that only a slot of their own can run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow

GATE = asyncio.Event()
RUNNING = {"now": 0, "most": 0}


async def _gated_step() -> str:
    RUNNING["now"] += 1
    RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
    try:
        await GATE.wait()
    finally:
        RUNNING["now"] -= 1
    return "through"


@workflow(name="capped", worker_concurrency=2)
async def capped(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("gate", _gated_step)


@workflow(name="free")
async def free(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


def _reset() -> None:
    global GATE
    GATE = asyncio.Event()
    RUNNING.update(now=0, most=0)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


@asynccontextmanager
async def running(engine: Engine) -> AsyncIterator[None]:
    task = asyncio.create_task(engine.worker.run())
    try:
        yield
    finally:
        GATE.set()
        engine.worker.stop()
        await task


class Spy:
    """Records the claims and next_wakeup looks a worker makes of its store."""

    def __init__(self, engine: Engine) -> None:
        self.claims: list[tuple[tuple[str, ...], int, dict[str, int] | None]] = []
        self.took: dict[str, tuple[tuple[str, ...], int, dict[str, int] | None]] = {}
        """The claim that took each instance, by id."""
        self.looks: list[tuple[str, ...]] = []
        store = engine.store
        claim, next_wakeup = store.claim, store.next_wakeup

        async def spied_claim(
            owner: str, workflows: Sequence[str], limit: int, *args: Any, **kwargs: Any
        ) -> Any:
            caps = kwargs.get("caps")
            call = (tuple(workflows), limit, None if caps is None else dict(caps))
            self.claims.append(call)
            claimed = await claim(owner, workflows, limit, *args, **kwargs)
            self.took.update((c.instance.id, call) for c in claimed.claims)
            return claimed

        async def spied_next_wakeup(workflows: Sequence[str], *args: Any, **kwargs: Any) -> Any:
            self.looks.append(tuple(workflows))
            # Yield: SQLite reads may complete without, and a busy loop would then hang the
            # test instead of failing it.
            await asyncio.sleep(0)
            return await next_wakeup(workflows, *args, **kwargs)

        store.claim = spied_claim  # type: ignore[method-assign]
        store.next_wakeup = spied_next_wakeup  # type: ignore[method-assign]


async def test_claims_pass_the_room_left_and_leave_out_a_full_workflow(tmp_path: Path) -> None:
    _reset()
    async with Engine(
        f"sqlite:///{tmp_path}/x.db", [capped, free], worker=False, concurrency=10
    ) as engine:
        spy = Spy(engine)
        binding = engine.workflow("capped")
        async with running(engine):
            await until(lambda: bool(spy.claims), "the worker looked")
            await binding.create("one")
            await until(lambda: RUNNING["now"] == 1, "one runs")
            assert spy.took["one"] == (("capped", "free"), 10, {"capped": 2})
            await binding.create("two")
            await until(lambda: RUNNING["now"] == 2, "two run")
            assert spy.took["two"] == (("capped", "free"), 9, {"capped": 1})
            full = len(spy.claims), len(spy.looks)
            third = await binding.create("three")
            await until(lambda: len(spy.claims) > full[0], "the worker looked again")
            await asyncio.sleep(0.1)  # time to spin, if it did
            # "capped" is at its worker_concurrency: no claim or timer look asks for it (its
            # queued instance would look runnable now), and the loop does not spin on it.
            claims, looks = spy.claims[full[0] :], spy.looks[full[1] :]
            assert {c[0] for c in claims} == {("free",)} and {c[2] for c in claims} == {None}
            assert set(looks) <= {("free",)}
            assert len(claims) + len(looks) < 40, f"{len(claims)} claims: a busy loop"
            assert (await third.status()).status == "queued"
            assert RUNNING["most"] == 2
            GATE.set()  # the two end; their slots free: the third is claimed
            assert (await third.wait(timeout=5)).output == "through"
            assert spy.took["three"][0] == ("capped", "free")


async def test_a_worker_never_runs_more_than_its_worker_concurrency(tmp_path: Path) -> None:
    _reset()
    async with Engine(
        f"sqlite:///{tmp_path}/x.db", [capped], worker=False, concurrency=10
    ) as engine:
        batch = await engine.workflow("capped").create_batch([{} for _ in range(6)])
        async with running(engine):
            await until(lambda: RUNNING["now"] == 2, "two run")
            await asyncio.sleep(0.05)  # time to claim more, if it did
            assert RUNNING["now"] == 2
            statuses = [(await i.status()).status for i in batch]
            assert sorted(statuses) == ["queued"] * 4 + ["running"] * 2
            GATE.set()
            for instance in batch:
                assert (await instance.wait(timeout=5)).output == "through"
        assert RUNNING["most"] == 2


async def test_run_once_claims_within_the_cap(tmp_path: Path) -> None:
    _reset()
    GATE.set()
    async with Engine(
        f"sqlite:///{tmp_path}/x.db", [capped], worker=False, concurrency=10
    ) as engine:
        spy = Spy(engine)
        await engine.workflow("capped").create_batch([{} for _ in range(5)])
        assert await engine.worker.run_once() == 5
        assert spy.claims[0] == (("capped",), 2, {"capped": 2})
        assert RUNNING["most"] <= 2
