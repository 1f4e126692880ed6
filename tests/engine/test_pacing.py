"""The claim loop's pacing: a poll that finds work makes the next polls quick, a claim that
answers a wake does not; woken only by ends under a limit, a claim asks for as many as ended."""

from __future__ import annotations

from stepline.worker._pacing import Pacing


def _pacing() -> Pacing:
    pacing = Pacing()
    pacing.start(0.002, 0.5)
    return pacing


def test_waits_double_up_to_the_longest_and_a_poll_that_finds_work_resets_them() -> None:
    pacing = _pacing()
    for _ in range(12):
        pacing.waited(False)
    assert pacing.wait == 0.5
    pacing.found()  # the coming claim is a poll (the last wait timed out)
    assert pacing.wait == 0.002


def test_a_claim_answering_a_wake_leaves_the_wait_as_it_is() -> None:
    pacing = _pacing()
    pacing.waited(False)
    pacing.waited(True)  # woken: the coming claim answers this process, not a poll
    pacing.found()
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
