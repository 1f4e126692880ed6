"""Slots of named limits that single steps take (``step.do(..., {"limit": name}, fn)``): whether
one is free, by the same counting as a claim's (``rules.UsagePlan``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..limits import Limit
from .rules import reopen_time


@dataclass(frozen=True)
class SlotUse:
    """A named limit's use, as a store reads it under the limit's lock for a step asking."""

    running: int
    """What runs against the limit: the running instances of the workflows listing it, plus
    the live slots, less one per listing instance holding some (it counts once per slot)."""
    counted: bool
    """Whether the instance asking already counts: it runs as an instance of a listing
    workflow and holds no live slot of the limit, so its first slot costs nothing."""
    started: int
    """Starts within the rate's period (slots taken, first starts of the listing workflows'
    instances), counted up to the rate's count."""
    edge: float | None
    """The rate's ``count``-th latest start, if there are that many."""


def slot_wait(limit: Limit, use: SlotUse) -> float | None:
    """None if a step may take a slot of ``limit`` now; else when to ask again: when the rate
    reopens if the rate is what is used up, else ``math.inf`` (only a release makes room)."""
    if (
        limit.concurrency is not None
        and use.running + (0 if use.counted else 1) > limit.concurrency
    ):
        return math.inf
    rate = limit.rate
    if rate is not None and use.started >= rate.count and use.edge is not None:
        return reopen_time(use.edge, rate.period)
    return None
