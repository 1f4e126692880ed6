"""Fixtures of the fault-injection suite: seeds, rounds and a log of what each scenario did.

Every scenario takes its randomness from ``chaos_seeds`` and prints what it did (kills, outages,
instances, duplicates observed), so a failure can be read from CI's log and replayed with
``--chaos-seed``. ``--chaos-rounds N`` runs each scenario N times with consecutive seeds, for a
longer run before a release.
"""

from __future__ import annotations

import random

import pytest


@pytest.fixture
def chaos_seeds(request: pytest.FixtureRequest) -> list[int]:
    """The seeds of this run's rounds: ``--chaos-seed`` (default random), then the next ones."""
    rounds = max(1, int(request.config.getoption("--chaos-rounds")))
    first = request.config.getoption("--chaos-seed")
    if first is None:
        first = random.SystemRandom().randrange(1, 2**31)
    return [int(first) + n for n in range(rounds)]


def say(message: str) -> None:
    """One line of a scenario's report, printed so that it shows in CI's log."""
    print(f"[chaos] {message}", flush=True)
