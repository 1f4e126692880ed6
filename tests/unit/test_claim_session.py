"""One claim's decisions (``stepline.flow.claiming``), apart from any store: what it takes and
holds back, when it reads again, and what it tells the worker of its next look."""

from __future__ import annotations

from collections import Counter

from stepline.flow.claiming import ClaimSession, Due, NextLook, Offer
from stepline.flow.parking import SetAside
from stepline.flow.rules import NO_RULES, Rules, Usage
from stepline.limits import Rate, WorkflowLimits


def due(pk: int, workflow: str = "w", key: str | None = None, *, starting: bool = True) -> Due:
    return Due(pk, workflow, key, 100.0 + pk, starting=starting, queued=True)


def rules(**limits: WorkflowLimits) -> Rules:
    return Rules(limits, {})


def test_without_limits_every_due_instance_is_taken_up_to_the_claims_size() -> None:
    session = ClaimSession(NO_RULES, Usage(), ["w"], 2)
    assert not session.limited
    assert [session.offer(due(n)) for n in (1, 2)] == [Offer.TAKEN, Offer.TAKEN]
    assert session.full and session.remaining == 0
    assert not session.read_more(asked=2, returned=2)


def test_a_pause_pending_is_carried_out_whatever_the_limits() -> None:
    full = Usage(running=Counter({"w": 1}))
    session = ClaimSession(rules(w=WorkflowLimits(concurrency=1)), full, ["w"], 5)
    pausing = Due(7, "w", None, 1.0, starting=False, queued=False, pausing=True)
    assert session.offer(pausing) is Offer.PAUSED
    assert session.pauses == [7] and session.taken == []


def test_what_a_claim_takes_changes_what_the_next_read_leaves_out() -> None:
    session = ClaimSession(rules(w=WorkflowLimits(key_concurrency=1)), Usage(), ["w", "v"], 5)
    assert session.leaves_out().full_keys == []
    assert session.offer(due(1, key="k")) is Offer.TAKEN
    # Its key is full now: the instance behind it is held back, and set aside if queued.
    assert session.offer(due(2, key="k")) is Offer.HELD
    assert session.behind_full_keys == {2: ("w", "k")}
    assert session.leaves_out().full_keys == [("w", "k")]
    assert session.offer(due(3, "v")) is Offer.TAKEN


def test_a_limit_filled_by_the_claim_is_a_change_of_what_a_read_leaves_out() -> None:
    session = ClaimSession(rules(w=WorkflowLimits(concurrency=1)), Usage(), ["w", "v"], 5)
    assert session.leaves_out().active == ["w", "v"]
    assert session.offer(due(1)) is Offer.TAKEN
    assert session.offer(due(2)) is Offer.CHANGED
    assert session.leaves_out().active == ["v"]
    assert session.offer(due(3)) is Offer.HELD  # no more change


def test_reads_stop_when_full_short_or_nothing_may_run_and_at_the_cap() -> None:
    session = ClaimSession(NO_RULES, Usage(), ["w"], 10, reads=2)
    session.offer(due(1))
    assert not session.read_more(asked=10, returned=1)  # short: nothing more is due
    assert session.read_all
    capped = ClaimSession(rules(w=WorkflowLimits(key_concurrency=1)), Usage(), ["w"], 10, reads=2)
    for n in range(10):
        capped.offer(due(n, key="k"))
    assert capped.read_more(asked=10, returned=10)  # full read, room left: again
    assert not capped.read_more(asked=9, returned=9)  # the cap
    assert not capped.read_all


def test_the_next_look_of_a_short_claim_is_its_earliest_timer() -> None:
    session = ClaimSession(NO_RULES, Usage(), ["w"], 5)
    session.offer(due(1))
    assert session.next_look(more=None, timer=130.0) == NextLook(130.0)
    assert ClaimSession(NO_RULES, Usage(), ["w"], 5).next_look(more=None, timer=None) == NextLook(
        None
    )


def test_a_full_claim_tells_the_next_look_only_if_nothing_more_can_run() -> None:
    limited = rules(w=WorkflowLimits(concurrency=1))
    session = ClaimSession(limited, Usage(), ["w"], 1)
    session.offer(due(1))
    assert session.held_all()
    assert session.next_look(more=None, timer=130.0) == NextLook(130.0)
    roomy = ClaimSession(rules(w=WorkflowLimits(concurrency=5)), Usage(), ["w"], 1)
    roomy.offer(due(1))
    assert roomy.next_look(more=None, timer=130.0) is None  # unknown
    assert roomy.next_look(more=True, timer=130.0) is None
    assert roomy.next_look(more=False, timer=130.0) == NextLook(130.0)


def test_a_start_that_used_up_a_rate_leaves_the_next_look_unknown() -> None:
    rated = rules(w=WorkflowLimits(rate=Rate(1, 60.0)), v=WorkflowLimits())
    session = ClaimSession(rated, Usage(), ["w", "v"], 5)
    assert session.offer(due(1)) is Offer.TAKEN
    assert session.admission is not None and session.admission.filled_rate
    assert session.next_look(more=None, timer=130.0) is None


def test_a_used_up_rate_sets_the_next_look_to_its_reopening() -> None:
    rated = rules(w=WorkflowLimits(rate=Rate(1, 60.0)))
    usage = Usage(started=Counter({"w": 1}), reopens={"workflow:w": 160.0})
    session = ClaimSession(rated, usage, ["w"], 5)
    assert session.leaves_out().no_starts == ["w"]
    assert session.next_look(more=None, timer=200.0, rate_held=["w"]) == NextLook(160.0)
    assert session.next_look(more=None, timer=200.0, rate_held=[]) == NextLook(200.0)
    assert session.next_look(more=None, timer=None, rate_held=None) == NextLook(160.0)


def test_queues_are_set_aside_after_claims_in_a_row_step_over_many() -> None:
    policy = SetAside(over=100, claims=3)
    workflows = ("k",)
    assert not policy.may(workflows)
    policy.claimed(workflows, policy.stepped_over(500))
    policy.claimed(workflows, policy.stepped_over(500))
    assert policy.may(workflows)  # the third in a row that steps over many sets aside
    policy.claimed(workflows, policy.stepped_over(50))
    assert not policy.may(workflows)
    assert SetAside(over=0, claims=1).may(workflows)  # SQLite's: at once
