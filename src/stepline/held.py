"""Why a runnable instance has not started: the flow control limits that hold it back.

An instance that is due to run but stays queued (or waits to resume) is held back by a full
limit: its workflow's concurrency, its rate, its key's concurrency, or a named limit's.
``describe``, the HTTP API and the dashboard show :func:`held_reasons` for it, from what the
store reports of each limit (:meth:`stepline.store.base.Store.limit_states`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .records import InstanceRecord, LimitState
from .store.base import Store


async def read_held_reasons(store: Store, record: InstanceRecord) -> list[str]:
    """:func:`held_reasons` for ``record``, reading the limit states only if it is due."""
    now = store.now()
    if not record.due(now):
        return []
    return held_reasons(record, await store.flow.limit_states(record.workflow, record.key), now)


def held_reasons(record: InstanceRecord, states: Sequence[LimitState], now: float) -> list[str]:
    """One phrase per full limit holding ``record`` back, in the store's order:
    ``concurrency 10/10``, ``rate limit: next start in 12 s``, ``key customer-42 busy (1/1)``,
    ``limit openai: concurrency 5/5``; empty when none is full."""
    if not record.due(now):
        return []
    starting = record.started_at is None
    reasons: list[str] = []
    for state in states:
        at_capacity = state.concurrency is not None and state.running >= state.concurrency
        rate_spent = starting and state.next_start is not None
        if not (at_capacity or rate_spent):
            continue
        if state.scope == "key":
            reasons.append(f"key {state.name} busy ({state.running}/{state.concurrency})")
            continue
        prefix = "" if state.scope == "workflow" else f"limit {state.name}: "
        if at_capacity:
            reasons.append(f"{prefix}concurrency {state.running}/{state.concurrency}")
        if rate_spent and state.next_start is not None:
            wait = max(0, math.ceil(state.next_start - now))
            reasons.append(f"{prefix}rate limit: next start in {wait} s")
    return reasons
