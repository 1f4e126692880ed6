"""Key-limited work spreads over the workers that run it: while a peer with room runs fewer of
a workflow's instances than an even split, a worker takes no more than that split, leaving the
keys its instances free to the peer (``worker._planning``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.errors import StoreUnavailableError
from stepline.records import WorkerInfo
from stepline.worker import _shares
from stepline.worker._planning import Balance, WorkflowCaps
from stepline.worker._slots import Slots
from stepline.workflow import definition_of

from .test_fleet_shares import until_listed
from .test_worker_caps import until

GATES: dict[int, asyncio.Event] = {}


@workflow(name="keyed", key_concurrency=1)
async def keyed(event: WorkflowEvent, step: WorkflowStep) -> Any:
    number: int = event.payload["n"]

    async def gated() -> int:
        await GATES[number].wait()
        return number

    return await step.do("gate", gated)


def _worker(
    worker_id: str,
    *,
    workflows: tuple[str, ...] = ("keyed",),
    running: int = 0,
    age: float = 0,
) -> WorkerInfo:
    now = time.time()
    return WorkerInfo(worker_id, "host", 1, now - 60, now - age, 5.0, workflows, 10, running)


def _confirmed(
    balance: Balance, running: dict[tuple[str, str], int], workers: list[WorkerInfo]
) -> dict[str, int]:
    """The caps after two reads of the same counts: a lag is acted on once confirmed."""
    balance.caps(running, workers, time.time())
    return balance.caps(running, workers, time.time())


def test_a_worker_caps_itself_at_an_even_split_only_while_a_peer_lags() -> None:
    me, peer = _worker("me"), _worker("b")
    assert _confirmed(Balance({"keyed": None}, "me", 10), {("me", "keyed"): 8}, [me]) == {}
    assert _confirmed(Balance({"keyed": None}, "me", 10), {("me", "keyed"): 8}, [me, peer]) == {
        "keyed": 4
    }
    # Within SLACK of even is even: no cap, each worker keeps the keys it frees.
    even = {("me", "keyed"): 5, ("b", "keyed"): 3}
    assert _confirmed(Balance({"keyed": None}, "me", 10), even, [me, peer]) == {}
    lagging = {("me", "keyed"): 7, ("b", "keyed"): 2}
    assert _confirmed(Balance({"keyed": None}, "me", 10), lagging, [me, peer]) == {"keyed": 5}
    three = [me, peer, _worker("c")]
    assert _confirmed(Balance({"keyed": None}, "me", 10), {("me", "keyed"): 9}, three) == {
        "keyed": 3
    }


def test_a_lag_seen_in_one_read_only_caps_nothing() -> None:
    """Instances that start together end together: read while a worker claims their
    successors, its count is nothing for a moment. Acted on, that read would cap its peer at
    half its split and drain the keys from it."""
    now = time.time()
    workers = [_worker("me"), _worker("b")]
    balance = Balance({"keyed": None}, "me", 10)
    assert balance.caps({("me", "keyed"): 5}, workers, now) == {}  # b between two rounds
    assert balance.confirming
    assert balance.caps({("me", "keyed"): 5, ("b", "keyed"): 5}, workers, now) == {}
    assert not balance.confirming
    # Confirmed, the split goes by the larger count of the two reads.
    assert balance.caps({("me", "keyed"): 10}, workers, now) == {}
    assert balance.caps({("me", "keyed"): 6}, workers, now) == {"keyed": 5}
    assert not balance.confirming


def test_a_peer_that_does_not_take_the_freed_keys_does_not_shrink_the_split() -> None:
    now = time.time()
    balance = Balance({"keyed": None}, "me", 10)
    workers = [_worker("me"), _worker("b")]
    assert _confirmed(balance, {("me", "keyed"): 10}, workers) == {"keyed": 5}
    # The worker drained to its split, the peer took nothing: the split stays at 5.
    assert balance.caps({("me", "keyed"): 5}, workers, now) == {"keyed": 5}
    assert balance.caps({("me", "keyed"): 4, ("b", "keyed"): 4}, workers, now) == {}
    # Once even, the largest count seen is forgotten.
    assert _confirmed(balance, {("me", "keyed"): 6}, workers) == {"keyed": 3}


def test_a_fleet_that_runs_nothing_yet_splits_each_workers_slots() -> None:
    """Workers that start together with a backlog of keys waiting: the first to claim would
    otherwise take every key it has slots for, and keep them as they end."""
    now = time.time()
    workers = [_worker("me"), _worker("b"), _worker("c")]
    assert Balance({"keyed": None}, "me", 10).caps({}, workers, now) == {"keyed": 4}
    assert Balance({"keyed": 2}, "me", 10).caps({}, workers, now) == {"keyed": 1}
    assert Balance({"keyed": None}, "me", 10).caps({}, [_worker("me")], now) == {}  # alone
    # Once something runs, the split goes by what runs.
    balance = Balance({"keyed": None}, "me", 10)
    assert balance.caps({("me", "keyed"): 4, ("b", "keyed"): 3}, workers[:2], now) == {}


def test_peers_that_cannot_take_more_are_not_waited_for() -> None:
    now = time.time()
    counts = {("me", "keyed"): 8}
    not_peers = [
        _worker("dead", age=60),  # its heartbeat is too old
        _worker("full", running=10),  # no free slot at its last heartbeat
        _worker("other", workflows=("something-else",)),
    ]
    assert Balance({"keyed": None}, "me", 10).caps(counts, [_worker("me"), *not_peers], now) == {}
    # At its worker_concurrency for the workflow, a peer has no room for it either.
    capped = Balance({"keyed": 3}, "me", 10)
    pair = [_worker("me"), _worker("b")]
    assert _confirmed(capped, {**counts, ("b", "keyed"): 3}, pair) == {}
    assert _confirmed(capped, {**counts, ("b", "keyed"): 1}, pair) == {"keyed": 5}


def test_a_worker_behind_a_peer_that_runs_clearly_more_catches_up_to_an_even_split() -> None:
    """The peer caps itself at that split and leaves the keys it frees: the worker asks for
    them at its next claim (``WorkflowCaps.behind``)."""
    now = time.time()
    me, peer, dead = _worker("me"), _worker("b"), _worker("dead", age=60)
    balance = Balance({"keyed": None}, "me", 10)
    assert balance.catch_up({("b", "keyed"): 8}, [me, peer], now) == {"keyed": 4}
    assert balance.catch_up({("me", "keyed"): 2, ("b", "keyed"): 8}, [me, peer], now) == {
        "keyed": 5
    }
    # Within SLACK of even, on either side: nothing to catch up.
    assert balance.catch_up({("me", "keyed"): 4, ("b", "keyed"): 6}, [me, peer], now) == {}
    assert balance.catch_up({("me", "keyed"): 3, ("b", "keyed"): 6}, [me, peer], now) == {}
    assert balance.catch_up({("me", "keyed"): 8}, [me, peer], now) == {}  # ahead
    assert balance.catch_up({("dead", "keyed"): 8}, [me, dead], now) == {}
    # A peer running more even without a free slot: it caps itself once the worker lags.
    full = _worker("b", running=10)
    assert balance.catch_up({("b", "keyed"): 8}, [me, full], now) == {"keyed": 4}
    assert Balance({"keyed": 3}, "me", 10).catch_up({("b", "keyed"): 8}, [me, peer], now) == {
        "keyed": 3
    }


class _Fleet:
    """A store's worker list and counts, as ``FleetShares.refresh`` reads them: by default
    this worker runs nothing of ``keyed``, its peer 8."""

    def __init__(self, pushes_notifications: bool, mine: int = 0, peers: int = 8) -> None:
        self.pushes_notifications = pushes_notifications
        self.counts = {("me", "keyed"): mine, ("b", "keyed"): peers}
        self.reads = 0
        self.read_times: list[float] = []
        self.alone = False

    def now(self) -> float:
        return time.time()

    @property
    def workers(self) -> _Fleet:  # the store's record of workers
        return self

    @property
    def flow(self) -> _Fleet:  # the store's flow operations (running_by_worker)
        return self

    def shares(self) -> tuple[_shares.FleetShares, WorkflowCaps]:
        """``FleetShares`` of worker "me" (10 slots, ``keyed`` registered) on this fleet."""
        registry = {"keyed": definition_of(keyed)}
        caps = WorkflowCaps(registry)
        return _shares.FleetShares(self, "me", registry, caps, 10), caps  # type: ignore[arg-type]

    async def list_workers(self) -> list[WorkerInfo]:
        self.reads += 1
        self.read_times.append(time.monotonic())
        if self.alone:
            return [_worker("me")]
        return [_worker("me"), _worker("b", running=self.counts["b", "keyed"])]

    async def running_by_worker(self, workflows: Any, now: float) -> dict[tuple[str, str], int]:
        return self.counts


@pytest.mark.parametrize(("pushes", "behind"), [(True, 4), (False, 0)])
async def test_only_a_worker_that_polls_slowly_asks_for_what_it_is_behind(
    pushes: bool, behind: int
) -> None:
    """With notifications (PostgreSQL) a worker polls every half second, and the keys a capped
    peer leaves would wait for it; without (SQLite) it polls within milliseconds and finds
    them, and the extra ask would only take keys its peer is about to claim."""
    fleet, caps = _Fleet(pushes).shares()
    await fleet.refresh()
    assert caps.behind(Slots(10)) == behind


@asynccontextmanager
async def _one_worker(tmp_path: Path) -> AsyncIterator[tuple[Engine, list[Any]]]:
    """A worker that never polls (a claim after a poll would ask in full), running one
    instance of each of 4 keys, 8 instances in all; every instance's gate opens at the end."""
    GATES.clear()
    GATES.update({n: asyncio.Event() for n in range(8)})
    async with Engine(f"sqlite:///{tmp_path}/x.db", [keyed], worker=False) as engine:
        worker = engine.worker
        handles = [
            await engine.workflow("keyed").create(params={"n": n}, key=f"k{n % 4}")
            for n in range(8)
        ]
        worker.settings = dataclasses.replace(
            worker.settings, poll_interval=3600.0, min_poll_interval=3600.0
        )
        task = asyncio.create_task(worker.run())
        try:
            await until(lambda: worker.active_count == 4, "one runs per key")
            yield engine, handles
            for gate in GATES.values():
                gate.set()
            assert [(await h.wait(timeout=10)).output for h in handles] == list(range(8))
        finally:
            for gate in GATES.values():
                gate.set()
            worker.stop()
            await task


async def test_a_claim_answering_its_own_ends_also_asks_for_what_the_worker_is_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without it, a worker behind an even split asks for as many as ended, never grows, and
    the keys its capped peer leaves wait for its next poll."""
    monkeypatch.setattr(_shares, "REFRESH", 3600.0)  # the catch-up is set here, not read
    async with _one_worker(tmp_path) as (engine, _):
        worker, store = engine.worker, engine.store
        claim = store.claim
        asked: list[int] = []

        async def counted(owner: str, workflows: Any, limit: int, *args: Any, **kw: Any) -> Any:
            asked.append(limit)
            return await claim(owner, workflows, limit, *args, **kw)

        store.claim = counted  # type: ignore[method-assign]
        worker._caps.set_catch_up({"keyed": 6})  # a peer runs clearly more
        GATES[0].set()  # one ends: three run, three short of six
        await until(lambda: bool(asked), "the worker claims")
        assert asked[0] == 1 + 3


@dataclasses.dataclass
class _Pair:
    """Two workers on one database, 16 instances over 8 keys, the first worker running."""

    first: Engine
    second: Engine
    handles: list[Any]
    tasks: list[asyncio.Task[None]]

    def start_second(self) -> None:
        self.tasks.append(asyncio.create_task(self.second.worker.run()))

    async def outputs(self) -> list[Any]:
        for gate in GATES.values():
            gate.set()
        return [(await h.wait(timeout=10)).output for h in self.handles]


@asynccontextmanager
async def _pair(tmp_path: Path) -> AsyncIterator[_Pair]:
    GATES.clear()
    GATES.update({n: asyncio.Event() for n in range(16)})
    url = f"sqlite:///{tmp_path}/x.db"
    first = Engine(url, [keyed], worker=False, worker_id="first")
    second = Engine(url, [keyed], worker=False, worker_id="second")
    async with first, second:
        handles = [
            await first.workflow("keyed").create(params={"n": n}, key=f"k{n % 8}")
            for n in range(16)
        ]
        pair = _Pair(first, second, handles, [asyncio.create_task(first.worker.run())])
        try:
            await until(lambda: first.worker.active_count == 8, "the first runs one per key")
            yield pair
        finally:
            for gate in GATES.values():
                gate.set()
            first.worker.stop()
            second.worker.stop()
            await asyncio.gather(*pair.tasks)


async def test_a_second_worker_gets_the_keys_the_first_frees_until_the_split_is_even(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shares, "REFRESH", 0.05)
    async with _pair(tmp_path) as pair:
        first, second = pair.first, pair.second
        pair.start_second()
        await until_listed(first, {"first", "second"})
        await until(lambda: bool(first.worker._caps.shares), "the first sees a lagging peer")
        assert first.worker._caps.shares == {"keyed": 4}
        for n in range(4):  # four of the first's instances end: their keys go to the second
            GATES[n].set()
        await until(lambda: second.worker.active_count == 4, "the second takes four")
        await asyncio.sleep(0.1)
        assert (first.worker.active_count, second.worker.active_count) == (4, 4)
        # Even now: the cap lifts, and each worker keeps the keys it frees.
        await until(lambda: not first.worker._caps.shares, "the cap lifts")
        assert await pair.outputs() == list(range(16))


async def test_a_worker_sees_a_peer_that_joins_just_after_it_within_its_first_refreshes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers started together: the first to join reads the worker list before the others
    are on it, claims every key it has room for, and would keep them until its next refresh
    (a second later, here never) while its peers idle. Its first refreshes come quickly."""
    monkeypatch.setattr(_shares, "REFRESH", 3600.0)
    monkeypatch.setattr(_shares, "FIRST_REFRESH", 0.02)
    async with _pair(tmp_path) as pair:
        first, second = pair.first, pair.second
        pair.start_second()
        await until(lambda: bool(first.worker._caps.shares), "the first sees its peer")
        assert first.worker._caps.shares == {"keyed": 4}
        for n in range(4):
            GATES[n].set()
        await until(lambda: second.worker.active_count == 4, "the second takes four")
        assert await pair.outputs() == list(range(16))


async def _waits(fleet: _Fleet, reads: int) -> tuple[list[float], WorkflowCaps]:
    """The waits of ``FleetShares.loop`` before its first ``reads`` reads, and the caps set."""
    waits: list[float] = []

    async def pause(seconds: float) -> None:
        if len(waits) == reads:
            raise asyncio.CancelledError
        waits.append(seconds)

    shares, caps = fleet.shares()
    shares._pause = pause  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await shares.loop()
    return waits, caps


async def test_the_worker_list_is_read_quickly_at_first_then_every_refresh() -> None:
    waits, _ = await _waits(_Fleet(False), 8)
    assert waits == [_shares.FIRST_REFRESH * 2**n for n in range(5)] + [_shares.REFRESH] * 3
    assert _shares.FIRST_REFRESH * 2**4 < _shares.REFRESH <= _shares.FIRST_REFRESH * 2**5


async def test_a_lag_is_confirmed_by_a_read_soon_after_the_one_that_found_it() -> None:
    fleet = _Fleet(False, mine=8, peers=0)
    waits, caps = await _waits(fleet, 2)
    assert waits == [_shares.FIRST_REFRESH, _shares.CONFIRM]
    assert caps.shares == {"keyed": 4}


async def test_a_failed_read_is_not_retried_at_once_while_a_lag_awaits_confirmation() -> None:
    fleet = _Fleet(False, mine=8, peers=0)
    reads = 0
    running_by_worker = fleet.running_by_worker

    async def failing(workflows: Any, now: float) -> dict[tuple[str, str], int]:
        nonlocal reads
        reads += 1
        if reads > 1:
            raise StoreUnavailableError("the database is unavailable")
        return await running_by_worker(workflows, now)

    fleet.running_by_worker = failing  # type: ignore[method-assign]
    waits, caps = await _waits(fleet, 3)
    assert waits == [_shares.FIRST_REFRESH, _shares.CONFIRM, _shares.FIRST_REFRESH * 2]
    assert caps.shares == {}


@asynccontextmanager
async def _looping(fleet: _Fleet) -> AsyncIterator[_shares.FleetShares]:
    """``FleetShares`` on ``fleet``, read once, its loop running with no refresh due."""
    shares, _ = fleet.shares()
    await shares.refresh()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_shares, "REFRESH", 3600.0)
        patch.setattr(_shares, "FIRST_REFRESH", 3600.0)
        task = asyncio.create_task(shares.loop())
        try:
            await asyncio.sleep(0.06)  # past the confirming wait from the first read
            yield shares
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.parametrize(
    ("alone", "workflows", "read"),
    [(False, ["keyed"], True), (False, ["other"], False), (True, ["keyed"], False)],
)
async def test_a_claim_that_took_balanced_work_beyond_its_own_ends_reads_the_fleet_at_once(
    alone: bool, workflows: list[str], read: bool
) -> None:
    """Such a claim (a poll, say) may take the keys a peer's instances have just freed before
    the peer's own claim; the peer then runs none of them until a read caps this worker."""
    fleet = _Fleet(False)
    fleet.alone = alone
    async with _looping(fleet) as shares:
        shares.took(workflows)
        if read:
            await until(lambda: fleet.reads == 2, "the fleet is read again")
        else:
            await asyncio.sleep(0.05)
            assert fleet.reads == 1


async def test_only_claims_beyond_the_workers_own_ends_report_what_they_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shares, "REFRESH", 3600.0)
    took: list[list[str]] = []

    def record(workflows: Iterable[str]) -> None:
        took.append(list(workflows))

    monkeypatch.setattr(_shares.FleetShares, "took", lambda self, workflows: record(workflows))
    async with _one_worker(tmp_path) as (engine, handles):
        assert took == [["keyed"] * 4]  # the first claim, a poll
        GATES[0].set()  # one ends: the claim that answers it asks for one
        assert (await handles[0].wait(timeout=10)).output == 0
        await until(lambda: engine.worker.active_count == 4, "its key's next one runs")
        assert took == [["keyed"] * 4]


@pytest.mark.parametrize(("alone", "contested"), [(False, True), (True, False)])
async def test_a_fleet_is_contested_while_peers_may_run_its_balanced_work(
    alone: bool, contested: bool
) -> None:
    fleet = _Fleet(False)
    fleet.alone = alone
    shares, _ = fleet.shares()
    assert not shares.contested  # not read yet
    await shares.refresh()
    assert shares.contested is contested


async def test_reads_a_claim_triggers_are_spaced_by_the_confirming_wait() -> None:
    """Polls that keep finding new keyed work must not read the fleet at every one of them."""
    fleet = _Fleet(False)
    async with _looping(fleet) as shares:
        shares.took(["keyed"])
        await until(lambda: fleet.reads == 2, "the fleet is read again")
        shares.took(["keyed"])
        await until(lambda: fleet.reads == 3, "the fleet is read a third time")
        second, third = fleet.read_times[1:]
        assert third - second >= _shares.CONFIRM
