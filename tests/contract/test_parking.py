"""Every write that stops an instance running frees its slots (``flow.parking``'s rule): its
key's next in line comes back, even from a line the store set aside, and the step parked longest
on a named limit its workflow lists wakes. One test per write, on every store."""

from __future__ import annotations

import pytest

from stepline import ManualClock
from stepline.flow.parking import POSTGRES_SET_ASIDE_OVER
from stepline.limits import Limit, WorkflowLimits
from stepline.store.base import Claim, Finish, NewInstance, Store, WorkflowMeta

from ._support import LEASE, OWNER, WF, raw

BEHIND = POSTGRES_SET_ASIDE_OVER + 200
"""Instances behind a busy key: more than any store steps over before it sets them aside."""
LISTED = "listed"
"""A workflow that lists the named limit ``api``: its running instances hold a slot of it."""


async def make(store: Store, workflow: str, *items: NewInstance) -> None:
    await store.create_instances(workflow, items, trigger="api", skip_existing=False)


async def claim(store: Store, workflow: str = WF) -> list[Claim]:
    return (await store.claim(OWNER, [workflow], 10, LEASE, store.now())).claims


def set_aside(store_url: str) -> int:
    ((count,),) = raw(store_url, "SELECT count(*) FROM instances WHERE held_ready_at IS NOT NULL")
    return int(count)


async def busy_key_line(store: Store, store_url: str, clock: ManualClock) -> Claim:
    """``a1`` runs under ``key_concurrency = 1`` with a long line behind its key ``a`` (``a2``
    first) and ``b1`` runs too; the store has set the line aside. Returns ``a1``'s claim."""
    limits = WorkflowLimits(key_concurrency=1)
    await store.register_workflows([WorkflowMeta(WF, "tests:Keyed", None, limits)])
    await make(store, WF, NewInstance("a1", None, key="a"))
    clock.advance(1)
    line = [NewInstance(f"a{n}", None, key="a") for n in range(2, BEHIND + 2)]
    await make(store, WF, *line)
    clock.advance(1)
    await make(store, WF, NewInstance("b1", None, key="b"))
    running = {c.instance.id: c for c in await claim(store)}
    assert sorted(running) == ["a1", "b1"]
    for _ in range(5):  # claims that step over the line, until the store sets it aside
        if set_aside(store_url):
            break
        assert await claim(store) == []
    assert set_aside(store_url) >= BEHIND - 1
    return running["a1"]


async def stop(store: Store, clock: ManualClock, running: Claim, how: str) -> None:
    """Stop ``running`` running: its activation ends (complete, errored), suspends (waiting),
    is released, pauses at its next step (pause), is terminated or deleted; or its lease
    expires, a pause pending (``expired-pause``) or not."""
    workflow, instance_id, now = running.instance.workflow, running.instance.id, store.now()
    if how in ("pause", "expired-pause"):
        await store.control(workflow, instance_id, "pause")
    if how == "complete":
        await store.finish(running.lease, Finish("complete", output="1"), now)
    elif how == "errored":
        await store.finish(running.lease, Finish("errored", error={"name": "E"}), now)
    elif how in ("waiting", "pause"):
        await store.finish(running.lease, Finish("waiting", wake_at=now + 3600), now)
    elif how == "release":
        await store.release(running.lease, now)
    elif how == "terminate":
        await store.control(workflow, instance_id, "terminate")
    elif how == "delete":
        assert await store.retention.delete_instances(workflow, [instance_id]) == 1
    else:
        clock.advance(LEASE)


@pytest.mark.parametrize(
    "how",
    [
        "complete",
        "errored",
        "waiting",
        "release",
        "pause",
        "terminate",
        "delete",
        "expired",
        "expired-pause",
    ],
)
async def test_a_write_that_stops_an_instance_brings_back_its_keys_line_set_aside(
    store: Store, store_url: str, clock: ManualClock, how: str
) -> None:
    a1 = await busy_key_line(store, store_url, clock)
    await stop(store, clock, a1, how)
    taken = sorted(c.instance.id for c in await claim(store))
    # An expired lease frees b's key too: b1 runs again (released by nobody else).
    assert taken == (["a2", "b1"] if how.startswith("expired") else ["a2"])
    assert await claim(store) == []  # the rest of the line waits for a2


async def parked_on_api(store: Store, clock: ManualClock) -> tuple[Claim, Claim]:
    """``p`` (of a plain workflow) waits for a slot of ``api`` (concurrency 1), parked on it
    for an hour; ``x``, of a workflow that lists ``api``, runs and holds that slot, and so
    does a step of ``h``. Returns the claims of ``x`` and ``h``."""
    metas = [
        WorkflowMeta(WF, "tests:Plain"),
        WorkflowMeta(LISTED, "tests:Listed", None, WorkflowLimits(limits=("api",))),
    ]
    await store.register_workflows(metas, [Limit("api", concurrency=2)])
    await make(store, WF, NewInstance("p", None), NewInstance("h", None))
    claims = {c.instance.id: c for c in await claim(store)}
    now = store.now()
    park = Finish("waiting", wake_at=now + 3600, parked_on="api")
    await store.finish(claims["p"].lease, park, now)
    assert await store.flow.acquire_limit(claims["h"].lease, "api", "call-1", now) is None
    await make(store, LISTED, NewInstance("x", None))
    (x,) = await claim(store, LISTED)
    clock.advance(1)
    return x, claims["h"]


@pytest.mark.parametrize(
    "how", ["complete", "errored", "waiting", "release", "pause", "terminate", "delete", "slot"]
)
async def test_a_write_that_frees_a_slot_of_a_named_limit_wakes_the_step_parked_on_it(
    store: Store, clock: ManualClock, how: str
) -> None:
    x, h = await parked_on_api(store, clock)
    if how == "slot":  # a step gives its slot back
        await store.flow.release_limit(h.lease, "api", "call-1", store.now())
    else:
        await stop(store, clock, x, how)
    assert (await store.get_instance(WF, "p")).ready_at == store.now()
    assert [c.instance.id for c in await claim(store)] == ["p"]
