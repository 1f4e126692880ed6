"""The timer hint a claim leaves for the worker's next look (``store/_hint``)."""

from __future__ import annotations

from stepline.store._hint import TimerHint


def test_a_hint_answers_one_look_at_the_same_workflows_or_some_of_them() -> None:
    hint = TimerHint()
    hint.keep(("a", "b"), hint.begin(), 12.5)
    assert hint.take(("a", "b")) == (True, 12.5)
    assert hint.take(("a", "b")) == (False, None)  # used up
    hint.keep(("a", "b"), hint.begin(), None)  # no timer at all is an answer too
    assert hint.take(("b",)) == (True, None)
    hint.keep(("a",), hint.begin(), 3.0)
    assert hint.take(("a", "c")) == (False, None)  # c was not claimed: its timers are unknown


def test_a_hint_is_stale_once_something_became_runnable_after_its_claim_began() -> None:
    hint = TimerHint()
    begun = hint.begin()
    hint.changed()  # while the claim ran
    hint.keep(("a",), begun, 5.0)
    assert hint.take(("a",)) == (False, None)
    hint.keep(("a",), hint.begin(), 5.0)
    hint.clear()
    assert hint.take(("a",)) == (False, None)
