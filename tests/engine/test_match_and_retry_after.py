"""wait_for_event(match=...): only a matching event ends the wait, the others stay pending for
other waits; a predicate that raises does not match. RetryAfter: the step's own delay before
its next attempt, within the retry limit, beside the retries.delay callable."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from stepline import (
    ManualClock,
    RetryAfter,
    StepContext,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)

from ..conftest import EngineFactory, drain

TIMES: list[float] = []


class Approvals(Workflow):
    name = "approvals"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        mine = await step.wait_for_event(
            "mine", type="approval", match={"order_id": event.payload["order"]}
        )
        big = await step.wait_for_event("big", type="approval", match=lambda p: p["amount"] > 100)
        other = await step.wait_for_event("any", type="approval")
        return [mine.payload, big.payload, other.payload]


@workflow(name="polite")
async def polite(event: WorkflowEvent, step: WorkflowStep) -> Any:
    def call(ctx: StepContext) -> str:
        TIMES.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RetryAfter("30 seconds", RuntimeError(f"429 on attempt {ctx.attempt}"))
        return "served"

    return await step.do("call", {"retries": {"limit": 2, "delay": "1 hour"}}, call)


@workflow(name="impatient")
async def impatient(event: WorkflowEvent, step: WorkflowStep) -> Any:
    def call() -> str:
        raise RetryAfter(5, RuntimeError("429"))

    delays: list[Any] = []

    def delay(attempt: int, error: BaseException) -> float:
        delays.append(attempt)
        return 3600.0

    try:
        return await step.do("call", {"retries": {"limit": 1, "delay": delay}}, call)
    except Exception as exc:
        return {"failed": str(exc), "delay called": delays}


@pytest.fixture(autouse=True)
def _reset() -> None:
    TIMES.clear()


async def test_only_a_matching_event_ends_the_wait_and_the_others_stay_pending(
    make_engine: EngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async with make_engine([Approvals]) as engine:
        inst = await engine.workflow("approvals").create(id="a", params={"order": 7})
        await drain(engine)
        await inst.send_event("approval", {"order_id": 8, "amount": 5})
        await inst.send_event("approval", "not a dict")
        await drain(engine)
        assert (await inst.status()).status == "waiting"
        await inst.send_event("approval", {"order_id": 7, "amount": 1})
        with caplog.at_level(logging.WARNING, "stepline.runtime"):
            await drain(engine)
        # the predicate of "big" raised on "not a dict": it did not match, and said so
        assert "the predicate of wait_for_event 'big-1' raised TypeError" in caplog.text
        assert (await inst.status()).status == "waiting"
        await inst.send_event("approval", {"order_id": 9, "amount": 500})
        await drain(engine)
        status = await inst.status()
        assert status.status == "complete"
        assert status.output == [
            {"order_id": 7, "amount": 1},
            {"order_id": 9, "amount": 500},
            {"order_id": 8, "amount": 5},  # left pending by the waits it did not match
        ]
        consumed = {e.consumed_by for e in await inst.events()}
        assert consumed == {"mine-1", "big-1", "any-1", None}  # "not a dict" is still pending


async def test_match_must_be_a_dict_or_a_predicate(make_engine: EngineFactory) -> None:
    @workflow(name="bad-match")
    async def bad(event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.wait_for_event("w", type="t", match=["order_id"])  # type: ignore[arg-type]

    async with make_engine([bad]) as engine:
        inst = await engine.workflow("bad-match").create(id="b")
        await drain(engine)
        status = await inst.status()
        assert status.status == "errored"
        assert "match must be a dict of payload keys and values" in (status.error or {})["message"]


async def test_retry_after_sets_the_next_attempts_delay_within_the_limit(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    async with make_engine([polite, impatient], clock=clock) as engine:
        inst = await engine.workflow("polite").create(id="p")
        await drain(engine)
        assert TIMES == [1]
        [step] = await inst.steps()
        assert step.wake_at == pytest.approx(clock() + 30)  # not the configured hour
        assert step.attempts[0].error == {"name": "RuntimeError", "message": "429 on attempt 1"}
        clock.advance(31)
        await drain(engine)
        assert TIMES == [1, 2]
        clock.advance(31)
        await drain(engine)
        assert (await inst.status()).output == "served"
        # the limit still counts: one retry, then the cause's error; the callable not called
        other = await engine.workflow("impatient").create(id="i")
        await drain(engine)
        clock.advance(6)
        await drain(engine)
        output = (await other.status()).output
        assert output == {"failed": "step 'call-1' failed: RuntimeError: 429", "delay called": []}


def test_retry_after_checks_its_delay() -> None:
    with pytest.raises(ValueError, match="RetryAfter delay"):
        RetryAfter("soon")
    error = RetryAfter(90, KeyError("x"))
    assert error.seconds == 90.0 and error.__cause__ is error.cause
    assert str(error) == "KeyError: 'x'; retry after 1.5 minutes"
