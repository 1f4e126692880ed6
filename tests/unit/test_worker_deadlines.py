"""The claim loop's deadlines (worker/_deadlines.py): when it asks the store, what it keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stepline.errors import StoreUnavailableError
from stepline.worker._deadlines import Deadlines


class FakeStore:
    """A store whose closing concern (``store.closing``) is itself: only what Deadlines uses."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.asked: list[tuple[list[str], float]] = []
        self.clock = 100.0
        self.closing = self

    def now(self) -> float:
        return self.clock

    async def expire_deadlines(self, workflows: Sequence[str], now: float) -> float | None:
        self.asked.append((list(workflows), now))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]


async def test_it_asks_once_then_again_when_the_known_deadline_comes() -> None:
    store = FakeStore([150.0, None])
    registry = {"a": 1}
    deadlines = Deadlines(store, registry.keys())  # type: ignore[arg-type]
    assert deadlines.next_at is None  # not looked yet
    await deadlines.expire()
    await deadlines.expire()  # within the recheck, nothing due: no second look
    assert deadlines.next_at == 150.0 and len(store.asked) == 1
    registry["b"] = 2  # a registry that grows is read at each look
    store.clock = 150.0
    await deadlines.expire()
    assert store.asked[-1] == (["a", "b"], 150.0) and deadlines.next_at is None


async def test_a_store_error_is_no_timer_to_spin_on() -> None:
    store = FakeStore([StoreUnavailableError("down")])
    deadlines = Deadlines(store, ["a"])  # type: ignore[arg-type]
    await deadlines.expire()
    assert deadlines.next_at is None
    await deadlines.expire()  # the recheck has not come: no new look
    assert len(store.asked) == 1


async def test_always_looks_for_a_test_driven_worker() -> None:
    store = FakeStore([500.0, 500.0])
    deadlines = Deadlines(store, ["a"])  # type: ignore[arg-type]
    await deadlines.expire()
    await deadlines.expire(always=True)
    assert len(store.asked) == 2
