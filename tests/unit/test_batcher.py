"""The PostgreSQL store's group commit (``Batcher``), on its own: who runs a batch, and when."""

from __future__ import annotations

import asyncio

import pytest

from stepline.store._batcher import Batcher, Busy


class Recorder:
    """A ``run`` that notes each batch and the task it ran in, and fails on 'bad' items."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.tasks: list[asyncio.Task[object] | None] = []
        self.release = asyncio.Event()
        self.release.set()

    async def run(self, items: list[str]) -> list[str | BaseException]:
        self.batches.append(list(items))
        self.tasks.append(asyncio.current_task())
        await self.release.wait()
        if "bad" in items and len(items) > 1:
            raise ValueError("one bad item spoils the batch")
        return [ValueError("bad item") if i == "bad" else i.upper() for i in items]


async def test_a_lone_item_runs_in_its_callers_task() -> None:
    recorder = Recorder()
    batcher: Batcher[str, str] = Batcher(recorder.run, key=lambda i: i)
    assert await batcher.submit("a") == "A"
    assert await batcher.submit("b") == "B"
    assert recorder.batches == [["a"], ["b"]]
    assert recorder.tasks == [asyncio.current_task()] * 2


async def test_a_lone_item_waits_for_a_flusher_while_inline_says_no() -> None:
    recorder = Recorder()
    allowed = False
    batcher: Batcher[str, str] = Batcher(recorder.run, inline=lambda: allowed)
    assert await batcher.submit("a") == "A"
    assert recorder.tasks[-1] is not asyncio.current_task()
    allowed = True
    assert await batcher.submit("b") == "B"
    assert recorder.tasks[-1] is asyncio.current_task()


async def test_items_that_come_while_one_runs_share_the_next_batch() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[str, str] = Batcher(recorder.run, key=lambda i: i)
    first = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0)  # "a" is now in flight, in the task that submitted it
    assert recorder.batches == [["a"]]
    rest = [asyncio.ensure_future(batcher.submit(i)) for i in ("b", "c", "d")]
    await asyncio.sleep(0)
    recorder.release.set()
    assert await first == "A"
    assert await asyncio.gather(*rest) == ["B", "C", "D"]
    assert recorder.batches == [["a"], ["b", "c", "d"]]  # one flusher took all three
    assert recorder.tasks[0] is first  # type: ignore[comparison-overlap]
    assert recorder.tasks[1] not in (first, *rest)


async def test_once_items_overlap_bursts_are_batched_whole_until_one_comes_alone() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[str, str] = Batcher(recorder.run, key=lambda i: i)
    first = [asyncio.ensure_future(batcher.submit(i)) for i in ("a", "b", "c")]
    await asyncio.sleep(0)
    recorder.release.set()
    await asyncio.gather(*first)
    assert recorder.batches == [["a"], ["b", "c"]]  # the first of a burst went alone, inline
    burst = [asyncio.ensure_future(batcher.submit(i)) for i in ("d", "e", "f")]
    await asyncio.gather(*burst)
    assert recorder.batches[2:] == [["d", "e", "f"]]  # items overlap now: all to one flusher
    assert recorder.tasks[2] not in burst
    assert await batcher.submit("g") == "G"  # a flusher finds it alone
    assert await batcher.submit("h") == "H"  # and the next: one at a time again
    assert recorder.tasks[3] is not asyncio.current_task()
    assert recorder.tasks[4] is not asyncio.current_task()
    assert await batcher.submit("i") == "I"
    assert recorder.batches[3:] == [["g"], ["h"], ["i"]]
    assert recorder.tasks[5] is asyncio.current_task()  # inline again


async def test_a_failing_batch_is_split_and_only_the_bad_item_fails() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[str, str] = Batcher(
        recorder.run, key=lambda i: i, split=lambda exc: isinstance(exc, ValueError)
    )
    lone = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0)
    grouped = [asyncio.ensure_future(batcher.submit(i)) for i in ("b", "bad")]
    await asyncio.sleep(0)
    recorder.release.set()
    assert await lone == "A"
    assert await grouped[0] == "B"
    with pytest.raises(ValueError, match="bad item"):
        await grouped[1]
    assert recorder.batches == [["a"], ["b", "bad"], ["b"], ["bad"]]


async def test_a_lone_items_error_is_raised_to_its_caller() -> None:
    recorder = Recorder()
    batcher: Batcher[str, str] = Batcher(recorder.run, key=lambda i: i)
    with pytest.raises(ValueError, match="bad item"):
        await batcher.submit("bad")
    assert await batcher.submit("a") == "A"  # and the batcher goes on


async def test_drain_waits_for_an_item_running_in_its_callers_task() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[str, str] = Batcher(recorder.run, key=lambda i: i)
    lone = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0)
    drained = asyncio.ensure_future(batcher.drain())
    await asyncio.sleep(0.01)
    assert not drained.done()
    recorder.release.set()
    await drained
    assert lone.done() and lone.result() == "A"


async def test_equal_keys_never_share_a_batch() -> None:
    recorder = Recorder()
    recorder.release.clear()
    batcher: Batcher[str, str] = Batcher(recorder.run, key=lambda i: i[0])
    lone = asyncio.ensure_future(batcher.submit("x0"))
    await asyncio.sleep(0)
    queued = [asyncio.ensure_future(batcher.submit(i)) for i in ("a1", "a2", "b1")]
    await asyncio.sleep(0)
    recorder.release.set()
    await asyncio.gather(lone, *queued)
    assert recorder.batches == [["x0"], ["a1", "b1"], ["a2"]]


# -- options for a run that completes without yielding (the SQLite store's group commit) ----------


async def test_by_turn_a_second_task_in_one_turn_starts_batching() -> None:
    recorder = Recorder()  # released: each run completes without yielding
    batcher: Batcher[str, str] = Batcher(recorder.run, flushers=1, max_batch=None, by_turn=True)
    assert await batcher.submit("x") == "X"
    assert await batcher.submit("y") == "Y"  # the same task again in this turn: still inline
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in ("a", "b", "c", "d")]
    assert await asyncio.gather(*tasks) == ["A", "B", "C", "D"]
    assert recorder.batches == [["x"], ["y"], ["a"], ["b", "c", "d"]]
    assert recorder.tasks[:2] == [asyncio.current_task()] * 2
    assert recorder.tasks[2] is tasks[0]  # type: ignore[comparison-overlap]
    assert recorder.tasks[3] not in tasks  # one flusher took the other three
    assert await batcher.submit("e") == "E"  # flushers find it alone twice in a row:
    assert await batcher.submit("f") == "F"  # one at a time again
    assert await batcher.submit("g") == "G"
    assert recorder.batches[4:] == [["e"], ["f"], ["g"]]
    assert recorder.tasks[4:6] != [asyncio.current_task()] * 2
    assert recorder.tasks[6] is asyncio.current_task()


async def test_without_by_turn_runs_that_never_yield_are_never_batched() -> None:
    recorder = Recorder()
    batcher: Batcher[str, str] = Batcher(recorder.run)
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in ("a", "b", "c")]
    assert await asyncio.gather(*tasks) == ["A", "B", "C"]
    assert recorder.batches == [["a"], ["b"], ["c"]]


class BusyFirst(Recorder):
    """A ``run`` that reports its first ``busy`` batches busy (it did nothing with them)."""

    def __init__(self, busy: int) -> None:
        super().__init__()
        self.busy = busy

    async def run(self, items: list[str]) -> list[str | BaseException]:
        if self.busy > 0:
            self.busy -= 1
            self.batches.append(list(items))
            return [Busy()] * len(items)
        return await super().run(items)


async def test_busy_items_run_again_after_a_backoff_with_those_queued_meanwhile() -> None:
    recorder = BusyFirst(busy=2)
    batcher: Batcher[str, str] = Batcher(
        recorder.run, flushers=1, max_batch=None, by_turn=True, backoff=(0.01, 0.02)
    )
    first = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0)
    assert recorder.batches == [["a"]] and not first.done()  # busy: waits for a flusher
    later = [asyncio.ensure_future(batcher.submit(i)) for i in ("b", "c")]
    assert await asyncio.gather(first, *later) == ["A", "B", "C"]
    assert recorder.batches == [["a"], ["a", "b", "c"], ["a", "b", "c"]]
    assert len(recorder.tasks) == 1 and recorder.tasks[0] not in (first, *later)  # a flusher's


async def test_a_busy_item_whose_caller_is_cancelled_still_runs() -> None:
    recorder = BusyFirst(busy=1)
    batcher: Batcher[str, str] = Batcher(
        recorder.run, flushers=1, by_turn=True, backoff=(0.01, 0.02)
    )
    caller = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await batcher.drain()
    assert recorder.batches == [["a"], ["a"]]  # run again, in a flusher, though nobody waits


async def test_one_lone_item_between_bursts_does_not_make_the_next_burst_start_inline() -> None:
    """A worker's claim between two waves of step writes: run inline, the first write of the
    next wave would commit alone, and every wave would pay for two commits."""
    recorder = Recorder()  # released: each run completes without yielding
    batcher: Batcher[str, str] = Batcher(recorder.run, flushers=1, max_batch=None, by_turn=True)
    for wave in ("ab", "cd"):
        burst = [asyncio.ensure_future(batcher.submit(f"{wave}{n}")) for n in range(3)]
        await asyncio.gather(*burst)
        await asyncio.sleep(0)  # a turn later, the claim, alone
        await asyncio.ensure_future(batcher.submit(f"claim-{wave}"))
    assert recorder.batches[2:] == [["claim-ab"], ["cd0", "cd1", "cd2"], ["claim-cd"]]
