"""A worker whose claims a fleet-wide limit held back claims again as soon as one of its own
activations of that workflow ends (the slot it freed is written), not at its next poll: with a
poll interval of an hour (and no quick polls after activity), a backlog under
``concurrency = 1`` still drains."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow

from ..conftest import EngineFactory

COUNT = 6


@workflow(name="one-at-a-time", concurrency=1)
async def one_at_a_time(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


async def drain_without_polling(
    engine: Engine,
    name: str,
    keys: int = 0,
    before: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Create COUNT instances of ``name`` (instance n, ``in``, with key ``k{n % keys}`` if
    ``keys``), await ``before`` if given, and run the worker, which never polls, until all have
    completed."""
    binding = engine.workflow(name)
    handles = [
        await binding.create(f"i{n}", key=f"k{n % keys}" if keys else None) for n in range(COUNT)
    ]
    if before is not None:
        await before()
    worker = engine.worker
    # No poll at all: on SQLite the loop would otherwise look again within milliseconds.
    worker.settings = dataclasses.replace(
        worker.settings, poll_interval=3600.0, min_poll_interval=3600.0
    )
    task = asyncio.create_task(worker.run())
    try:
        # A generous bound: without the wake-up every instance after the first waits for a
        # poll an hour away, so this fails; with it, they all end within moments.
        await asyncio.wait_for(asyncio.gather(*(h.wait() for h in handles)), timeout=60)
    finally:
        worker.stop()
        await task
    assert [(await h.status()).status for h in handles] == ["complete"] * COUNT


async def test_a_backlog_under_a_limit_drains_without_polling(make_engine: EngineFactory) -> None:
    async with make_engine([one_at_a_time]) as engine:
        await drain_without_polling(engine, "one-at-a-time")


@workflow(name="two-at-a-time", concurrency=2, worker_concurrency=2)
async def two_at_a_time(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


async def test_a_worker_makes_no_claim_that_the_limit_must_refuse(
    make_engine: EngineFactory,
) -> None:
    """An activation under a fleet-wide limit holds its slot in the store until its finish
    lands: the worker claims its successor once the finish is written, not while it is in
    flight (that claim would find the limit full: on PostgreSQL three round trips behind the
    limit's lock, on SQLite a read of due instances inside the write lock)."""
    async with make_engine([two_at_a_time]) as engine:
        store = engine.store
        claim, finish = store.claim, store.finish
        unclaimed = COUNT
        refused: list[int] = []

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal unclaimed
            claimed = await claim(*args, **kwargs)
            if not claimed.claims and unclaimed:
                refused.append(unclaimed)
            unclaimed -= len(claimed.claims)
            return claimed

        async def slow_finish(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0.05)  # a loaded server: the finish is long in flight
            return await finish(*args, **kwargs)

        store.claim = counted  # type: ignore[method-assign]
        store.finish = slow_finish  # type: ignore[method-assign]
        await drain_without_polling(engine, "two-at-a-time")
    assert refused == [], f"claims refused while this many were left: {refused}"


@workflow(name="per-key", key_concurrency=1)
async def per_key(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


async def test_a_claim_that_answers_its_own_ends_asks_for_as_many_as_ended(
    make_engine: EngineFactory,
) -> None:
    """Woken only by the ends of its instances under a limit, the worker asks for as many
    instances as ended, not for every free slot: under a key limit a claim that cannot fill
    its ask reads past every held key to the end of the due backlog."""
    async with make_engine([per_key]) as engine:
        store = engine.store
        claim, next_wakeup = store.claim, store.next_wakeup
        asked: list[tuple[int, int] | str] = []

        async def counted(owner: str, workflows: Any, limit: int, *args: Any, **kw: Any) -> Any:
            claimed = await claim(owner, workflows, limit, *args, **kw)
            asked.append((limit, len(claimed.claims)))
            return claimed

        async def looked(workflows: Any, *args: Any, **kw: Any) -> Any:
            found = await next_wakeup(workflows, *args, **kw)
            if found is not None and found <= store.now():
                # Something is runnable now, its end not yet seen in this process (its finish
                # committed, its reply not yet handled): the claim that follows is a look.
                asked.append("due")
            return found

        store.claim = counted  # type: ignore[method-assign]
        store.next_wakeup = looked  # type: ignore[method-assign]
        await drain_without_polling(engine, "per-key", keys=2)
    first, *rest = asked
    assert first == (engine.worker.settings.claim_batch, 2)  # a look: one per key
    answers = [
        entry
        for before, entry in zip([first, *rest], rest, strict=False)
        if before != "due" and not isinstance(entry, str)
    ]
    assert answers, asked
    assert all(limit <= 2 for limit, _taken in answers), asked


@workflow(name="in-pairs", concurrency=2)
async def in_pairs(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("only", lambda: "done")


async def finish_odd_ones_late(
    engine: Engine, name: str, count: int, landed: asyncio.Event | None = None
) -> None:
    """Make the finishes of the first ``count`` instances of ``name`` land in pairs, the odd
    one late: ``i0``'s finish is sent once ``i1``'s is (so that it lands with ``i1``'s in
    flight), ``i1``'s after 0.1 s more, or once ``landed`` is set; and so on."""
    store = engine.store
    finish = store.finish
    pks = [(await store.get_instance(name, f"i{n}")).pk for n in range(count)]
    sent = {pk: asyncio.Event() for pk in pks[1::2]}
    partner = dict(zip(pks[::2], pks[1::2], strict=False))

    async def paired(lease: Any, *args: Any, **kwargs: Any) -> Any:
        if lease.pk in sent:
            sent[lease.pk].set()
            if landed is None:
                await asyncio.sleep(0.1)
            else:
                await landed.wait()
        elif lease.pk in partner:
            await sent[partner[lease.pk]].wait()
        return await finish(lease, *args, **kwargs)

    store.finish = paired  # type: ignore[method-assign]


async def test_an_answer_waits_for_the_finishes_of_its_own_in_flight(
    make_engine: EngineFactory,
) -> None:
    """A worker whose next claim would only answer its own ends waits for the finishes of
    instances under the limit that are still in flight: one claim answers them all, where a
    claim per finish batch would split the instances that start together into ever smaller
    groups (each a claim, each step write a statement of its own)."""
    async with make_engine([in_pairs]) as engine:
        store = engine.store
        claim = store.claim
        asked: list[tuple[int, int]] = []

        async def counted(owner: str, workflows: Any, limit: int, *args: Any, **kw: Any) -> Any:
            claimed = await claim(owner, workflows, limit, *args, **kw)
            asked.append((limit, len(claimed.claims)))
            return claimed

        store.claim = counted  # type: ignore[method-assign]
        await drain_without_polling(
            engine, "in-pairs", before=lambda: finish_odd_ones_late(engine, "in-pairs", COUNT)
        )
    first, *answers = asked
    assert first == (engine.worker.settings.claim_batch, 2), asked
    # Each pair ends together, the finish of one late: each answer asks for both.
    assert answers and all(limit == 2 for limit, _taken in answers), asked
    assert sum(taken for _limit, taken in asked) == COUNT, asked


async def test_a_finish_long_in_flight_holds_up_no_claim_past_a_poll(
    make_engine: EngineFactory,
) -> None:
    """The wait for finishes in flight ends at the next poll: a finish that does not land
    (a slow or unreachable server) does not keep the slot that the other end freed idle."""
    async with make_engine([in_pairs], poll_interval=0.05) as engine:
        landed = asyncio.Event()
        binding = engine.workflow("in-pairs")
        handles = [await binding.create(f"i{n}") for n in range(3)]
        await finish_odd_ones_late(engine, "in-pairs", 3, landed)
        task = asyncio.create_task(engine.worker.run())
        try:
            # i0 and i1 run; i1's finish hangs; i2 takes the slot i0 freed at a poll.
            await asyncio.wait_for(handles[2].wait(), timeout=30)
            assert (await handles[1].status()).status == "running"
        finally:
            landed.set()
            engine.worker.stop()
            await task
