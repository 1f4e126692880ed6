"""The claim loop's pacing: a poll that finds work makes the next polls quick, a claim that
answers a wake does not; woken only by ends under a limit, a claim asks for as many as ended,
and if it takes fewer, the next polls are quick."""

from __future__ import annotations

from stepline.worker._planning import Pacing


def _pacing() -> Pacing:
    pacing = Pacing()
    pacing.start(0.002, 0.5)
    return pacing


def test_waits_double_up_to_the_longest_and_a_poll_that_finds_work_resets_them() -> None:
    pacing = _pacing()
    for _ in range(12):
        pacing.waited(False)
    assert pacing.wait == 0.5
    pacing.claimed(50, 0)  # a poll (the last wait timed out) that found nothing
    assert pacing.wait == 0.5
    pacing.claimed(50, 3)  # one that found work
    assert pacing.wait == 0.002


def test_a_claim_answering_a_wake_leaves_the_wait_as_it_is() -> None:
    pacing = _pacing()
    pacing.waited(False)
    pacing.waited(True)  # woken: the coming claim answers this process, not a poll
    pacing.claimed(50, 3)
    assert pacing.wait == 0.008


def test_woken_only_by_ends_under_a_limit_a_claim_asks_for_as_many_as_ended() -> None:
    pacing = _pacing()
    assert pacing.ask(50) == (50, False)  # the first look: in full
    pacing.held_end()
    pacing.held_end()
    pacing.waited(True)
    assert pacing.ask(50) == (2, True)
    assert pacing.ask(50) == (50, False)  # nothing ended since: woken for another reason
    pacing.held_end()
    pacing.told()  # and something else came: in full
    assert pacing.ask(50) == (50, False)
    pacing.held_end()
    pacing.waited(False)  # a poll: in full
    assert pacing.ask(50) == (50, False)
    pacing.held_end()
    pacing.waited(True)
    assert pacing.ask(0) == (0, True)  # never more than the free slots


def test_an_answer_to_its_own_ends_that_comes_back_short_makes_the_next_polls_quick() -> None:
    """A peer's claim took the keys its ends freed: they come back once the peer, above its
    split, is capped, and a worker running none of them finds them only by polling."""
    pacing = _pacing()
    for _ in range(12):
        pacing.waited(True)
        pacing.waited(False)
    pacing.held_end()
    pacing.held_end()
    pacing.waited(True)
    assert pacing.ask(50) == (2, True)
    pacing.claimed(2, 2)
    assert pacing.wait == 0.5
    pacing.held_end()
    pacing.held_end()
    assert pacing.ask(50) == (2, True)
    pacing.claimed(2, 1)  # no peer runs such work: its keys simply had nothing more
    assert pacing.wait == 0.5
    pacing.held_end()
    pacing.held_end()
    assert pacing.ask(50) == (2, True)
    pacing.claimed(2, 1, contested=True)
    assert pacing.wait == 0.002
    for _ in range(12):
        pacing.waited(False)
    pacing.waited(True)
    assert pacing.ask(50) == (50, False)  # not an answer: short says nothing
    pacing.claimed(50, 1, contested=True)
    assert pacing.wait == 0.5
